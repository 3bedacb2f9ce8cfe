"""The OpenWhisk simulation's event loop, compiled with numba over flat arrays.

Everything an activation passes through runs here: the controller's sharding balancer
(:mod:`testbed.openwhisk.balancer`), each invoker's container pool (:mod:`testbed.openwhisk.pool`)
and health (:mod:`testbed.openwhisk.health`), the dispatch and ack delays, processor sharing on
the nodes, the idle timers. The only thing left to Python (:mod:`testbed.sim.openwhisk`) is
kube-scheduler: the loop returns when it pops the event at which a new action pod is scheduled
(:data:`STOP_SCHED`), the caller places the pod and pushes what follows (:func:`push_event`), and
calls the loop again. Pods deleted meanwhile are handed back in an outbox so that the caller
unbinds them before its next scheduling decision.

The loop is the Python one it replaced, operation for operation, so that a run is identical to it
(``tests/testbed/sim/test_sim_openwhisk_vectors.py`` holds digests of whole runs that the Python
loop produced): one event heap ordered by (time, push sequence), the same order of side effects
when a finished activation frees room for buffered ones (an explicit stack stands for the Python
loop's recursion: a buffered activation placed on a warm container whose work and I/O are both
zero finishes at once and drains the buffer again before the next buffered one is placed), and
the balancer's forced choice drawn from the same Mersenne Twister stream as Python's
``random.Random(seed).randrange``.

Array capacities (events, containers, per-node CPU heaps, the stack) are checked before each
event against a bound on what one event can add; when one may be exceeded the loop returns
:data:`STOP_GROW` before touching anything and the caller enlarges the arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# --- event kinds (the Python loop's) ---------------------------------------------------------
E_RUN, E_SCHED, E_INIT, E_CPU, E_IO, E_IDLE, E_HEALTH, E_TICK = 0, 1, 2, 3, 4, 5, 6, 7

# --- stop codes ------------------------------------------------------------------------------
STOP_END, STOP_SCHED, STOP_GROW, STOP_BUDGET = 0, 1, 2, 3

# --- counters (int64) ------------------------------------------------------------------------
(C_NXT, C_HSIZE, C_SEQ, C_EVENTS, C_NCONT, C_BUFFERED, C_WAITING, C_PENDING, C_PHEAD, C_PTAIL, C_OUT,
 C_STOP, C_ARG, C_MAXNODE, C_MTI, C_ALIVE, C_STACK, C_NPODS) = range(18)
C_COLS = 18

# --- configuration (float64) -----------------------------------------------------------------
(G_HORIZON, G_DISPATCH, G_ACK, G_CREATE, G_IDLE, G_TIMEOUT, G_HEALTH, G_TICK, G_INTERF, G_LOADSLOW, G_USERMEM,
 G_NOW) = range(12)
G_COLS = 12

# --- requests --------------------------------------------------------------------------------
QF_T, QF_WORK, QF_IO, QF_START, QF_FINISH = range(5)
QF_COLS = 5
QI_FN, QI_STATUS, QI_COLD, QI_NODE, QI_POD, QI_FAULT, QI_NEXT, QI_INV = range(8)
QI_COLS = 8
ST_PENDING, ST_OK, ST_ERROR, ST_TIMEOUT = 0, 1, 2, 3  # as testbed.sim.kernel
FAULT_POD_NOT_READY, FAULT_NO_INVOKER = 1, 2  # as testbed.sim.engine

# --- containers (one pod each) ---------------------------------------------------------------
CF_LAST_USED, CF_LAST_DISPATCH, CF_CREATED, CF_READY, CF_DELETED = range(5)
CF_COLS = 5
(CI_INV, CI_FN, CI_MEM, CI_MAXC, CI_SEQ, CI_WARM, CI_ACTIVE, CI_REMOVED, CI_INFREE, CI_PREV, CI_NEXT, CI_WHEAD,
 CI_WTAIL, CI_NODE, CI_PENDING, CI_PPREV, CI_PNEXT, CI_CPU, CI_PODUID) = range(19)
CI_COLS = 19

# --- functions (actions) ---------------------------------------------------------------------
FN_MEM, FN_MAXC, FN_HOME, FN_STEP = range(4)
FN_COLS = 4

# --- invokers --------------------------------------------------------------------------------
(IV_PERMITS, IV_SEQ, IV_BUSYMEM, IV_FREEMEM, IV_BHEAD, IV_BTAIL, IV_UP, IV_HLEN, IV_HSTART, IV_TRANSITIONS,
 IV_USABLE) = range(11)
IV_COLS = 11
IV_FIRST_BLACKBOX = 0  # row 0 of ``BAL``: the first invoker blackbox actions may use, and how many
HEALTH_BUFFER, HEALTH_TOLERANCE = 10, 3  # testbed.openwhisk.health BUFFER_SIZE, ERROR_TOLERANCE
R_SUCCESS, R_SYSTEM_ERROR = 0, 1

# --- nodes -----------------------------------------------------------------------------------
NF_CORES, NF_SPEED, NF_V, NF_LAST, NF_RATE = range(5)
NF_COLS = 5
NI_VERSION, NI_PODS, NI_HSIZE = range(3)
NI_COLS = 3

# --- placements (pool states) and the stack --------------------------------------------------
P_NONE, P_WARM, P_WARMING, P_COLD, P_RECREATED = 0, 1, 2, 3, 4
K_PLACE, K_FINISH, K_INIT, K_CPU = 0, 1, 2, 3
SK_KIND, SK_REQ, SK_CONT, SK_STATE, SK_VSTART, SK_VCOUNT = range(6)
SK_COLS = 6

UPPER_MASK, LOWER_MASK, MATRIX_A = 0x80000000, 0x7FFFFFFF, 0x9908B0DF


# ============================================================================================
# Python's random.Random: MT19937 and _randbelow_with_getrandbits
# ============================================================================================


@njit(cache=True, inline="always")
def _genrand_uint32(mt, cnt):
    i = cnt[C_MTI]
    if i >= 624:
        for kk in range(624 - 397):
            y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK)
            mt[kk] = mt[kk + 397] ^ (y >> 1) ^ (MATRIX_A if y & 1 else 0)
        for kk in range(624 - 397, 623):
            y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK)
            mt[kk] = mt[kk - 227] ^ (y >> 1) ^ (MATRIX_A if y & 1 else 0)
        y = (mt[623] & UPPER_MASK) | (mt[0] & LOWER_MASK)
        mt[623] = mt[396] ^ (y >> 1) ^ (MATRIX_A if y & 1 else 0)
        i = 0
    y = mt[i]
    cnt[C_MTI] = i + 1
    y ^= y >> 11
    y ^= (y << 7) & 0x9D2C5680
    y ^= (y << 15) & 0xEFC60000
    y ^= y >> 18
    return y & 0xFFFFFFFF


@njit(cache=True)
def randbelow(mt, cnt, n):
    """``random.Random._randbelow_with_getrandbits(n)`` for ``0 < n < 2**32``."""
    k = 0
    m = n
    while m:
        k += 1
        m >>= 1
    r = _genrand_uint32(mt, cnt) >> (32 - k)
    while r >= n:
        r = _genrand_uint32(mt, cnt) >> (32 - k)
    return r


# ============================================================================================
# the event heap: (time, sequence) with the payload (kind, a, b)
# ============================================================================================


@njit(cache=True, inline="always")
def _hless(ht, hi, x, y):
    return ht[x] < ht[y] or (ht[x] == ht[y] and hi[x, 0] < hi[y, 0])


@njit(cache=True, inline="always")
def _hswap(ht, hi, x, y):
    ht[x], ht[y] = ht[y], ht[x]
    for k in range(4):
        hi[x, k], hi[y, k] = hi[y, k], hi[x, k]


@njit(cache=True)
def _push(ht, hi, cnt, t, kind, a, b):
    i = cnt[C_HSIZE]
    cnt[C_HSIZE] = i + 1
    cnt[C_SEQ] += 1
    ht[i] = t
    hi[i, 0] = cnt[C_SEQ]
    hi[i, 1] = kind
    hi[i, 2] = a
    hi[i, 3] = b
    while i > 0:
        parent = (i - 1) >> 1
        if not _hless(ht, hi, i, parent):
            break
        _hswap(ht, hi, i, parent)
        i = parent


@njit(cache=True)
def _pop(ht, hi, cnt):
    """Remove the earliest event; its fields are left at index ``size`` (the old last slot)."""
    n = cnt[C_HSIZE] - 1
    cnt[C_HSIZE] = n
    _hswap(ht, hi, 0, n)
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        c = left
        if left + 1 < n and _hless(ht, hi, left + 1, left):
            c = left + 1
        if not _hless(ht, hi, c, i):
            break
        _hswap(ht, hi, c, i)
        i = c
    return n


@njit(cache=True)
def push_event(ht, hi, cnt, t, kind, a, b):
    """Push one event from the caller (the scheduling step), in sequence with the loop's own."""
    _push(ht, hi, cnt, t, kind, a, b)


