"""The score formulas of kube-scheduler's default plugins, as readable pure numpy functions: the
test oracle the compiled kernels (:mod:`testbed.scheduler.kernels`) are checked against. The
scheduler never calls them; its one implementation of each formula is the kernel.

Each function takes numpy arrays (one column per node) and returns int64 scores, reproducing
upstream's integer arithmetic (Go's int64 division truncates toward zero) and float64 steps.
Upstream files are under ``pkg/scheduler/framework/plugins/`` of kubernetes/kubernetes; each
function names its source. Resource arrays are shaped ``(R, N)``: R configured resources,
N nodes. An allocatable of 0 means "skip this resource on this node" (``resource_allocation.go``
leaves such entries at 0 and the scorers skip them), which is also how a scalar resource that the
pod does not request is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_NODE_SCORE = 100  # staging/src/k8s.io/kube-scheduler/framework/interface.go
MIN_NODE_SCORE = 0
MAX_CUSTOM_PRIORITY_SCORE = 10  # pkg/scheduler/apis/config/types.go


def div_trunc(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """Integer division truncating toward zero, as Go's ``/`` on int64."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _weighted_mean_floor(per_resource: np.ndarray, valid: np.ndarray, weights: np.ndarray) -> np.ndarray:
    w = weights.astype(np.int64)[:, None] * valid
    wsum = w.sum(axis=0)
    total = (per_resource * w).sum(axis=0)
    return np.where(wsum > 0, total // np.maximum(wsum, 1), 0).astype(np.int64)


def least_allocated(requested: np.ndarray, allocatable: np.ndarray, weights: Sequence[int] | np.ndarray) -> np.ndarray:
    """``noderesources/least_allocated.go``: per resource ``(cap-req)*100/cap`` (0 if req > cap),
    then the weighted mean over the resources the node has, truncated."""
    req = np.asarray(requested, dtype=np.int64)
    cap = np.asarray(allocatable, dtype=np.int64)
    valid = cap > 0
    safe = np.where(valid, cap, 1)
    s = np.where(valid & (req <= cap), (cap - req) * MAX_NODE_SCORE // safe, 0)
    return _weighted_mean_floor(s, valid, np.asarray(weights))


def most_allocated(requested: np.ndarray, allocatable: np.ndarray, weights: Sequence[int] | np.ndarray) -> np.ndarray:
    """``noderesources/most_allocated.go``: per resource ``min(req,cap)*100/cap``, weighted mean."""
    req = np.asarray(requested, dtype=np.int64)
    cap = np.asarray(allocatable, dtype=np.int64)
    valid = cap > 0
    safe = np.where(valid, cap, 1)
    s = np.where(valid, np.minimum(req, cap) * MAX_NODE_SCORE // safe, 0)
    return _weighted_mean_floor(s, valid, np.asarray(weights))


def broken_linear(shape: Sequence[tuple[int, int]], p: np.ndarray) -> np.ndarray:
    """``helper/shape_score.go`` (``BuildBrokenLinearFunction``): the first point's score at or
    below its utilization, the last point's beyond, linear in between with int64 truncation."""
    p = np.asarray(p, dtype=np.int64)
    out = np.full(p.shape, shape[-1][1], dtype=np.int64)
    done = np.zeros(p.shape, dtype=bool)
    for i, (u, s) in enumerate(shape):
        here = ~done & (p <= u)
        if i == 0:
            out = np.where(here, s, out)
        else:
            u0, s0 = shape[i - 1]
            out = np.where(here, s0 + div_trunc((s - s0) * (p - u0), u - u0), out)
        done |= here
    return out


def requested_to_capacity_ratio(
    requested: np.ndarray,
    allocatable: np.ndarray,
    weights: Sequence[int] | np.ndarray,
    shape: Sequence[tuple[int, int]],
) -> np.ndarray:
    """``noderesources/requested_to_capacity_ratio.go``. ``shape`` is in config units (score 0..10),
    scaled by ``MaxNodeScore/MaxCustomPriorityScore``; utilization is ``req*100/cap`` (100 when
    over capacity); only resources with a positive score enter the weighted mean, which is rounded
    half away from zero (``math.Round``)."""
    scaled = [(int(u), int(s) * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for u, s in shape]
    req = np.asarray(requested, dtype=np.int64)
    cap = np.asarray(allocatable, dtype=np.int64)
    valid = cap > 0
    safe = np.where(valid, cap, 1)
    util = np.where(req > cap, 100, req * 100 // safe)
    s = broken_linear(scaled, util)
    use = valid & (s > 0)
    w = np.asarray(weights, dtype=np.int64)[:, None] * use
    wsum = w.sum(axis=0)
    total = (s * w).sum(axis=0)
    mean = total / np.maximum(wsum, 1)
    return np.where(wsum > 0, np.floor(mean + 0.5), 0).astype(np.int64)


def balance_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
    """``noderesources/balanced_allocation.go`` (``balancedResourceScorer``, v1.22-v1.35):
    ``int64((1 - std) * 100)`` over the fractions ``min(1, req/alloc)`` of the resources the node
    has; std is ``|f1-f2|/2`` for two fractions, the population std for more, 0 otherwise."""
    req = np.asarray(requested, dtype=np.float64)
    cap = np.asarray(allocatable, dtype=np.float64)
    valid = cap > 0
    frac = np.where(valid, np.minimum(req / np.where(valid, cap, 1.0), 1.0), 0.0)
    n = valid.sum(axis=0)
    r = frac.shape[0]
    if r == 2:
        two = np.abs((frac[0] - frac[1]) / 2)
    else:
        order = np.argsort(~valid, axis=0, kind="stable")
        ordered = np.take_along_axis(frac, order, axis=0)
        two = np.abs((ordered[0] - ordered[1]) / 2) if r > 1 else np.zeros(frac.shape[1])
    total = frac.sum(axis=0)
    mean = total / np.maximum(n, 1)
    sq = (valid * (frac - mean) ** 2).sum(axis=0)
    many = np.sqrt(sq / np.maximum(n, 1))
    std = np.where(n == 2, two, np.where(n > 2, many, 0.0))
    return np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def balanced_allocation(
    requested_with_pod: np.ndarray,
    requested_without_pod: np.ndarray,
    allocatable: np.ndarray,
    *,
    change: bool = True,
) -> np.ndarray:
    """NodeResourcesBalancedAllocation. Up to v1.35 the score is the balance with the pod placed.
    From v1.36 (``change``; kubernetes/kubernetes#135573, "consider the change to the node's
    balance") it is ``50 + (50 + S_with - S_without) / 2``: 75 means the pod leaves the balance
    unchanged."""
    with_pod = balance_score(requested_with_pod, allocatable)
    if not change:
        return with_pod
    half = MAX_NODE_SCORE // 2
    return half + div_trunc(half + with_pod - balance_score(requested_without_pod, allocatable), 2)


def default_normalize(scores: np.ndarray, *, reverse: bool = False) -> np.ndarray:
    """``helper/normalize_score.go`` (``DefaultNormalizeScore``): ``100*s/max``; with ``reverse``
    ``100 - that``; when every score is 0, all become 100 if ``reverse`` and stay 0 otherwise."""
    s = np.asarray(scores, dtype=np.int64)
    if s.size == 0:
        return s
    m = int(s.max())
    if m == 0:
        return np.full(s.shape, MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    out = div_trunc(MAX_NODE_SCORE * s, m)
    return MAX_NODE_SCORE - out if reverse else out


def inter_pod_affinity_normalize(scores: np.ndarray) -> np.ndarray:
    """``interpodaffinity/scoring.go`` (``NormalizeScore``): min-max to 0..100 in float64,
    truncated; all 0 when every node has the same score."""
    s = np.asarray(scores, dtype=np.int64)
    if s.size == 0:
        return s
    lo, hi = int(s.min()), int(s.max())
    diff = hi - lo
    if diff <= 0:
        return np.zeros(s.shape, dtype=np.int64)
    return np.trunc(float(MAX_NODE_SCORE) * ((s - lo).astype(np.float64) / float(diff))).astype(np.int64)


def topology_normalizing_weight(size: int) -> float:
    """``podtopologyspread/scoring.go``: ``ln(size + 2)`` for a topology with ``size`` domains."""
    return math.log(size + 2)


def go_round(x: np.ndarray) -> np.ndarray:
    """``math.Round``: half away from zero (numpy's ``round`` is half to even)."""
    x = np.asarray(x, dtype=np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


def topology_spread_normalize(scores: np.ndarray, ignored: np.ndarray | None = None) -> np.ndarray:
    """``podtopologyspread/scoring.go`` (``NormalizeScore``): ignored nodes get 0; if the highest
    score is 0 every other node gets 100, else ``100*(max+min-s)/max``."""
    s = np.asarray(scores, dtype=np.int64)
    ign = np.zeros(s.shape, dtype=bool) if ignored is None else np.asarray(ignored, dtype=bool)
    keep = ~ign
    if not keep.any():
        return np.zeros(s.shape, dtype=np.int64)
    lo = int(s[keep].min())
    hi = max(int(s[keep].max()), 0)
    if hi == 0:
        return np.where(keep, MAX_NODE_SCORE, 0).astype(np.int64)
    return np.where(keep, div_trunc(MAX_NODE_SCORE * (hi + lo - s), hi), 0).astype(np.int64)


def topology_spread_scores(sel, sids, has, dom, ndom, host, skews, elig, idx, require_all) -> np.ndarray:  # noqa: PLR0913
    """``podtopologyspread/scoring.go`` over the candidates ``idx``, with the arguments of
    :func:`kernels.spread_scores`: nodes lacking a topology key are ignored when
    ``require_all``; per constraint, the matching pods counted on the node itself (hostname) or
    per domain over the eligible nodes, times ``ln(domains among the kept candidates + 2)``, plus
    ``maxSkew - 1``; rounded, then normalised."""
    ignored = np.zeros(len(idx), dtype=bool)
    if require_all:
        for c in range(len(sids)):
            ignored |= ~has[c, idx]
    keep = idx[~ignored]
    total = np.zeros(len(idx), dtype=np.float64)
    for c, sid in enumerate(sids):
        counts = sel[sid]
        if host[c]:
            size = len(keep)
            cnt = counts[idx]
        else:
            present = np.zeros(ndom[c], dtype=bool)
            present[dom[c, keep]] = True
            size = int(present.sum())
            per_dom = np.bincount(dom[c, elig[c]], weights=counts[elig[c]], minlength=ndom[c])
            cnt = per_dom[dom[c, idx]]
        total += np.where(has[c, idx], cnt * topology_normalizing_weight(size) + float(skews[c] - 1), 0.0)
    raw = np.where(ignored, 0, go_round(total))
    return topology_spread_normalize(raw, ignored)


def inter_pod_affinity_scores(sel, tmpl, src_ok, key_has, key_dom, key_ndom, key_unique, part_key, part_src, part_row, part_coef, idx):  # noqa: PLR0913
    """``interpodaffinity/scoring.go`` over the candidates ``idx``, with the arguments of
    :func:`kernels.ipa_scores`: per topology key, the coefficient-weighted counts of matching
    pods on labelled nodes summed per domain (per node when every value is unique), then
    :func:`inter_pod_affinity_normalize`. Returns the scores and whether any term matched a pod."""
    raw = np.zeros(len(idx), dtype=np.int64)
    any_entry = False
    n = sel.shape[1]
    for k in range(len(key_has)):
        src = key_has[k] & src_ok
        vec = np.zeros(n, dtype=np.int64)
        for p in np.flatnonzero(part_key == k):
            c = (sel[part_row[p]] if part_src[p] == 0 else tmpl[part_row[p]]) * src
            any_entry = any_entry or bool(c.any())
            vec += part_coef[p] * c
        if key_unique[k]:
            raw += np.where(key_has[k, idx], vec[idx], 0)
        else:
            per_dom = np.bincount(key_dom[k], weights=vec, minlength=key_ndom[k]).astype(np.int64)
            raw += np.where(key_has[k, idx], per_dom[key_dom[k, idx]], 0)
    return inter_pod_affinity_normalize(raw), any_entry
