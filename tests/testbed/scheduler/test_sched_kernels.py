"""The compiled fast-path kernels agree exactly with the reference formulas in scoring.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.scheduler import kernels, scoring

pytestmark = pytest.mark.skipif(not kernels.AVAILABLE, reason="numba is not installed")


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
    got = kernels.fit_scores(req, alloc, rows, idx, pod, skip, w, most)
    a, with_pod, _ = _reference_inputs(alloc, req, pod, skip, idx)
    ref = (scoring.most_allocated if most else scoring.least_allocated)(with_pod, a, w)
    assert got.tolist() == ref.tolist()


@settings(max_examples=150, deadline=None)
@given(resource_state(), st.booleans())
def test_balanced_kernel_matches_reference(state, change):
    alloc, req, pod, skip, _, idx = state
    rows = np.arange(alloc.shape[0], dtype=np.int64)
    got = kernels.balanced_scores(req, alloc, rows, idx, pod, skip, change)
    a, with_pod, without = _reference_inputs(alloc, req, pod, skip, idx)
    ref = scoring.balanced_allocation(with_pod, without, a, kube_version="1.36" if change else "1.35")
    assert got.tolist() == ref.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=1, max_size=40), st.booleans(), st.data())
def test_default_normalize_kernel_matches_reference(raw, reverse, data):
    raw = np.array(raw, dtype=np.int64)
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, len(raw) - 1), min_size=1))), dtype=np.int64)
    assert kernels.default_normalize(raw, idx, reverse).tolist() == scoring.default_normalize(raw[idx], reverse=reverse).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.booleans()), min_size=1, max_size=40))
def test_spread_normalize_kernel_matches_reference(rows):
    total = np.array([t for t, _ in rows], dtype=np.float64)
    ignored = np.array([i for _, i in rows], dtype=bool)
    raw = np.where(ignored, 0, scoring.go_round(total))
    assert kernels.spread_normalize(total, ignored).tolist() == scoring.topology_spread_normalize(raw, ignored).tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(0, 30))
def test_scheduler_with_and_without_kernels_agree(seed, n_nodes, n_pods):
    """The whole fast path (kernels) against the numpy reference path, on random clusters with
    zones, taints, images, Knative-style anti-affinity and spread constraints."""
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
    results = []
    for available in (True, False):
        old = kernels.AVAILABLE
        kernels.AVAILABLE = available
        try:
            s = Scheduler(nodes, profile_from_weights({}), seed=1)
            local = np.random.default_rng(seed + 1)
            for _ in range(n_pods):
                s.bind(templates[local.integers(3)], int(local.integers(n_nodes)))
            cand = np.flatnonzero(local.random(n_nodes) < 0.7)
            got = []
            for t in templates:
                for c in (None, cand):
                    scores, skipped = s.plugin_scores(t, c)
                    got.append(({k: v.tolist() for k, v in scores.items()}, skipped))
            results.append(got)
        finally:
            kernels.AVAILABLE = old
    assert results[0] == results[1]