# ============================================================================================
# shared with the caller: the pending list and the arrays' capacity
# ============================================================================================


@njit(cache=True, inline="always")
def pending_add(ci, cnt, c):
    """Append container ``c`` to the list of pods nothing could take yet (once: the Python loop kept
    them in a dict, in the order they were first found so)."""
    if ci[c, CI_PENDING] != 0:
        return
    tail = cnt[C_PTAIL]
    ci[c, CI_PENDING] = 1
    ci[c, CI_PPREV] = tail
    ci[c, CI_PNEXT] = -1
    if tail >= 0:
        ci[tail, CI_PNEXT] = c
    else:
        cnt[C_PHEAD] = c
    cnt[C_PTAIL] = c
    cnt[C_PENDING] += 1


@njit(cache=True, inline="always")
def pending_remove(ci, cnt, c):
    """Take container ``c`` out of the pending list (nothing when it is not in it)."""
    if ci[c, CI_PENDING] == 0:
        return
    p = ci[c, CI_PPREV]
    q = ci[c, CI_PNEXT]
    if p >= 0:
        ci[p, CI_PNEXT] = q
    else:
        cnt[C_PHEAD] = q
    if q >= 0:
        ci[q, CI_PPREV] = p
    else:
        cnt[C_PTAIL] = p
    ci[c, CI_PENDING] = 0
    cnt[C_PENDING] -= 1


