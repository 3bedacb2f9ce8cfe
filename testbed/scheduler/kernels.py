"""Compiled (numba) kernels: the one implementation of every score formula on the hot path.

Each kernel computes, in one pass over the scored nodes ``idx`` (gathering by node index inside
the loop instead of materialising fancy-indexed copies), exactly what the readable reference in
:mod:`testbed.scheduler.reference` computes: the same integer truncations and the same float64
operations in the same order. The reference is only the test oracle (``test_sched_kernels.py``
checks every kernel against it); the plugins under :mod:`testbed.scheduler.plugins` call these.
numba is a required dependency. Upstream sources are cited in :mod:`testbed.scheduler.reference`
and in each plugin module.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _div_trunc(a, b):
    """Go's int64 ``/``: truncation toward zero (numba's ``//`` floors)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@_jit
def shape_table(shape_u, shape_s):
    """RequestedToCapacityRatio's shape (``helper/shape_score.go``, ``BuildBrokenLinearFunction``)
    at every utilization 0..100: the first point's score at or below its utilization, the last
    point's beyond, linear in between with int64 truncation. ``shape_s`` is already scaled to
    0..100. A table, so that :func:`fit_scores` looks a score up instead of walking the shape."""
    table = np.empty(101, dtype=np.int64)
    npts = shape_u.shape[0]
    for util in range(101):
        s = shape_s[npts - 1]
        for i in range(npts):
            if util <= shape_u[i]:
                if i == 0:
                    s = shape_s[0]
                else:
                    s = shape_s[i - 1] + _div_trunc((shape_s[i] - shape_s[i - 1]) * (util - shape_u[i - 1]), shape_u[i] - shape_u[i - 1])
                break
        table[util] = s
    return table


