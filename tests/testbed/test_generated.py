"""The generated training family: deterministic, valid, and covering every plugin's input."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from testbed.cluster import cluster_to_dict, parse_cluster
from testbed.generated import MAX_RATE_PER_S, ZONE_LABEL, generated_scenario

SEEDS = range(60)


def _signature(n) -> tuple:
    """Everything the simulator and the scheduler read of a node (the lossless form renames groups)."""
    return (n.name, n.cpu_milli, n.memory_bytes, n.pods, n.speed, n.images, tuple(sorted(n.labels.items())),
            n.taints, n.image_pull_bytes_per_s, n.unschedulable)


@pytest.fixture(scope="module")
def family():
    return [generated_scenario(s) for s in SEEDS]


def test_same_seed_same_cluster_and_workload():
    a, b = generated_scenario(7), generated_scenario(7)
    assert cluster_to_dict(a.cluster) == cluster_to_dict(b.cluster)
    assert a.workload.frame.equals(b.workload.frame)
    assert a.features == b.features
    assert cluster_to_dict(generated_scenario(8).cluster) != cluster_to_dict(a.cluster)


def test_clusters_round_trip_through_the_spec_format(family):
    for g in family:
        again = parse_cluster(cluster_to_dict(g.cluster), file="<round trip>")
        assert [_signature(n) for n in again.nodes] == [_signature(n) for n in g.cluster.nodes]


def test_every_plugin_input_occurs_in_the_family(family):
    nodes = [n for g in family for n in g.cluster.nodes]
    assert any(ZONE_LABEL in n.labels for n in nodes), "PodTopologySpread never has zones"
    assert any(t.effect == "PreferNoSchedule" for n in nodes for t in n.taints), "TaintToleration never matters"
    assert any(n.images for n in nodes) and any(not n.images for n in nodes), "ImageLocality never matters"
    assert len({n.speed for n in nodes}) > 10 and len({n.cpu_milli for n in nodes}) == 3
    per_core = {n.memory_bytes / n.cpu_milli for n in nodes}
    assert min(per_core) < max(per_core) / 2, "no memory-tight nodes"
    assert {g.features["generator"] for g in family} == {"poisson", "mmpp", "diurnal", "steps"}
    # a cluster either labels every group with a zone or none (the spread constraint needs the key)
    for g in family:
        assert len({ZONE_LABEL in n.labels for n in g.cluster.nodes}) == 1


def test_workloads_respect_the_drawn_rate_and_the_suite(family):
    from functions.spec import discover_specs

    suite = set(discover_specs())
    for g in family:
        wl = g.workload
        assert len(wl) > 0
        assert set(wl.frame["function"].unique()) <= suite - {"trace-driven"}
        assert 3 <= len(g.features["functions"]) <= 6
        assert 0.3 <= g.features["load"] <= 0.9
        assert 1.0 <= g.features["rate_per_s"] <= MAX_RATE_PER_S
        t = wl.frame["t_s"].to_numpy()
        assert np.all(np.diff(t) >= 0) and t[-1] <= g.features["duration_s"]
        # the realised rate is within a factor of the drawn one (the generators are stochastic)
        realised = len(wl) / g.features["duration_s"]
        assert 0.3 * g.features["rate_per_s"] <= realised <= 3.0 * g.features["rate_per_s"]


def test_never_a_shipped_cluster(family):
    from testbed.cluster import load_cluster
    from testbed.scenarios import scenarios

    def shape(cluster) -> list[tuple]:
        return sorted(_signature(n)[1:] for n in cluster.nodes)

    shipped = [shape(load_cluster(s.cluster)) for s in scenarios()]
    assert not any(shape(g.cluster) in shipped for g in family)


def test_negative_seed_is_refused():
    with pytest.raises(ValueError, match="seed"):
        generated_scenario(-1)


def test_scenario_pickles_for_subprocess_workers():
    g = generated_scenario(3)
    again = pickle.loads(pickle.dumps(g))
    assert again.name == "gen-3" and again.workload.frame.equals(g.workload.frame)


# ---- the trace-window family (gentrace-N): on fixture traces in the published formats ------------


@pytest.fixture(scope="module")
def trace_family(use_fixture_traces):
    return [generated_scenario(s, "trace") for s in range(12)]


def test_trace_family_is_deterministic_and_distinct_from_the_synthetic_one(trace_family):
    a, b = generated_scenario(5, "trace"), generated_scenario(5, "trace")
    assert a.name == "gentrace-5" and a.family == "trace"
    assert a.workload.frame.equals(b.workload.frame) and a.features == b.features
    assert cluster_to_dict(a.cluster) != cluster_to_dict(generated_scenario(5).cluster)
    assert {g.features["generator"] for g in trace_family} == {"trace:azure2019", "trace:alibaba-gpu2023"}


def test_trace_windows_respect_the_drawn_rate_duration_and_suite(trace_family):
    from functions.spec import discover_specs

    suite = set(discover_specs())
    for g in trace_family:
        f, t = g.features, g.workload.frame["t_s"].to_numpy()
        # resampling draws exactly rate x duration arrivals (the feature's rate is rounded), all inside the run
        assert abs(len(t) - f["rate_per_s"] * f["duration_s"]) <= 1.0
        assert np.all(np.diff(t) >= 0) and t[0] >= 0.0 and t[-1] < f["duration_s"]
        assert set(g.workload.frame["function"].unique()) <= suite - {"trace-driven"}
        assert 0.2 <= f["window_share"] <= 1.0 and 0.3 <= f["load"] <= 0.9


def test_a_trace_window_keeps_the_traces_burst_shape(use_fixture_traces):
    """The resampled arrivals follow the window's own rate curve: per-tenth counts correlate."""
    from testbed.generated import trace_base

    shaped = 0
    for seed in range(12):
        g = generated_scenario(seed, "trace")
        t, _, span = trace_base(g.features["generator"].split(":", 1)[1])
        start, end = g.workload.metadata["trace_window_s"]
        window = t[(t >= start) & (t < end)] - start
        ours = np.histogram(g.workload.frame["t_s"], bins=10, range=(0, g.features["duration_s"]))[0]
        theirs = np.histogram(window, bins=10, range=(0, end - start))[0]
        if theirs.std() > 0.2 * theirs.mean():  # a window with a shape to keep
            shaped += 1
            assert np.corrcoef(ours, theirs)[0, 1] > 0.8, g.name
    assert shaped >= 3