@njit(cache=True, inline="always")
def capacity_needed(cnt):
    """The sizes whatever one event may add can need: (event heap, containers, per-node CPU heap width,
    stack, outbox). The loop stops with :data:`STOP_GROW` before an event when an array is shorter; the
    caller grows each to these."""
    grow = cnt[C_BUFFERED] + cnt[C_WAITING] + 4
    return (cnt[C_HSIZE] + 8 * grow + (cnt[C_ALIVE] + 2) * (cnt[C_PENDING] + 1) + 16, cnt[C_NCONT] + grow,
            cnt[C_MAXNODE] + grow, 2 * grow + 4, cnt[C_ALIVE] + cnt[C_OUT] + 4)


# ============================================================================================
# the loop
# ============================================================================================


@njit(cache=True, error_model="numpy")
def run(cnt, cfg, qf, qi, cf, ci, fni, bal, inv, hb, fhead, ftail, conc, nf, ni, nhk, nhi, ht, hi, mt, outbox,
        stack, victims, budget):
    """Advance the simulation until it ends, an action pod must be scheduled, an array must grow,
    or ``budget`` events have been handled; the reason is ``cnt[C_STOP]``."""
    n_req = qf.shape[0]
    n_fn = fni.shape[0]
    horizon = cfg[G_HORIZON]
    user_mem = int(cfg[G_USERMEM])
    first_bb = bal[IV_FIRST_BLACKBOX, 0]
    n_bb = bal[IV_FIRST_BLACKBOX, 1]

    # ---------------------------------------------------------------- balancer (NestedSemaphore)
    def try_acquire(v, f, force):
        mem = fni[f, FN_MEM]
        maxc = fni[f, FN_MAXC]
        if maxc == 1:
            if force or inv[v, IV_PERMITS] >= mem:
                inv[v, IV_PERMITS] -= mem
                return True
            return False
        free = conc[v, f]
        if free > 0:
            conc[v, f] = free - 1
            return True
        if force or inv[v, IV_PERMITS] >= mem:
            inv[v, IV_PERMITS] -= mem
            conc[v, f] = free + maxc - 1
            return True
        return False

    def release(v, f):
        mem = fni[f, FN_MEM]
        maxc = fni[f, FN_MAXC]
        if maxc == 1:
            inv[v, IV_PERMITS] += mem
            return
        free = conc[v, f] + 1
        if free >= maxc:
            free -= maxc
            inv[v, IV_PERMITS] += mem
        conc[v, f] = free

    def publish(f):
        """ShardingContainerPoolBalancer.schedule: the invoker, or -1 when none is healthy."""
        if n_bb == 0:
            return -1
        index = fni[f, FN_HOME]
        step = fni[f, FN_STEP]
        steps_done = 0
        while True:
            v = first_bb + index
            if inv[v, IV_USABLE] == 1 and try_acquire(v, f, False):
                return v
            if steps_done == n_bb + 1:
                usable = 0
                for k in range(n_bb):
                    usable += inv[first_bb + k, IV_USABLE]
                if usable == 0:
                    return -1
                r = randbelow(mt, cnt, usable)
                for k in range(n_bb):
                    if inv[first_bb + k, IV_USABLE] == 1:
                        if r == 0:
                            try_acquire(first_bb + k, f, True)
                            return first_bb + k
                        r -= 1
            index = (index + step) % n_bb
            steps_done += 1

    # ---------------------------------------------------------------- health (InvokerActor)
    def health_goto(v, up):
        if inv[v, IV_UP] == up:
            return False
        inv[v, IV_UP] = up
        inv[v, IV_TRANSITIONS] += 1
        return up == 0

    def health_record(v, result):
        n = inv[v, IV_HLEN]
        start = inv[v, IV_HSTART]
        if n < HEALTH_BUFFER:
            hb[v, (start + n) % HEALTH_BUFFER] = result
            inv[v, IV_HLEN] = n + 1
        else:  # a full deque drops its oldest
            hb[v, start] = result
            inv[v, IV_HSTART] = (start + 1) % HEALTH_BUFFER
        test = result == R_SUCCESS and inv[v, IV_UP] == 0
        if inv[v, IV_UP] == 1 and result == R_SUCCESS:
            return test
        errors = 0
        for k in range(inv[v, IV_HLEN]):
            errors += hb[v, k]
        if errors > HEALTH_TOLERANCE:
            return health_goto(v, 0) or test
        if result == R_SUCCESS:
            health_goto(v, 1)
        elif inv[v, IV_HLEN] <= HEALTH_TOLERANCE:
            return health_goto(v, 0) or test
        return test

    def health(v, result, now):
        was = inv[v, IV_UP]
        if health_record(v, result):
            _push(ht, hi, cnt, now + cfg[G_HEALTH], E_HEALTH, v, 0)
        if inv[v, IV_UP] != was:
            inv[v, IV_USABLE] = inv[v, IV_UP]
            if inv[v, IV_UP] == 0:
                _push(ht, hi, cnt, now + cfg[G_TICK], E_TICK, v, 0)

    # ---------------------------------------------------------------- pool (ContainerPool)
    def free_append(c):
        v = ci[c, CI_INV]
        f = ci[c, CI_FN]
        tail = ftail[v, f]
        ci[c, CI_PREV] = tail
        ci[c, CI_NEXT] = -1
        if tail >= 0:
            ci[tail, CI_NEXT] = c
        else:
            fhead[v, f] = c
        ftail[v, f] = c
        ci[c, CI_INFREE] = 1
        inv[v, IV_FREEMEM] += ci[c, CI_MEM]

    def free_remove(c):
        v = ci[c, CI_INV]
        f = ci[c, CI_FN]
        p = ci[c, CI_PREV]
        q = ci[c, CI_NEXT]
        if p >= 0:
            ci[p, CI_NEXT] = q
        else:
            fhead[v, f] = q
        if q >= 0:
            ci[q, CI_PREV] = p
        else:
            ftail[v, f] = p
        ci[c, CI_INFREE] = 0
        inv[v, IV_FREEMEM] -= ci[c, CI_MEM]

    def drop(c):
        ci[c, CI_REMOVED] = 1
        cnt[C_ALIVE] -= 1
        if ci[c, CI_INFREE] == 1:
            free_remove(c)
        elif ci[c, CI_INFREE] == 2:  # busy
            ci[c, CI_INFREE] = 0
            inv[ci[c, CI_INV], IV_BUSYMEM] -= ci[c, CI_MEM]

    def new_container(v, f, now):
        c = cnt[C_NCONT]
        cnt[C_NCONT] = c + 1
        cnt[C_ALIVE] += 1
        inv[v, IV_SEQ] += 1
        ci[c, CI_INV] = v
        ci[c, CI_FN] = f
        ci[c, CI_MEM] = fni[f, FN_MEM]
        ci[c, CI_MAXC] = fni[f, FN_MAXC]
        ci[c, CI_SEQ] = inv[v, IV_SEQ]
        ci[c, CI_WARM] = 0
        ci[c, CI_ACTIVE] = 0
        ci[c, CI_REMOVED] = 0
        ci[c, CI_INFREE] = 0
        ci[c, CI_WHEAD] = -1
        ci[c, CI_WTAIL] = -1
        ci[c, CI_NODE] = -1
        ci[c, CI_PENDING] = 0
        ci[c, CI_PPREV] = -1
        ci[c, CI_PNEXT] = -1
        ci[c, CI_CPU] = 0
        ci[c, CI_PODUID] = -1
        cf[c, CF_LAST_USED] = 0.0
        cf[c, CF_LAST_DISPATCH] = 0.0
        cf[c, CF_CREATED] = np.nan
        cf[c, CF_READY] = np.nan
        cf[c, CF_DELETED] = np.nan
        free_append(c)
        return c

    def remove_for(v, memory, now, vstart):
        """ContainerPool.remove: the least recently dispatched idle warm containers covering
        ``memory``, written to ``victims[vstart:]``; their count (0 when they cannot cover it)."""
        if memory <= 0:
            return 0
        k = 0
        total = 0
        for f in range(n_fn):
            c = fhead[v, f]
            while c >= 0:
                if ci[c, CI_WARM] == 1 and ci[c, CI_ACTIVE] == 0 and cf[c, CF_LAST_USED] <= now:
                    # insertion by (last dispatch, seq)
                    j = vstart + k
                    while j > vstart:
                        o = victims[j - 1]
                        if cf[o, CF_LAST_DISPATCH] < cf[c, CF_LAST_DISPATCH] or (
                                cf[o, CF_LAST_DISPATCH] == cf[c, CF_LAST_DISPATCH] and ci[o, CI_SEQ] < ci[c, CI_SEQ]):
                            break
                        victims[j] = o
                        j -= 1
                    victims[j] = c
                    k += 1
                    total += ci[c, CI_MEM]
                c = ci[c, CI_NEXT]
        if k == 0 or total < memory:
            return 0
        out = 0
        while out < k and memory > 0:
            memory -= ci[victims[vstart + out], CI_MEM]
            out += 1
        return out

    def try_place(v, f, now, vstart):
        """ContainerPool._try: (container, state, victims written at vstart, their count)."""
        mem = fni[f, FN_MEM]
        if inv[v, IV_BUSYMEM] + mem > user_mem:
            return -1, P_NONE, 0
        for want in (1, 0):  # WarmedData first, then a container still starting for the action
            c = fhead[v, f]
            while c >= 0:
                if ci[c, CI_WARM] == want and ci[c, CI_ACTIVE] < ci[c, CI_MAXC]:
                    return c, (P_WARM if want == 1 else P_WARMING), 0
                c = ci[c, CI_NEXT]
        state = P_COLD
        nv = 0
        if inv[v, IV_BUSYMEM] + inv[v, IV_FREEMEM] + mem > user_mem:
            nv = remove_for(v, min(mem, inv[v, IV_FREEMEM]), now, vstart)
            if nv == 0:
                return -1, P_NONE, 0
            for k in range(nv):
                drop(victims[vstart + k])
            state = P_RECREATED
        return new_container(v, f, now), state, nv

    def take(c, now):
        ci[c, CI_ACTIVE] += 1
        cf[c, CF_LAST_DISPATCH] = now
        if ci[c, CI_ACTIVE] >= ci[c, CI_MAXC] and ci[c, CI_INFREE] == 1:
            free_remove(c)
            ci[c, CI_INFREE] = 2
            inv[ci[c, CI_INV], IV_BUSYMEM] += ci[c, CI_MEM]

    def pool_done(c, now):
        ci[c, CI_ACTIVE] -= 1
        ci[c, CI_WARM] = 1
        cf[c, CF_LAST_USED] = now
        if ci[c, CI_REMOVED] == 1:
            return
        if ci[c, CI_ACTIVE] < ci[c, CI_MAXC] and ci[c, CI_INFREE] == 2:
            ci[c, CI_INFREE] = 0
            inv[ci[c, CI_INV], IV_BUSYMEM] -= ci[c, CI_MEM]
            free_append(c)

    def fifo_append(table, row, head, tail, i):
        """Append request ``i`` to the queue whose ends are ``table[row, head]`` and
        ``table[row, tail]``, linked through the requests' QI_NEXT (an invoker's run buffer, a
        container's activations waiting for /init: a request is in at most one at a time)."""
        qi[i, QI_NEXT] = -1
        last = table[row, tail]
        if last >= 0:
            qi[last, QI_NEXT] = i
        else:
            table[row, head] = i
        table[row, tail] = i

    def buffer_append(v, i):
        fifo_append(inv, v, IV_BHEAD, IV_BTAIL, i)
        cnt[C_BUFFERED] += 1

    # ---------------------------------------------------------------- pods
    def delete_pod(c, now):
        if not np.isnan(cf[c, CF_DELETED]):
            return
        cf[c, CF_DELETED] = now
        pending_remove(ci, cnt, c)
        if ci[c, CI_NODE] >= 0:
            k = cnt[C_OUT]
            outbox[k, 0] = c
            outbox[k, 1] = ci[c, CI_NODE]
            cnt[C_OUT] = k + 1
            p = cnt[C_PHEAD]  # capacity freed: unschedulable pods are retried at once
            while p >= 0:
                _push(ht, hi, cnt, now, E_SCHED, ci[p, CI_INV], p)
                p = ci[p, CI_PNEXT]

    def waiting_append(c, i):
        fifo_append(ci, c, CI_WHEAD, CI_WTAIL, i)
        cnt[C_WAITING] += 1

    # ---------------------------------------------------------------- processor sharing
    def advance(node, now):
        nf[node, NF_V] += nf[node, NF_RATE] * (now - nf[node, NF_LAST])
        nf[node, NF_LAST] = now

    def nheap_push(node, key, i):
        j = ni[node, NI_HSIZE]
        ni[node, NI_HSIZE] = j + 1
        if j + 1 > cnt[C_MAXNODE]:
            cnt[C_MAXNODE] = j + 1
        nhk[node, j] = key
        nhi[node, j] = i
        while j > 0:
            parent = (j - 1) >> 1
            if nhk[node, parent] < nhk[node, j] or (nhk[node, parent] == nhk[node, j] and nhi[node, parent] < nhi[node, j]):
                break
            nhk[node, parent], nhk[node, j] = nhk[node, j], nhk[node, parent]
            nhi[node, parent], nhi[node, j] = nhi[node, j], nhi[node, parent]
            j = parent

    def nheap_pop(node):
        n = ni[node, NI_HSIZE] - 1
        ni[node, NI_HSIZE] = n
        top = nhi[node, 0]
        nhk[node, 0] = nhk[node, n]
        nhi[node, 0] = nhi[node, n]
        j = 0
        while True:
            left = 2 * j + 1
            if left >= n:
                break
            c = left
            r = left + 1
            if r < n and (nhk[node, r] < nhk[node, left] or (nhk[node, r] == nhk[node, left] and nhi[node, r] < nhi[node, left])):
                c = r
            if nhk[node, j] < nhk[node, c] or (nhk[node, j] == nhk[node, c] and nhi[node, j] < nhi[node, c]):
                break
            nhk[node, c], nhk[node, j] = nhk[node, j], nhk[node, c]
            nhi[node, c], nhi[node, j] = nhi[node, j], nhi[node, c]
            j = c
        return top

    def rerate(node, now):
        active = ni[node, NI_HSIZE]
        ni[node, NI_VERSION] += 1
        if active == 0:
            nf[node, NF_RATE] = 0.0
            return
        cores = nf[node, NF_CORES]
        share = 1.0 if active <= cores else cores / active
        pods = ni[node, NI_PODS]
        if cfg[G_INTERF] > 0.0 and pods > 1:
            share /= 1.0 + cfg[G_INTERF] * (pods - 1)
        if cfg[G_LOADSLOW] > 0.0:
            share /= 1.0 + cfg[G_LOADSLOW] * min(float(active), cores) / cores
        rate = nf[node, NF_SPEED] * share
        nf[node, NF_RATE] = rate
        due = now + max(0.0, nhk[node, 0] - nf[node, NF_V]) / rate
        _push(ht, hi, cnt, due, E_CPU, node, ni[node, NI_VERSION])

    # ---------------------------------------------------------------- activations
    def finish_now(i, now):
        """_finish without its drain; returns the invoker whose buffer to drain."""
        c = qi[i, QI_POD]
        v = qi[i, QI_INV]
        qi[i, QI_STATUS] = ST_OK
        qf[i, QF_FINISH] = now + cfg[G_ACK]
        release(v, qi[i, QI_FN])
        health(v, R_SUCCESS, now)
        pool_done(c, now)
        if ci[c, CI_ACTIVE] == 0:
            _push(ht, hi, cnt, now + cfg[G_IDLE], E_IDLE, v, c)
        return v

    def after_cpu(i, now):
        """The CPU phase ended: the I/O wait, or the finish (True: the caller finishes it)."""
        if qf[i, QF_IO] > 0.0:
            _push(ht, hi, cnt, now + qf[i, QF_IO], E_IO, i, 0)
            return False
        return True

    def execute(i, c, now):
        """Start ``i`` on its container; True when it finished at once (no work, no I/O)."""
        node = ci[c, CI_NODE]
        qf[i, QF_START] = now
        qi[i, QI_NODE] = node
        qi[i, QI_POD] = c
        if qf[i, QF_WORK] <= 0.0:
            return after_cpu(i, now)
        advance(node, now)
        nheap_push(node, nf[node, NF_V] + qf[i, QF_WORK], i)
        if ci[c, CI_CPU] == 0:
            ni[node, NI_PODS] += 1
        ci[c, CI_CPU] += 1
        rerate(node, now)
        return False

    def stack_push(kind, i, c, state, vstart, vcount):
        s = cnt[C_STACK]
        stack[s, SK_KIND] = kind
        stack[s, SK_REQ] = i
        stack[s, SK_CONT] = c
        stack[s, SK_STATE] = state
        stack[s, SK_VSTART] = vstart
        stack[s, SK_VCOUNT] = vcount
        cnt[C_STACK] = s + 1

    def drain_to_stack(v, now, vbase):
        """ContainerPool.drain_buffer then _drain: the buffered activations that can run now are
        taken from the pool first, then placed in order (pushed on the stack in reverse)."""
        first = cnt[C_STACK]
        vnext = vbase
        while inv[v, IV_BHEAD] >= 0:
            i = inv[v, IV_BHEAD]
            c, state, nv = try_place(v, qi[i, QI_FN], now, vnext)
            if c < 0:
                break
            nxt = qi[i, QI_NEXT]
            inv[v, IV_BHEAD] = nxt
            if nxt < 0:
                inv[v, IV_BTAIL] = -1
            cnt[C_BUFFERED] -= 1
            take(c, now)
            stack_push(K_PLACE, i, c, state, vnext, nv)
            vnext += nv
        # reverse the pushed run so that the first drained is on top
        lo = first
        hi_ = cnt[C_STACK] - 1
        while lo < hi_:
            for k in range(SK_COLS):
                stack[lo, k], stack[hi_, k] = stack[hi_, k], stack[lo, k]
            lo += 1
            hi_ -= 1
        return vnext

    def place(i, v, c, state, vstart, vcount, now):
        """_place; True when ``i`` finished at once."""
        for k in range(vcount):
            delete_pod(victims[vstart + k], now)
        qi[i, QI_POD] = c
        qi[i, QI_INV] = v
        if state == P_COLD or state == P_RECREATED:
            qi[i, QI_COLD] = 1
            cf[c, CF_CREATED] = now
            ci[c, CI_PODUID] = cnt[C_NPODS]  # pods are numbered as created (not as their containers)
            cnt[C_NPODS] += 1
            _push(ht, hi, cnt, now + cfg[G_CREATE], E_SCHED, v, c)
            ci[c, CI_WHEAD] = -1
            ci[c, CI_WTAIL] = -1
            waiting_append(c, i)
            return False
        if state == P_WARMING:
            waiting_append(c, i)
            return False
        return execute(i, c, now)

    def run_stack(now, vbase):
        """Run what the event left on the stack to the end, depth first. The stack stands for the
        Python loop's recursion (_finish -> _drain -> _place -> _execute -> _finish ...) and for
        its loops over a container's waiting activations (K_INIT) and a node's finished CPU
        phases (K_CPU), so that every step runs in the same order with (nearly) one copy of
        each step in the compiled code: numba inlines closures, and a copy per call site took
        minutes to compile."""
        vnext = vbase
        while cnt[C_STACK] > 0:
            s = cnt[C_STACK] - 1
            cnt[C_STACK] = s
            kind = stack[s, SK_KIND]
            i = stack[s, SK_REQ]
            c = stack[s, SK_CONT]
            if kind == K_FINISH:
                v = finish_now(i, now)
                vnext = drain_to_stack(v, now, vnext)
            elif kind == K_PLACE:
                if place(i, ci[c, CI_INV], c, stack[s, SK_STATE], stack[s, SK_VSTART], stack[s, SK_VCOUNT], now):
                    stack_push(K_FINISH, i, c, 0, 0, 0)
            elif kind == K_INIT:  # the waiting activations of a container that finished /init
                nxt_i = qi[i, QI_NEXT]
                if nxt_i >= 0:
                    stack_push(K_INIT, nxt_i, c, 0, 0, 0)
                cnt[C_WAITING] -= 1
                stack_push(K_PLACE, i, c, P_WARM, 0, 0)  # runs now, before the next one
            else:  # K_CPU: the next finished CPU phase on node ``i``
                node = i
                eps = 1e-9 * max(1.0, nf[node, NF_V])  # v does not move at one instant
                if ni[node, NI_HSIZE] > 0 and nhk[node, 0] <= nf[node, NF_V] + eps:
                    stack_push(K_CPU, node, 0, 0, 0, 0)
                    j = nheap_pop(node)
                    c = qi[j, QI_POD]
                    ci[c, CI_CPU] -= 1
                    if ci[c, CI_CPU] == 0:
                        ni[node, NI_PODS] -= 1
                    if after_cpu(j, now):
                        stack_push(K_FINISH, j, c, 0, 0, 0)
                else:
                    rerate(node, now)
        return vnext

    def fail(c, now):
        """A pod not Ready in time: its activations fail with statusCode 3 (system errors)."""
        v = ci[c, CI_INV]
        i = ci[c, CI_WHEAD]
        ci[c, CI_WHEAD] = -1
        ci[c, CI_WTAIL] = -1
        while i >= 0:
            nxt = qi[i, QI_NEXT]
            cnt[C_WAITING] -= 1
            qi[i, QI_STATUS] = ST_ERROR
            qf[i, QF_FINISH] = now + cfg[G_ACK]
            qi[i, QI_FAULT] = FAULT_POD_NOT_READY
            release(v, qi[i, QI_FN])
            health(v, R_SYSTEM_ERROR, now)
            i = nxt
        drop(c)
        delete_pod(c, now)
        return drain_to_stack(v, now, 0)

    # ---------------------------------------------------------------- the loop
    handled = 0
    cnt[C_STOP] = STOP_END
    nxt = cnt[C_NXT]
    now = cfg[G_NOW]
    while nxt < n_req or cnt[C_HSIZE] > 0:
        if handled >= budget:
            cnt[C_STOP] = STOP_BUDGET
            break
        # capacity for whatever one event may add (see the module docstring)
        n_events, n_cont, n_heap, n_stack, n_out = capacity_needed(cnt)
        if (n_events > ht.shape[0] or n_cont > ci.shape[0] or n_heap > nhk.shape[1] or n_stack > stack.shape[0]
                or n_out > outbox.shape[0]):
            cnt[C_STOP] = STOP_GROW
            break
        if nxt < n_req and (cnt[C_HSIZE] == 0 or qf[nxt, QF_T] <= ht[0]):
            now = qf[nxt, QF_T]
            if now > horizon:
                break
            i = nxt
            nxt += 1
            cnt[C_NXT] = nxt
            f = qi[i, QI_FN]
            v = publish(f)
            if v < 0:  # no healthy invoker: the controller answers 503 at once
                qi[i, QI_STATUS] = ST_ERROR
                qf[i, QF_FINISH] = now
                qi[i, QI_FAULT] = FAULT_NO_INVOKER
            else:
                _push(ht, hi, cnt, now + cfg[G_DISPATCH], E_RUN, i, v)
        else:
            e = _pop(ht, hi, cnt)
            now = ht[e]
            if now > horizon:
                now = horizon
                break
            kind = hi[e, 1]
            a = hi[e, 2]
            b = hi[e, 3]
            vbase = 0
            if kind == E_RUN:  # ContainerPool.run: behind a non-empty buffer, or placed now
                first = inv[b, IV_BHEAD] < 0
                buffer_append(b, a)
                if first:
                    vbase = drain_to_stack(b, now, 0)
            elif kind == E_SCHED:
                c = b
                if ci[c, CI_REMOVED] == 0 and ci[c, CI_NODE] < 0:
                    # the deadline exactly as the timeout event is pushed (``>=``: a pod that
                    # could never be Ready in time is failed at it, not rescheduled forever)
                    if now >= cf[c, CF_CREATED] + cfg[G_TIMEOUT]:
                        vbase = fail(c, now)
                    else:
                        cnt[C_EVENTS] += 1
                        handled += 1
                        cnt[C_ARG] = c
                        cnt[C_STOP] = STOP_SCHED
                        break
            elif kind == E_INIT:
                c = b
                if ci[c, CI_REMOVED] == 0:
                    cf[c, CF_READY] = now
                    ci[c, CI_WARM] = 1
                    if ci[c, CI_WHEAD] >= 0:
                        stack_push(K_INIT, ci[c, CI_WHEAD], c, 0, 0, 0)
                    ci[c, CI_WHEAD] = -1
                    ci[c, CI_WTAIL] = -1
            elif kind == E_CPU:
                if b == ni[a, NI_VERSION]:
                    advance(a, now)
                    stack_push(K_CPU, a, 0, 0, 0, 0)
            elif kind == E_IO:
                stack_push(K_FINISH, a, qi[a, QI_POD], 0, 0, 0)
            elif kind == E_HEALTH:  # a health-test action came back: a success
                health(a, R_SUCCESS, now)
            elif kind == E_TICK:  # the minute timer of an unhealthy invoker
                if inv[a, IV_USABLE] == 0:
                    _push(ht, hi, cnt, now + cfg[G_HEALTH], E_HEALTH, a, 0)
                    _push(ht, hi, cnt, now + cfg[G_TICK], E_TICK, a, 0)
            elif kind == E_IDLE:
                c = b
                if not (ci[c, CI_REMOVED] == 1 or ci[c, CI_ACTIVE] > 0 or now - cf[c, CF_LAST_USED] < cfg[G_IDLE]):
                    drop(c)
                    delete_pod(c, now)
            run_stack(now, vbase)
        cnt[C_EVENTS] += 1
        handled += 1
    cfg[G_NOW] = now
    return handled
