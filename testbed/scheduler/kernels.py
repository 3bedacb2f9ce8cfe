"""Compiled (numba) kernels of the hottest score formulas, for the scheduler's fast path.

They compute exactly what the reference functions in :mod:`testbed.scheduler.scoring` compute
(same integer truncations, same float64 operations in the same order; a property test checks
them against each other), but in one pass over the scored nodes, gathering by node index inside
the loop instead of materialising fancy-indexed copies. Upstream sources are cited in
:mod:`testbed.scheduler.scoring`.

If numba cannot be imported the scheduler falls back to the reference functions.
"""

from __future__ import annotations

import math

import numpy as np

try:  # pragma: no cover - exercised implicitly
    import numba

    _jit = numba.njit(cache=True, nogil=True)
    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

    def _jit(f):  # type: ignore[no-redef]
        return f


@_jit
def fit_scores(nonzero, alloc, rows, idx, pod, skip, weights, most):  # noqa: PLR0913
    """LeastAllocated (``most`` False) / MostAllocated (True) over nodes ``idx``.

    ``nonzero`` / ``alloc``: (R_all, N) node arrays; ``rows``: the configured resources' rows (-1
    for a resource no node has); ``pod``: the pod's request per configured resource; ``skip``:
    resources bypassed for this pod (scalars it does not request)."""
    m = idx.shape[0]
    out = np.empty(m, dtype=np.int64)
    nres = rows.shape[0]
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
            elif req > cap:
                s = 0
            else:
                s = ((cap - req) * 100) // cap
            num += s * weights[r]
            wsum += weights[r]
        out[k] = num // wsum if wsum > 0 else 0
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