def test_the_trace_family_reads_only_training_side_traces():
    from testbed.generated import TRACE_SOURCES
    from testbed.scenarios import scenarios

    held_out = {s.workload.path for s in scenarios("test") if s.workload.kind == "trace"}
    trained = {s.workload.path for s in scenarios("train") if s.workload.kind == "trace"}
    paths = {path for _, path, _ in TRACE_SOURCES.values()}
    assert paths <= trained and not paths & held_out


def test_a_missing_trace_says_which_trace_to_fetch(tmp_path, monkeypatch):
    from loadgen.errors import TraceError

    monkeypatch.setenv("SCORETUNE_TRACES", str(tmp_path))
    with pytest.raises(TraceError, match=r"not found .*run `scoretune traces fetch (azure2019-invitro-extremes|alibaba-gpu2023-pods)`"):
        generated_scenario(0, "trace")


def test_an_unknown_family_is_refused():
    from testbed.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown generated family"):
        generated_scenario(0, "traces")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small_family():
    return [generated_scenario(s, "small") for s in SEEDS]


def test_the_small_family_is_few_small_nodes_of_different_generations(small_family):
    """gensmall: 3-6 nodes of 1-2 cores in 2-3 generations, the newest fastest; where warm, the
    oldest hold the images and the newest are cold; where spot, the newest are tainted."""
    for g in small_family:
        nodes = g.cluster.nodes
        assert 3 <= len(nodes) <= 6 and all(1000 <= n.cpu_milli <= 2000 for n in nodes)
        by_group: dict[str, list] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n)
        speeds = [by_group[k][0].speed for k in sorted(by_group)]
        assert speeds[0] == 1.0 and all(a > b for a, b in zip(speeds, speeds[1:], strict=False))  # gen0 newest, fastest
        assert 1.3 <= 1.0 / speeds[-1] <= 1.8 ** (len(speeds) - 1) + 1e-9
        newest, oldest = by_group[min(by_group)], by_group[max(by_group)]
        assert not any(n.images for n in newest)
        assert bool(oldest[0].images) == g.features["warm_old"]
        assert bool(newest[0].taints) == g.features["spot_new"]
        assert not any(n.taints for k in sorted(by_group)[1:] for n in by_group[k])
        assert g.features["duration_s"] in (15.0, 30.0, 60.0) and len(g.workload) >= 30
    assert {g.features["warm_old"] for g in small_family} == {True, False}
    assert {g.features["spot_new"] for g in small_family} == {True, False}
    a, b = generated_scenario(3, "small"), generated_scenario(3, "small")
    assert cluster_to_dict(a.cluster) == cluster_to_dict(b.cluster) and a.workload.frame.equals(b.workload.frame)
    assert generated_scenario(3, "small").name == "gensmall-3"
    assert cluster_to_dict(generated_scenario(3).cluster) != cluster_to_dict(a.cluster)


def test_every_small_member_can_run_every_function_it_mixes():
    """A member whose function fits on no node is infeasible (the simulator refuses it): each
    chosen function fits the largest node with room for the queue-proxy sidecar."""
    from testbed.generated import SMALL_HELD_OUT_SEEDS
    from testbed.sim.backend import suite_specs

    specs = suite_specs()
    for seed in [*SEEDS, *range(1_000_000, 1_000_010), *SMALL_HELD_OUT_SEEDS]:
        g = generated_scenario(seed, "small")
        big_cpu = max(n.cpu_milli for n in g.cluster.nodes)
        big_mem = max(n.memory_bytes for n in g.cluster.nodes)
        for f in g.features["functions"]:
            assert specs[f].cpu_request_milli + 25 <= big_cpu and specs[f].memory_request_bytes < big_mem, (seed, f)
