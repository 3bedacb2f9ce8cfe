"""Weights matter on the shipped scenarios (a small ``sim sweep``; docs/scenarios.md has the full
report): the spread across random profiles is real, and the default profile can be beaten."""

from __future__ import annotations

from testbed.cluster import load_cluster
from testbed.scenarios import build_workload, get_scenario
from testbed.sim.sweep import objective, sweep


def _sweep(name, samples, tmp_path):
    s = get_scenario(name)
    return sweep(load_cluster(s.cluster), build_workload(s, cache=tmp_path), samples=samples, seed=0)


def test_weights_change_latency_and_defaults_can_lose(tmp_path):
    rep = _sweep("speed-cpu", 8, tmp_path)
    assert rep["objective_max_over_min"] > 1.3
    assert rep["default_rank"] > 1  # some random profile beats the default on mixed node speeds
    assert rep["best"]["objective_s"] < 0.9 * rep["default"]["objective_s"]


def test_spot_taints_make_the_defaults_good(tmp_path):
    """On spot-16 the default TaintToleration weight keeps work off the slow spot nodes; random
    profiles that weaken it lose."""
    rep = _sweep("spot-cpu", 10, tmp_path)
    assert rep["objective_max_over_min"] > 1.1
    assert rep["default"]["objective_s"] <= rep["objective_s"]["median"]


def test_objective_counts_failures_at_the_timeout():
    s = {"count": 10, "ok": 8, "timeout_s": 30.0, "latency_mean_s": 1.0}
    assert objective(s) == (8 * 1.0 + 2 * 30.0) / 10
