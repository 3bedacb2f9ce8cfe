"""The simulator's data plane: request arrival, dispatch, processor-sharing execution and
completion, compiled with numba over flat arrays.

The control plane (KPA ticks, pod creation and scheduling, scale-down) runs in Python between
calls of :func:`run_segment`, which advances the data plane to a time limit (the next 1 s scrape
boundary) or stops early when an arrival needs the autoscaler at once (Knative's poke of a revision
at zero). Everything the control plane needs to read or change lives in the flat arrays that
:class:`testbed.sim.engine.Simulation` owns and passes in; their column layout is given by the
constants below. Internal helpers are inlined (``inline="always"``): a numba call that passes
twenty arrays costs reference counting per array, which dominated the event cost before.

Execution model (per node, event-driven processor sharing):

- a request in its CPU phase needs ``work`` core-seconds at speed 1.0 and is single-threaded, so it
  uses at most one core; a pod's requests together use at most the pod's CPU limit;
- node demand ``D = sum_pods min(k_p, limit_p)`` over the pods' CPU-active request counts ``k_p``;
  if ``D`` exceeds the node's cores every pod is slowed by ``cores / D`` (fair sharing, as CFS
  gives runnable threads with quotas); a request progresses at
  ``speed * min(1, cores/D) * min(1, limit_p / k_p)`` work units per second;
- each pod keeps a virtual clock ``V_p`` (work done by each of its requests), advanced lazily, and
  a binary heap of its requests' virtual finish times; a node keeps the list of its CPU-active pods
  and its incrementally maintained demand, so a change costs O(1) while the node's share is
  unchanged and O(active pods on the node) when it changes, never O(requests); the next completion
  of each node sits in an indexed heap over nodes;
- after the CPU phase a request waits ``io`` seconds (timer heap) holding its concurrency slot.

Dispatch: one FIFO per function (the activator's per-revision breaker queue); its head goes to a
ready pod with a free slot chosen by the activator's load-balancing policy for the revision's
containerConcurrency (``pkg/activator/net/throttler.go``, ``lb_policy.go``): random choice of two
(the less loaded, ties by a coin) for CC 0, first available for CC <= 3, round robin otherwise. The
same dispatch is used when the activator is out of the path (the ingress balances over the pods
and the queue-proxy queues), a simplification. ``FI_FREE`` counts ready pods with a free slot, so
a saturated revision costs nothing to try. A request whose pod or node would run out of memory
fails at once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

INF = np.inf

# --- request columns ------------------------------------------------------------------------
RF_T, RF_WORK, RF_MEM, RF_IO, RF_START, RF_FINISH = 0, 1, 2, 3, 4, 5
RF_COLS = 6
RI_FN, RI_POD, RI_STATUS, RI_COLD, RI_NODE, RI_UID = 0, 1, 2, 3, 4, 5
RI_COLS = 6
ST_PENDING, ST_OK, ST_ERROR, ST_TIMEOUT = 0, 1, 2, 3

# --- function columns ------------------------------------------------------------------------
FI_NEXT, FI_ARRIVED, FI_INSYS, FI_ARRIVALS, FI_WATCH, FI_NPODS, FI_START, FI_END, FI_QMAX = 0, 1, 2, 3, 4, 5, 6, 7, 8
FI_NREADY, FI_FREE, FI_RR, FI_CC = 9, 10, 11, 12
FI_COLS = 13
FF_AREA, FF_LAST = 0, 1
FF_COLS = 2

# --- pod columns -----------------------------------------------------------------------------
PI_FN, PI_NODE, PI_STATE, PI_CAP, PI_INFLIGHT, PI_K, PI_HOFF, PI_HSIZE, PI_UID, PI_ACTPOS = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
PI_COLS = 10
PF_READY, PF_LIMIT, PF_MEM, PF_MEMLIM, PF_V, PF_RATE, PF_LAST, PF_NEXT = 0, 1, 2, 3, 4, 5, 6, 7
PF_COLS = 8
POD_FREE, POD_STARTING, POD_READY, POD_DRAINING, POD_DONE = 0, 1, 2, 3, 4

# --- node columns ----------------------------------------------------------------------------
NF_CORES, NF_SPEED, NF_MEMCAP, NF_MEMUSED, NF_DEMAND, NF_SHARE, NF_ARG = 0, 1, 2, 3, 4, 5, 6
NF_INTERF, NF_LOADSLOW = 7, 8
NF_COLS = 9

# --- counters (int64 array) ------------------------------------------------------------------
C_NEXT_ARRIVAL, C_TIMERS, C_FINISHED, C_STOP_FN, C_EVENTS = 0, 1, 2, 3, 4
C_COLS = 5

STOP_LIMIT, STOP_POKE = 0, 1


# ============================================================================================
# heaps
# ============================================================================================


@njit(cache=True, inline="always", error_model="numpy")
def _timer_push(tt, tc, counters, t, code):
    i = counters[C_TIMERS]
    counters[C_TIMERS] = i + 1
    tt[i] = t
    tc[i] = code
    while i > 0:
        parent = (i - 1) >> 1
        if tt[parent] < tt[i] or (tt[parent] == tt[i] and tc[parent] <= tc[i]):
            break
        tt[parent], tt[i] = tt[i], tt[parent]
        tc[parent], tc[i] = tc[i], tc[parent]
        i = parent


@njit(cache=True, inline="always", error_model="numpy")
def _timer_pop(tt, tc, counters):
    n = counters[C_TIMERS] - 1
    code = tc[0]
    counters[C_TIMERS] = n
    tt[0] = tt[n]
    tc[0] = tc[n]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        right = left + 1
        c = left
        if right < n and (tt[right] < tt[left] or (tt[right] == tt[left] and tc[right] < tc[left])):
            c = right
        if tt[i] < tt[c] or (tt[i] == tt[c] and tc[i] <= tc[c]):
            break
        tt[c], tt[i] = tt[i], tt[c]
        tc[c], tc[i] = tc[i], tc[c]
        i = c
    return code


@njit(cache=True, error_model="numpy")
def timer_push(tt, tc, counters, t, code):
    """Schedule a timer (``code >= 0``: a request's I/O ends; ``code < 0``: pod ``-code-1`` is ready)."""
    _timer_push(tt, tc, counters, t, code)


@njit(cache=True, inline="always", error_model="numpy")
def _nh_update(nh_key, nh_pos, nh_heap, n, key):
    """Indexed min-heap over nodes: set node ``n``'s key and restore the heap."""
    old = nh_key[n]
    nh_key[n] = key
    i = nh_pos[n]
    size = nh_heap.shape[0]
    if key < old:
        while i > 0:
            parent = (i - 1) >> 1
            pn = nh_heap[parent]
            if nh_key[pn] <= key:
                break
            nh_heap[i] = pn
            nh_pos[pn] = i
            i = parent
    else:
        while True:
            left = 2 * i + 1
            if left >= size:
                break
            c = left
            right = left + 1
            if right < size and nh_key[nh_heap[right]] < nh_key[nh_heap[left]]:
                c = right
            cn = nh_heap[c]
            if nh_key[cn] >= key:
                break
            nh_heap[i] = cn
            nh_pos[cn] = i
            i = c
    nh_heap[i] = n
    nh_pos[n] = i


@njit(cache=True, inline="always", error_model="numpy")
def _ph_push(hv, hr, off, size, v, r):
    i = size
    hv[off + i] = v
    hr[off + i] = r
    while i > 0:
        parent = (i - 1) >> 1
        if hv[off + parent] <= hv[off + i]:
            break
        hv[off + parent], hv[off + i] = hv[off + i], hv[off + parent]
        hr[off + parent], hr[off + i] = hr[off + i], hr[off + parent]
        i = parent


@njit(cache=True, inline="always", error_model="numpy")
def _ph_pop(hv, hr, off, size):
    r = hr[off]
    n = size - 1
    hv[off] = hv[off + n]
    hr[off] = hr[off + n]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        c = left
        right = left + 1
        if right < n and hv[off + right] < hv[off + left]:
            c = right
        if hv[off + i] <= hv[off + c]:
            break
        hv[off + c], hv[off + i] = hv[off + i], hv[off + c]
        hr[off + c], hr[off + i] = hr[off + i], hr[off + c]
        i = c
    return r


# ============================================================================================
# processor sharing on a node
# ============================================================================================


@njit(cache=True, inline="always", error_model="numpy")
def _pod_advance(p, t, pf):
    """Bring pod ``p``'s virtual clock to ``t`` at its current rate."""
    dt = t - pf[p, PF_LAST]
    if dt > 0.0:
        pf[p, PF_V] += pf[p, PF_RATE] * dt
    pf[p, PF_LAST] = t


@njit(cache=True, inline="always", error_model="numpy")
def _cap_k(k, lim):
    return k if k < lim else lim


@njit(cache=True, inline="always", error_model="numpy")
def _node_change(n, p, t, nf, n_act, n_nact, pi, pf, hv, nh_key, nh_pos, nh_heap):
    """Pod ``p`` on node ``n`` (already advanced to ``t``) changed its CPU-active count: new rates and
    the node's next completion. If the node's share is unchanged only ``p``'s rate changes; else
    every active pod is advanced at its old rate and re-rated."""
    demand = nf[n, NF_DEMAND]
    cores = nf[n, NF_CORES]
    share = 1.0 if demand <= cores else cores / demand
    # the truth's structural mismatch (testbed.sim.mismatch; 0 in every twin): co-located busy
    # pods slow each other (caches, memory bandwidth), and a node slows as it fills (turbo, SMT)
    interf = nf[n, NF_INTERF]
    if interf > 0.0 and n_nact[n] > 1:
        share = share / (1.0 + interf * (n_nact[n] - 1))
    loadslow = nf[n, NF_LOADSLOW]
    if loadslow > 0.0:
        share = share / (1.0 + loadslow * (demand if demand < cores else cores) / cores)
    speed = nf[n, NF_SPEED]
    if share == nf[n, NF_SHARE]:
        k = pi[p, PI_K]
        if k > 0:
            per = pf[p, PF_LIMIT] / k
            rate = speed * share * (per if per < 1.0 else 1.0)
            pf[p, PF_RATE] = rate
            d = (hv[pi[p, PI_HOFF]] - pf[p, PF_V]) / rate
            pf[p, PF_NEXT] = t + (d if d > 0.0 else 0.0)
    else:
        nf[n, NF_SHARE] = share
        for j in range(n_nact[n]):
            q = n_act[n, j]
            _pod_advance(q, t, pf)
            per = pf[q, PF_LIMIT] / pi[q, PI_K]
            rate = speed * share * (per if per < 1.0 else 1.0)
            pf[q, PF_RATE] = rate
            d = (hv[pi[q, PI_HOFF]] - pf[q, PF_V]) / rate
            pf[q, PF_NEXT] = t + (d if d > 0.0 else 0.0)
    best = INF
    arg = -1
    for j in range(n_nact[n]):
        q = n_act[n, j]
        if pf[q, PF_NEXT] < best:
            best = pf[q, PF_NEXT]
            arg = q
    nf[n, NF_ARG] = arg
    _nh_update(nh_key, nh_pos, nh_heap, n, best)


@njit(cache=True, inline="always", error_model="numpy")
def _cpu_enter(p, n, t, work, r, nf, n_act, n_nact, pi, pf, hv, hr, nh_key, nh_pos, nh_heap):
    k = pi[p, PI_K]
    if k == 0:
        pf[p, PF_LAST] = t  # an idle pod's clock stands still
        j = n_nact[n]
        n_act[n, j] = p
        pi[p, PI_ACTPOS] = j
        n_nact[n] = j + 1
    else:
        _pod_advance(p, t, pf)
    _ph_push(hv, hr, pi[p, PI_HOFF], pi[p, PI_HSIZE], pf[p, PF_V] + work, r)
    pi[p, PI_HSIZE] += 1
    pi[p, PI_K] = k + 1
    lim = pf[p, PF_LIMIT]
    nf[n, NF_DEMAND] += _cap_k(k + 1, lim) - _cap_k(k, lim)
    _node_change(n, p, t, nf, n_act, n_nact, pi, pf, hv, nh_key, nh_pos, nh_heap)


@njit(cache=True, inline="always", error_model="numpy")
def _cpu_leave(n, t, nf, n_act, n_nact, pi, pf, hv, hr, nh_key, nh_pos, nh_heap):
    """The next CPU completion on node ``n``: returns the request."""
    p = np.int64(nf[n, NF_ARG])
    _pod_advance(p, t, pf)
    r = _ph_pop(hv, hr, pi[p, PI_HOFF], pi[p, PI_HSIZE])
    pi[p, PI_HSIZE] -= 1
    k = pi[p, PI_K]
    pi[p, PI_K] = k - 1
    lim = pf[p, PF_LIMIT]
    nf[n, NF_DEMAND] -= _cap_k(k, lim) - _cap_k(k - 1, lim)
    if k == 1:
        j = pi[p, PI_ACTPOS]
        last = n_nact[n] - 1
        q = n_act[n, last]
        n_act[n, j] = q
        pi[q, PI_ACTPOS] = j
        n_nact[n] = last
    _node_change(n, p, t, nf, n_act, n_nact, pi, pf, hv, nh_key, nh_pos, nh_heap)
    return r


# ============================================================================================
# requests
# ============================================================================================


@njit(cache=True, inline="always", error_model="numpy")
def _area(f, t, fi, ff):
    last = ff[f, FF_LAST]
    if t > last:
        ff[f, FF_AREA] += fi[f, FI_INSYS] * (t - last)
        ff[f, FF_LAST] = t


@njit(cache=True, inline="always", error_model="numpy")
def _finish(r, t, timeout, rf, ri, fi, ff, pi, pf, nf, counters):
    """A request's response is complete at ``t`` (the client stopped waiting at arrival + timeout)."""
    f = ri[r, RI_FN]
    if t - rf[r, RF_T] <= timeout:
        ri[r, RI_STATUS] = ST_OK
        rf[r, RF_FINISH] = t
    else:
        ri[r, RI_STATUS] = ST_TIMEOUT
        rf[r, RF_FINISH] = rf[r, RF_T] + timeout
    counters[C_FINISHED] += 1
    p = ri[r, RI_POD]
    mem = rf[r, RF_MEM]
    pf[p, PF_MEM] -= mem
    nf[pi[p, PI_NODE], NF_MEMUSED] -= mem
    pi[p, PI_INFLIGHT] -= 1
    st = pi[p, PI_STATE]
    if st == POD_READY:
        if pi[p, PI_INFLIGHT] == pi[p, PI_CAP] - 1:
            fi[f, FI_FREE] += 1
    elif st == POD_DRAINING and pi[p, PI_INFLIGHT] == 0:
        pi[p, PI_STATE] = POD_DONE
    _area(f, t, fi, ff)
    fi[f, FI_INSYS] -= 1


@njit(cache=True, inline="always", error_model="numpy")
def _rand_below(rng, n):
    """xorshift64: the kernel's own seeded generator (deterministic, no global state)."""
    x = rng[0]
    x ^= x << np.uint64(13)
    x ^= x >> np.uint64(7)
    x ^= x << np.uint64(17)
    rng[0] = x
    return np.int64(x % np.uint64(n))


@njit(cache=True, inline="always", error_model="numpy")
def _pick_pod(f, fi, f_ready, pi, rng):
    if fi[f, FI_FREE] <= 0:
        return -1
    n = fi[f, FI_NREADY]
    cc = fi[f, FI_CC]
    if cc == 0:
        # randomChoice2Policy: two distinct random targets, the one with fewer in-flight requests
        if n == 1:
            p = f_ready[f, 0]
        else:
            r1 = _rand_below(rng, n)
            r2 = 1
            if n > 2:
                r2 = _rand_below(rng, n - 1)
                if r2 >= r1:
                    r2 += 1
            else:
                r1 = 0
            p = f_ready[f, r1]
            alt = f_ready[f, r2]
            if pi[p, PI_INFLIGHT] > pi[alt, PI_INFLIGHT] or (
                pi[p, PI_INFLIGHT] == pi[alt, PI_INFLIGHT] and _rand_below(rng, 2) == 0
            ):
                p = alt
        if pi[p, PI_INFLIGHT] < pi[p, PI_CAP]:
            return p
        for j in range(n):  # the chosen one is at the (finite) simulation cap: any other
            q = f_ready[f, j]
            if pi[q, PI_INFLIGHT] < pi[q, PI_CAP]:
                return q
        return -1
    if cc <= 3:
        # firstAvailableLBPolicy
        for j in range(n):
            p = f_ready[f, j]
            if pi[p, PI_INFLIGHT] < pi[p, PI_CAP]:
                return p
        return -1
    # roundRobinPolicy
    idx = fi[f, FI_RR]
    if idx >= n:
        idx = 0
    for i in range(n):
        j = (idx + i) % n
        p = f_ready[f, j]
        if pi[p, PI_INFLIGHT] < pi[p, PI_CAP]:
            fi[f, FI_RR] = j + 1
            return p
    return -1


@njit(cache=True, inline="always", error_model="numpy")
def _pod_ready(p, fi, f_ready, pi):
    """Pod ``p`` passed its readiness probe: it joins its revision's targets."""
    f = pi[p, PI_FN]
    pi[p, PI_STATE] = POD_READY
    n = fi[f, FI_NREADY]
    f_ready[f, n] = p
    fi[f, FI_NREADY] = n + 1
    if pi[p, PI_INFLIGHT] < pi[p, PI_CAP]:
        fi[f, FI_FREE] += 1


@njit(cache=True, error_model="numpy")
def pod_ready(p, fi, f_ready, pi):
    """Entry for the control plane (a warm pod is ready at once)."""
    _pod_ready(p, fi, f_ready, pi)


@njit(cache=True, error_model="numpy")
def set_node_speed(n, t, speed, nf, n_act, n_nact, pi, pf, hv, nh_key, nh_pos, nh_heap):
    """Entry for the control plane: node ``n`` runs at ``speed`` from ``t`` on (the truth's noisy
    neighbour, ``SimConfig.neighbour``; never in a twin). Its CPU-active pods are advanced at their
    old rates to ``t`` and re-rated, as a change of the node's share does."""
    nf[n, NF_SPEED] = speed
    if n_nact[n] > 0:
        nf[n, NF_SHARE] = -1.0  # forces _node_change to advance and re-rate every active pod
        _node_change(n, n_act[n, 0], t, nf, n_act, n_nact, pi, pf, hv, nh_key, nh_pos, nh_heap)


@njit(cache=True, error_model="numpy")
def pod_unready(p, new_state, fi, f_ready, pi):
    """Pod ``p`` leaves its revision's targets (deleted: draining, or done if idle)."""
    f = pi[p, PI_FN]
    if pi[p, PI_STATE] == POD_READY:
        n = fi[f, FI_NREADY]
        j = 0
        while j < n and f_ready[f, j] != p:
            j += 1
        while j < n - 1:
            f_ready[f, j] = f_ready[f, j + 1]
            j += 1
        fi[f, FI_NREADY] = n - 1
        if pi[p, PI_INFLIGHT] < pi[p, PI_CAP]:
            fi[f, FI_FREE] -= 1
    pi[p, PI_STATE] = new_state


@njit(cache=True, inline="always", error_model="numpy")
def _start(r, p, t, timeout, rf, ri, fi, ff, pi, pf, nf, n_act, n_nact, hv, hr, nh_key, nh_pos, nh_heap,
           tt, tc, counters):
    n = pi[p, PI_NODE]
    mem = rf[r, RF_MEM]
    rf[r, RF_START] = t
    ri[r, RI_POD] = p
    ri[r, RI_NODE] = n
    ri[r, RI_UID] = pi[p, PI_UID]
    ri[r, RI_COLD] = 1 if pf[p, PF_READY] > rf[r, RF_T] else 0
    if pf[p, PF_MEM] + mem > pf[p, PF_MEMLIM] or nf[n, NF_MEMUSED] + mem > nf[n, NF_MEMCAP]:
        # out of memory: this request fails at once (the container's limit or the node's memory)
        ri[r, RI_STATUS] = ST_ERROR
        rf[r, RF_FINISH] = t
        counters[C_FINISHED] += 1
        f = ri[r, RI_FN]
        _area(f, t, fi, ff)
        fi[f, FI_INSYS] -= 1
        return
    pf[p, PF_MEM] += mem
    nf[n, NF_MEMUSED] += mem
    pi[p, PI_INFLIGHT] += 1
    if pi[p, PI_INFLIGHT] == pi[p, PI_CAP]:
        fi[ri[r, RI_FN], FI_FREE] -= 1
    work = rf[r, RF_WORK]
    if work > 0.0:
        _cpu_enter(p, n, t, work, r, nf, n_act, n_nact, pi, pf, hv, hr, nh_key, nh_pos, nh_heap)
    elif rf[r, RF_IO] > 0.0:
        _timer_push(tt, tc, counters, t + rf[r, RF_IO], r)
    else:
        _finish(r, t, timeout, rf, ri, fi, ff, pi, pf, nf, counters)


@njit(cache=True, inline="always", error_model="numpy")
def _dispatch(f, t, timeout, rf, ri, fi, ff, f_idx, f_ready, pi, pf, nf, n_act, n_nact, hv, hr,
              nh_key, nh_pos, nh_heap, tt, tc, counters, rng):
    """Hand queued requests of ``f`` to pods while a ready pod has a free slot (FIFO)."""
    base = fi[f, FI_START]
    while fi[f, FI_NEXT] < fi[f, FI_ARRIVED]:
        r = f_idx[base + fi[f, FI_NEXT]]
        if ri[r, RI_STATUS] != ST_PENDING:
            fi[f, FI_NEXT] += 1
            continue
        if t - rf[r, RF_T] >= timeout:
            # the client gave up while the request was still buffered
            ri[r, RI_STATUS] = ST_TIMEOUT
            rf[r, RF_FINISH] = rf[r, RF_T] + timeout
            counters[C_FINISHED] += 1
            _area(f, t, fi, ff)
            fi[f, FI_INSYS] -= 1
            fi[f, FI_NEXT] += 1
            continue
        p = _pick_pod(f, fi, f_ready, pi, rng)
        if p < 0:
            return
        fi[f, FI_NEXT] += 1
        _start(r, p, t, timeout, rf, ri, fi, ff, pi, pf, nf, n_act, n_nact, hv, hr, nh_key, nh_pos, nh_heap,
               tt, tc, counters)


@njit(cache=True, error_model="numpy")
def run_segment(t_limit, timeout, rf, ri, fi, ff, f_idx, f_ready, pi, pf, nf, n_act, n_nact, hv, hr,
                nh_key, nh_pos, nh_heap, tt, tc, counters, stop_t, rng):
    """Process every event before ``t_limit``; returns STOP_LIMIT, or STOP_POKE (with the function in
    ``counters[C_STOP_FN]`` and the time in ``stop_t[0]``) right after an arrival for a function
    whose ``FI_WATCH`` flag the control plane had set."""
    n_req = rf.shape[0]
    while True:
        ia = counters[C_NEXT_ARRIVAL]
        ta = rf[ia, RF_T] if ia < n_req else INF
        tn = nh_key[nh_heap[0]] if nh_heap.shape[0] > 0 else INF
        ttop = tt[0] if counters[C_TIMERS] > 0 else INF
        t = ta
        if tn <= t:
            t = tn
        if ttop <= t:
            t = ttop
        if t >= t_limit:
            break
        counters[C_EVENTS] += 1
        if tn <= ttop and tn <= ta:
            # ---- the next CPU completion on node n
            n = nh_heap[0]
            r = _cpu_leave(n, t, nf, n_act, n_nact, pi, pf, hv, hr, nh_key, nh_pos, nh_heap)
            if rf[r, RF_IO] > 0.0:
                _timer_push(tt, tc, counters, t + rf[r, RF_IO], r)
            else:
                f = ri[r, RI_FN]
                _finish(r, t, timeout, rf, ri, fi, ff, pi, pf, nf, counters)
                _dispatch(f, t, timeout, rf, ri, fi, ff, f_idx, f_ready, pi, pf, nf, n_act, n_nact, hv, hr,
                          nh_key, nh_pos, nh_heap, tt, tc, counters, rng)
        elif ttop <= ta:
            code = _timer_pop(tt, tc, counters)
            if code >= 0:
                r = code
                f = ri[r, RI_FN]
                _finish(r, t, timeout, rf, ri, fi, ff, pi, pf, nf, counters)
            else:
                p = -code - 1
                if pi[p, PI_STATE] != POD_STARTING:
                    continue
                _pod_ready(p, fi, f_ready, pi)
                f = pi[p, PI_FN]
            _dispatch(f, t, timeout, rf, ri, fi, ff, f_idx, f_ready, pi, pf, nf, n_act, n_nact, hv, hr,
                      nh_key, nh_pos, nh_heap, tt, tc, counters, rng)
        else:
            # ---- an arrival
            r = ia
            counters[C_NEXT_ARRIVAL] = ia + 1
            f = ri[r, RI_FN]
            _area(f, t, fi, ff)
            fi[f, FI_INSYS] += 1
            fi[f, FI_ARRIVALS] += 1
            fi[f, FI_ARRIVED] += 1
            if fi[f, FI_ARRIVED] - fi[f, FI_NEXT] > fi[f, FI_QMAX]:
                # the activator's per-revision queue is full: 503 at once
                ri[r, RI_STATUS] = ST_ERROR
                rf[r, RF_FINISH] = t
                counters[C_FINISHED] += 1
                fi[f, FI_INSYS] -= 1
            elif fi[f, FI_ARRIVED] - fi[f, FI_NEXT] == 1:
                _dispatch(f, t, timeout, rf, ri, fi, ff, f_idx, f_ready, pi, pf, nf, n_act, n_nact, hv, hr,
                          nh_key, nh_pos, nh_heap, tt, tc, counters, rng)
            if fi[f, FI_WATCH] != 0:
                fi[f, FI_WATCH] = 0
                counters[C_STOP_FN] = f
                stop_t[0] = t
                return STOP_POKE
    # close the concurrency integrals at the limit
    for f in range(fi.shape[0]):
        _area(f, t_limit, fi, ff)
    return STOP_LIMIT