@_jit
def fit_scores(nonzero, alloc, rows, idx, pod, skip, weights, most, table):  # noqa: PLR0913
    """NodeResourcesFit over nodes ``idx``: LeastAllocated, MostAllocated (``most``) or, when
    ``table`` (the :func:`shape_table` of the shape) is not empty, RequestedToCapacityRatio.

    ``nonzero`` / ``alloc``: (R_all, N) node arrays; ``rows``: the configured resources' rows (-1
    for a resource no node has); ``pod``: the pod's request per configured resource; ``skip``:
    resources bypassed for this pod (scalars it does not request). Per resource: LeastAllocated
    ``(cap-req)*100/cap`` (0 over capacity), MostAllocated ``min(req,cap)*100/cap``, both
    averaged with the weights and truncated; RequestedToCapacityRatio the shape at the
    utilization ``req*100/cap`` (100 over capacity), averaged over the resources with a positive
    score and rounded half away from zero."""
    m = idx.shape[0]
    out = np.empty(m, dtype=np.int64)
    nres = rows.shape[0]
    rtcr = table.shape[0] > 0
    half_up = -1 if rtcr else 0
    for k in range(m):
        j = idx[k]
        num = 0
        wsum = 0
        for r in range(nres):
            row = rows[r]
            if row < 0 or skip[r]:
                continue
            cap = alloc[row, j]
            if cap == 0:
                continue
            req = nonzero[row, j] + pod[r]
            if most:
                s = (min(req, cap) * 100) // cap
            elif rtcr:
                s = table[100 if req > cap else (req * 100) // cap]
                if s <= 0:
                    continue
            elif req > cap:
                s = 0
            else:
                s = ((cap - req) * 100) // cap
            num += s * weights[r]
            wsum += weights[r]
        # RTCR rounds the mean half up (math.Round of a non-negative mean): adding wsum // 2
        # before the division does it exactly in integers, and branch-free
        out[k] = (num + ((wsum >> 1) & half_up)) // wsum if wsum > 0 else 0
    return out


@_jit
def balanced_scores(requested, alloc, rows, idx, pod, skip, change):
    """NodeResourcesBalancedAllocation over nodes ``idx`` (``change``: the v1.36 formula).

    Per node, the fractions ``min(1, req/alloc)`` of the resources it has, with and without the
    pod, their std (``|f1-f2|/2`` for two, the population std for more, 0 otherwise) and
    ``int64((1-std)*100)``; written as one flat loop, since helper calls with array arguments
    cost reference counting per node."""
    m = idx.shape[0]
    nres = rows.shape[0]
    out = np.empty(m, dtype=np.int64)
    for k in range(m):
        j = idx[k]
        n = 0
        tw = 0.0
        to = 0.0
        w0 = 0.0
        w1 = 0.0
        o0 = 0.0
        o1 = 0.0
        for r in range(nres):
            row = rows[r]
            if row < 0 or skip[r]:
                continue
            cap = alloc[row, j]
            if cap == 0:
                continue
            q = requested[row, j]
            fw = float(q + pod[r]) / float(cap)
            if fw > 1.0:
                fw = 1.0
            fo = float(q) / float(cap)
            if fo > 1.0:
                fo = 1.0
            tw += fw
            to += fo
            if n == 0:
                w0 = fw
                o0 = fo
            elif n == 1:
                w1 = fw
                o1 = fo
            n += 1
        sw = 0.0
        so = 0.0
        if n == 2:
            sw = abs((w0 - w1) / 2)
            so = abs((o0 - o1) / 2)
        elif n > 2:
            mw = tw / n
            mo = to / n
            qw = 0.0
            qo = 0.0
            for r in range(nres):
                row = rows[r]
                if row < 0 or skip[r]:
                    continue
                cap = alloc[row, j]
                if cap == 0:
                    continue
                q = requested[row, j]
                fw = float(q + pod[r]) / float(cap)
                if fw > 1.0:
                    fw = 1.0
                fo = float(q) / float(cap)
                if fo > 1.0:
                    fo = 1.0
                qw += (fw - mw) * (fw - mw)
                qo += (fo - mo) * (fo - mo)
            sw = math.sqrt(qw / n)
            so = math.sqrt(qo / n)
        with_pod = int((1 - sw) * 100)
        if change:
            d = 50 + with_pod - int((1 - so) * 100)
            q2 = abs(d) // 2
            out[k] = 50 + (q2 if d >= 0 else -q2)
        else:
            out[k] = with_pod
    return out


@_jit
def default_normalize(raw, idx, reverse):
    """``DefaultNormalizeScore`` of ``raw[idx]`` (scores are non-negative)."""
    m = idx.shape[0]
    out = np.empty(m, dtype=np.int64)
    hi = 0
    for k in range(m):
        v = raw[idx[k]]
        if v > hi:
            hi = v
    for k in range(m):
        if hi == 0:
            out[k] = 100 if reverse else 0
        else:
            s = (100 * raw[idx[k]]) // hi
            out[k] = 100 - s if reverse else s
    return out


@_jit
def spread_normalize(total, ignored):
    """PodTopologySpread: ``math.Round`` of the raw sums, then ``NormalizeScore``."""
    m = total.shape[0]
    raw = np.empty(m, dtype=np.int64)
    lo = np.iinfo(np.int64).max
    hi = 0
    for k in range(m):
        x = total[k]
        v = np.int64(math.floor(abs(x) + 0.5))
        raw[k] = v if x >= 0 else -v
        if ignored[k]:
            continue
        if raw[k] < lo:
            lo = raw[k]
        if raw[k] > hi:
            hi = raw[k]
    out = np.zeros(m, dtype=np.int64)
    for k in range(m):
        if ignored[k]:
            continue
        if hi == 0:
            out[k] = 100
        else:
            num = 100 * (hi + lo - raw[k])
            q = abs(num) // hi
            out[k] = q if num >= 0 else -q
    return out


@_jit
def spread_scores(sel, sids, has, dom, ndom, host, skews, elig, idx, require_all):  # noqa: PLR0913
    """PodTopologySpread PreScore + Score + NormalizeScore over the candidate nodes ``idx``
    (``podtopologyspread/scoring.go``).

    Per constraint c: ``sids[c]`` the row of ``sel`` counting matching pods per node, ``has`` /
    ``dom`` the node's topology label (presence, domain id of the value, "" for none), ``host``
    the hostname constraints (counted on the node itself), ``elig`` the nodes whose pods count
    (node inclusion policies, all topology keys present when ``require_all``)."""
    m = idx.shape[0]
    nc = sids.shape[0]
    n = sel.shape[1]
    ignored = np.zeros(m, dtype=np.bool_)
    kept = 0
    for k in range(m):
        j = idx[k]
        if require_all:
            for c in range(nc):
                if not has[c, j]:
                    ignored[k] = True
                    break
        if not ignored[k]:
            kept += 1
    total = np.zeros(m, dtype=np.float64)
    for c in range(nc):
        row = sids[c]
        if host[c]:
            weight = math.log(kept + 2)
            for k in range(m):
                j = idx[k]
                if has[c, j]:
                    total[k] += float(sel[row, j]) * weight + float(skews[c] - 1)
            continue
        present = np.zeros(ndom[c], dtype=np.bool_)
        size = 0
        for k in range(m):
            if ignored[k]:
                continue
            d = dom[c, idx[k]]
            if not present[d]:
                present[d] = True
                size += 1
        per_dom = np.zeros(ndom[c], dtype=np.int64)
        for j in range(n):
            if elig[c, j]:
                per_dom[dom[c, j]] += sel[row, j]
        weight = math.log(size + 2)
        for k in range(m):
            j = idx[k]
            if has[c, j]:
                total[k] += float(per_dom[dom[c, j]]) * weight + float(skews[c] - 1)
    return spread_normalize(total, ignored)


@_jit
def ipa_scores(sel, tmpl, src_ok, key_has, key_dom, key_ndom, key_unique, part_key, part_src, part_row, part_coef, idx):  # noqa: PLR0913
    """InterPodAffinity PreScore + Score + NormalizeScore (``interpodaffinity/scoring.go``).

    Each part adds ``coef`` x (pods counted by row ``part_row`` of ``sel`` (src 0) or ``tmpl``
    (src 1)) to the topology domain of the pods' node under key ``part_key``. Returns the
    normalised scores over ``idx`` and whether PreScore found any term match (else it skips)."""
    m = idx.shape[0]
    n = sel.shape[1]
    nk = key_has.shape[0]
    raw = np.zeros(m, dtype=np.int64)
    any_entry = False
    vec = np.zeros(n, dtype=np.int64)
    for kk in range(nk):
        vec[:] = 0
        for p in range(part_key.shape[0]):
            if part_key[p] != kk:
                continue
            coef = part_coef[p]
            row = part_row[p]
            for j in range(n):
                if key_has[kk, j] and src_ok[j]:
                    c = sel[row, j] if part_src[p] == 0 else tmpl[row, j]
                    if c != 0:
                        any_entry = True
                        vec[j] += coef * c
        if key_unique[kk]:
            for k in range(m):
                j = idx[k]
                if key_has[kk, j]:
                    raw[k] += vec[j]
        else:
            per_dom = np.zeros(key_ndom[kk], dtype=np.int64)
            for j in range(n):
                per_dom[key_dom[kk, j]] += vec[j]
            for k in range(m):
                j = idx[k]
                if key_has[kk, j]:
                    raw[k] += per_dom[key_dom[kk, j]]
    out = np.zeros(m, dtype=np.int64)
    if m == 0:
        return out, any_entry
    lo = raw[0]
    hi = raw[0]
    for k in range(m):
        if raw[k] < lo:
            lo = raw[k]
        if raw[k] > hi:
            hi = raw[k]
    diff = hi - lo
    if diff > 0:
        for k in range(m):
            out[k] = np.int64(math.trunc(100.0 * (float(raw[k] - lo) / float(diff))))
    return out, any_entry
