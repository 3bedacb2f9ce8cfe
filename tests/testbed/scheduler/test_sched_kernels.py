"""The compiled kernels (the scheduler's one implementation of each formula) agree exactly with
the readable reference formulas of reference.py, their test oracle."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.scheduler import kernels, reference


@st.composite
def resource_state(draw):
    r = draw(st.integers(1, 4))
    n = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    big = draw(st.sampled_from([10, 10_000, 64 * 2**30]))
    alloc = rng.integers(0, big, (r, n)) * (rng.random((r, n)) > 0.15)
    req = rng.integers(0, big, (r, n))
    pod = rng.integers(0, big // 2 + 1, r)
    skip = rng.random(r) < 0.2
    weights = rng.integers(1, 101, r)
    idx = np.sort(rng.choice(n, size=draw(st.integers(1, n)), replace=False)).astype(np.int64)
    return alloc.astype(np.int64), req.astype(np.int64), pod.astype(np.int64), skip, weights.astype(np.int64), idx


def _reference_inputs(alloc, req, pod, skip, idx):
    a = np.where(skip[:, None], 0, alloc[:, idx])
    return a, req[:, idx] + pod[:, None], req[:, idx]


@settings(max_examples=150, deadline=None)
@given(resource_state(), st.booleans())
def test_fit_kernel_matches_reference(state, most):
    alloc, req, pod, skip, w, idx = state
    rows = np.arange(alloc.shape[0], dtype=np.int64)
    got = kernels.fit_scores(req, alloc, rows, idx, pod, skip, w, most, np.zeros(0, dtype=np.int64))
    a, with_pod, _ = _reference_inputs(alloc, req, pod, skip, idx)
    ref = (reference.most_allocated if most else reference.least_allocated)(with_pod, a, w)
    assert got.tolist() == ref.tolist()


@settings(max_examples=150, deadline=None)
@given(resource_state(), st.booleans())
def test_balanced_kernel_matches_reference(state, change):
    alloc, req, pod, skip, _, idx = state
    rows = np.arange(alloc.shape[0], dtype=np.int64)
    got = kernels.balanced_scores(req, alloc, rows, idx, pod, skip, change)
    a, with_pod, without = _reference_inputs(alloc, req, pod, skip, idx)
    ref = reference.balanced_allocation(with_pod, without, a, change=change)
    assert got.tolist() == ref.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=40), st.booleans(), st.data())
def test_default_normalize_kernel_matches_reference(raw, reverse, data):
    raw = np.array(raw, dtype=np.int64)
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, len(raw) - 1), min_size=1))), dtype=np.int64)
    assert kernels.default_normalize(raw, idx, reverse).tolist() == reference.default_normalize(raw[idx], reverse=reverse).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.booleans()), min_size=1, max_size=40))
def test_spread_normalize_kernel_matches_reference(rows):
    total = np.array([t for t, _ in rows], dtype=np.float64)
    ignored = np.array([i for _, i in rows], dtype=bool)
    raw = np.where(ignored, 0, reference.go_round(total))
    assert kernels.spread_normalize(total, ignored).tolist() == reference.topology_spread_normalize(raw, ignored).tolist()


@st.composite
def shapes(draw):
    """A valid RequestedToCapacityRatio shape in config units: increasing utilizations in
    0..100, scores in 0..10."""
    us = sorted(draw(st.sets(st.integers(0, 100), min_size=1, max_size=5)))
    return [(u, draw(st.integers(0, 10))) for u in us]


@settings(max_examples=150, deadline=None)
@given(resource_state(), shapes())
def test_rtcr_kernel_matches_reference(state, shape):
    alloc, req, pod, skip, w, idx = state
    rows = np.arange(alloc.shape[0], dtype=np.int64)
    u = np.array([p for p, _ in shape], dtype=np.int64)
    sc = np.array([10 * q for _, q in shape], dtype=np.int64)
    got = kernels.fit_scores(req, alloc, rows, idx, pod, skip, w, False, kernels.shape_table(u, sc))
    a, with_pod, _ = _reference_inputs(alloc, req, pod, skip, idx)
    assert got.tolist() == reference.requested_to_capacity_ratio(with_pod, a, w, shape).tolist()


@st.composite
def topology(draw):
    """Random selector/template counters and per-key node labels over n nodes."""
    n = draw(st.integers(1, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nk = draw(st.integers(1, 3))
    ndom = rng.integers(1, 5, nk)
    dom = np.stack([rng.integers(0, d, n) for d in ndom]).astype(np.int64)
    has = rng.random((nk, n)) < 0.8
    counts = rng.integers(0, 6, (4, n)).astype(np.int64)
    idx = np.sort(rng.choice(n, size=draw(st.integers(1, n)), replace=False)).astype(np.int64)
    return rng, n, nk, ndom.astype(np.int64), dom, has, counts, idx


@settings(max_examples=150, deadline=None)
@given(topology(), st.booleans())
def test_spread_kernel_matches_reference(topo, require_all):
    rng, n, nk, ndom, dom, has, counts, idx = topo
    sids = rng.integers(0, counts.shape[0], nk).astype(np.int64)
    host = rng.random(nk) < 0.3
    skews = rng.integers(1, 6, nk).astype(np.int64)
    elig = rng.random((nk, n)) < 0.8
    args = (counts, sids, has, dom, ndom, host, skews, elig, idx, require_all)
    assert kernels.spread_scores(*args).tolist() == reference.topology_spread_scores(*args).tolist()


@settings(max_examples=150, deadline=None)
@given(topology())
def test_ipa_kernel_matches_reference(topo):
    rng, n, nk, ndom, dom, has, counts, idx = topo
    unique = np.array([bool(has[k].all()) and len(set(dom[k].tolist())) == n for k in range(nk)], dtype=np.bool_)
    parts = int(rng.integers(1, 6))
    part_key = rng.integers(0, nk, parts).astype(np.int64)
    part_src = rng.integers(0, 2, parts).astype(np.int64)
    part_row = rng.integers(0, counts.shape[0], parts).astype(np.int64)
    part_coef = rng.integers(-100, 101, parts).astype(np.int64)
    src_ok = rng.random(n) < 0.9
    tmpl = counts[::-1].copy()
    args = (counts, tmpl, src_ok, has, dom, ndom, unique, part_key, part_src, part_row, part_coef, idx)
    got, got_any = kernels.ipa_scores(*args)
    ref, ref_any = reference.inter_pod_affinity_scores(*args)
    assert (got.tolist(), bool(got_any)) == (ref.tolist(), ref_any)


def _oracle(s, name, state, idx):
    """The reference formula of plugin ``name`` fed from the scheduler's PreScore ``state``."""
    if name in ("TaintToleration", "NodeAffinity"):
        assert state.reverse == (name == "TaintToleration")
        return reference.default_normalize(state.raw[idx], reverse=state.reverse)
    if name in ("NodeResourcesFit", "NodeResourcesBalancedAllocation"):
        rows = np.where(state.rows >= 0, state.rows, 0)
        alloc = np.where(state.skip[:, None], 0, s.alloc[rows][:, idx])
        if name == "NodeResourcesBalancedAllocation":
            without = s.req_actual[rows][:, idx]
            return reference.balanced_allocation(without + state.pod[:, None], without, alloc, change=state.change)
        req = s.req_nonzero[rows][:, idx] + state.pod[:, None]
        if state.table.size:
            return reference.requested_to_capacity_ratio(req, alloc, state.weights, s.profile.fit.shape)
        return (reference.most_allocated if state.most else reference.least_allocated)(req, alloc, state.weights)
    if name == "PodTopologySpread":
        return reference.topology_spread_scores(s.selector_counts, *state[:7], idx, state[7])
    if name == "InterPodAffinity":
        if state.pack is None:
            return None
        out, any_entry = reference.inter_pod_affinity_scores(s.selector_counts, s.template_counts, s.has_labels, *state.pack, idx)
        return out if any_entry else None
    return None  # ImageLocality has no kernel: computed once per template


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(0, 30), st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]))
def test_scheduler_plugin_scores_match_the_reference(seed, n_nodes, n_pods, strategy):
    """The whole fast path (each plugin's kernel over its PreScore state) against the reference
    formulas fed from the same state, on random clusters with zones, taints, images,
    Knative-style anti-affinity and spread constraints."""
    from testbed.scheduler.builders import make_node, make_pod, weighted_term
    from testbed.scheduler.config import profile_from_weights
    from testbed.scheduler.framework import Scheduler
    from testbed.scheduler.objects import HOSTNAME_LABEL, ZONE_LABEL

    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(n_nodes):
        labels = {HOSTNAME_LABEL: f"n{i}"}
        if rng.random() < 0.7:
            labels[ZONE_LABEL] = f"z{rng.integers(3)}"
        taints = [{"key": "spot", "value": "1", "effect": "PreferNoSchedule"}] if rng.random() < 0.3 else []
        nodes.append(make_node(f"n{i}", capacity={"cpu": str(rng.integers(1, 9)), "memory": f"{rng.integers(1, 17)}Gi", "pods": "50"}, labels=labels, taints=taints))

    def pod(k):
        rev = {"rev": f"r{k}"}
        aff = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(100, HOSTNAME_LABEL, {"matchLabels": rev})]},
               "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(7, ZONE_LABEL, {"matchLabels": {"rev": "r0"}})]}}
        spread = [{"maxSkew": 2, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": rev}}] if k == 2 else []
        return make_pod(f"p{k}", labels=rev, requests=[{"cpu": f"{100 * (k + 1)}m"}], affinity=aff if k != 1 else None, spread=spread, owner_kind="ReplicaSet")

    templates = [pod(k) for k in range(3)]
    s = Scheduler(nodes, profile_from_weights({}, strategy=strategy), seed=1)
    local = np.random.default_rng(seed + 1)
    for _ in range(n_pods):
        s.bind(templates[local.integers(3)], int(local.integers(n_nodes)))
    cand = np.flatnonzero(local.random(n_nodes) < 0.7)
    checked = 0
    for t in templates:
        for idx in (np.arange(n_nodes), cand):
            scores, skipped = s.plugin_scores(t, idx)
            for name, _, _, state in s._plan(s._template(t)).scorers:
                if name == "ImageLocality":
                    continue
                want = None if state is None else _oracle(s, name, state, idx)
                got = None if name in skipped else scores[name].tolist()
                assert got == (None if want is None else want.tolist()), name
                checked += 1
    assert checked > 0
