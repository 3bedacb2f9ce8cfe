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
