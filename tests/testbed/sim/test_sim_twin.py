"""The twin (testbed/sim/twin.py) and the benchmark's mismatch (testbed/sim/mismatch.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from sim_fixtures import make_cluster, make_spec

from loadgen.synth import poisson
from testbed.cluster import cluster_to_dict
from testbed.errors import ConfigError
from testbed.scheduler.config import default_profile
from testbed.sim import evaluate
from testbed.sim.backend import SimBackend
from testbed.sim.engine import SimConfig
from testbed.sim.mismatch import LEVELS, level, perturb
from testbed.sim.twin import Observation, Twin, cell_check, cluster_view, describe


def _cluster(fast: float = 1.0, slow: float = 0.5, pull: str = "50Mi"):
    return make_cluster([
        {"name": "fast", "count": 2, "cpu": "2", "memory": "4Gi", "speed": fast, "image_pull_bandwidth": pull},
        {"name": "slow", "count": 2, "cpu": "2", "memory": "4Gi", "speed": slow, "image_pull_bandwidth": pull,
         "labels": {"hw": "old"}},
    ])


@pytest.fixture(scope="module")
def specs():
    return {"cpu": make_spec("cpu", cc=1, cpu_mean=0.08, cv=0.3, dist="lognormal")}


@pytest.fixture(scope="module")
def workload():
    return poisson(rate_per_s=30.0, duration_s=60.0, functions={"cpu": 1.0}, seed=1)


def test_the_view_hides_speed_and_pull_bandwidth_and_nothing_else() -> None:
    a, b = _cluster(1.0, 0.5, "50Mi"), _cluster(1.7, 0.3, "5Mi")
    assert cluster_view(a) == cluster_view(b)
    va = cluster_to_dict(cluster_view(a))
    assert {g["speed"] for g in va["groups"]} == {1.0}
    other = make_cluster([{"name": "fast", "count": 2, "cpu": "4", "memory": "4Gi"},
                          {"name": "slow", "count": 2, "cpu": "2", "memory": "4Gi", "labels": {"hw": "old"}}])
    assert cluster_view(other) != cluster_view(a)  # capacities are what the API shows


def test_the_fit_recovers_node_speeds_from_one_run(specs, workload) -> None:
    truth = _cluster(1.0, 0.5)
    summary = evaluate(truth, workload, default_profile(), seed=0, functions=specs, where=True)
    twin = Twin(cluster_view(truth), workload, specs, metric=lambda s: float(s["latency_mean_s"]))
    neutral = twin.predict(default_profile())
    fit = twin.fit([Observation(default_profile(), float(summary["latency_mean_s"]), summary["where"])], rounds=8)
    speed = fit.params.speed
    ratio = (speed["slow-0"] + speed["slow-1"]) / (speed["fast-0"] + speed["fast-1"])
    assert ratio == pytest.approx(0.5, rel=0.15)
    assert fit.metric_error is not None and fit.metric_error < 0.15  # its own seed: other work draws and tie-breaks
    assert abs(neutral / summary["latency_mean_s"] - 1) > 0.2  # the neutral twin was far off
    # one function, one size of work: a slower node and a fixed delay there look alike
    assert fit.identified is not None and set(fit.identified.speed.values()) <= {
        "confounded with network delay (one size of work seen there)", "not observed (no function with 20 warm requests there)"}
    lines = describe(fit, twin.view)
    assert not any(" runs at " in line for line in lines)
    assert sum("speed not identified, confounded with network delay" in line for line in lines) >= 3


TWO = {"small": make_spec("small", cc=1, cpu_mean=0.04, cv=0.3, dist="lognormal"),
       "big": make_spec("big", cc=1, cpu_mean=0.25, cv=0.3, dist="lognormal")}


def _wide(fast: float = 1.0, slow: float = 0.5):
    return make_cluster([
        {"name": "fast", "count": 2, "cpu": "4", "memory": "8Gi", "speed": fast},
        {"name": "slow", "count": 2, "cpu": "4", "memory": "8Gi", "speed": slow, "labels": {"hw": "old"}},
    ])


def _two_runs(truth, config=None):
    """The reference run of a small and a big function on ``truth`` (both busy enough for pods on
    every node) and the twin fitted to it."""
    wl = poisson(rate_per_s=90.0, duration_s=90.0, functions={"small": 0.85, "big": 0.15}, seed=2)
    summary = evaluate(truth, wl, default_profile(), seed=0, functions=TWO, where=True, config=config)
    twin = Twin(cluster_view(truth), wl, TWO, metric=lambda s: float(s["latency_mean_s"]))
    return twin, twin.fit([Observation(default_profile(), float(summary["latency_mean_s"]), summary["where"])], rounds=8)


def test_a_remembered_prediction_is_forgotten_when_the_parameters_change(specs, workload) -> None:
    """predict() remembers its metric per profile (a search asks the same profiles at every step);
    after a fit, or any new parameters, it must answer for the new ones: the memo of stale
    parameters would keep the twin's old belief while its fit reports the new one."""
    truth = _cluster(1.0, 0.5)
    summary = evaluate(truth, workload, default_profile(), seed=0, functions=specs, where=True)
    twin = Twin(cluster_view(truth), workload, specs, metric=lambda s: float(s["latency_mean_s"]))
    calls: list[object] = []
    real = twin.summary
    twin.summary = lambda profile, **kw: calls.append(profile) or real(profile, **kw)  # type: ignore[method-assign]
    neutral = twin.predict(default_profile())
    assert twin.predict(default_profile()) == neutral and len(calls) == 1  # a repeat is a lookup
    fit = twin.fit([Observation(default_profile(), float(summary["latency_mean_s"]), summary["where"])], rounds=4)
    fresh = Twin(cluster_view(truth), workload, specs, metric=lambda s: float(s["latency_mean_s"]), params=fit.params)
    assert twin.predict(default_profile()) == fresh.predict(default_profile()) != neutral
    twin.params = fresh.params.neutral(twin.view)  # any assignment, not only fit's
    assert twin.predict(default_profile()) == neutral


def test_speeds_are_facts_only_where_the_runs_identify_them() -> None:
    """A node that served a small and a big function has its speed told apart from a fixed delay and
    printed as a fact; a node that served one size of work gets the twin's working value, named as
    not identified, never as a speed."""
    truth = _wide(1.0, 0.5)
    twin, fit = _two_runs(truth)
    ident = fit.identified
    assert ident is not None
    both = [n for n, why in ident.speed.items() if why == "identified"]
    one = [n for n, why in ident.speed.items() if why.startswith("confounded with network delay")]
    assert both and one  # the lab workload's reality: not every function reaches every node
    lines = describe(fit, twin.view)
    for n in both:
        assert any(line.startswith(f"{n} runs at ") for line in lines)
    for n in one:
        assert any(line.startswith(f"{n} speed not identified, confounded with network delay") for line in lines)
    assert set(ident.confounded()) >= {f"{n}: speed confounded with network delay (one size of work seen there)"
                                       for n in one}


def test_the_cell_check_names_what_node_speed_times_work_cannot_explain() -> None:
    """On cells that follow log latency = work_f - speed_n exactly the check finds nothing; a 40 ms
    delay on one node (a 2x slower small function, a 1.2x slower big one there) is named by its cell;
    a cell whose traffic differs between twin and run is left out."""
    work = {"a": 0.3, "b": -0.2, "c": 0.1}
    speed = {"n1": 0.0, "n2": 0.4, "n3": -0.3}
    pairs = [(f, n, work[f] - speed[n], 100.0, 1.0) for f in work for n in speed]
    clean = cell_check(pairs)
    assert clean is not None and clean.cells == 9 and clean.error < 1e-6 and clean.worst is None
    delayed = [(f, n, r + (math.log(2.0) if (f, n) == ("b", "n2") else 0.0), w, t) for f, n, r, w, t in pairs]
    check = cell_check(delayed)
    assert check is not None and check.error > 0.05
    fn, node, factor = check.worst
    assert (fn, node) == ("b", "n2") and factor > 1.5
    skipped = [(f, n, r, w, 3.0 if (f, n) == ("b", "n2") else t) for f, n, r, w, t in delayed]
    assert cell_check(skipped).worst is None  # the odd cell saw other traffic: not read
    assert cell_check([("a", "n1", 0.5, 100.0, 1.0), ("a", "n2", 0.1, 100.0, 1.0)]) is None  # one function


def test_mismatch_none_is_the_scenario_and_levels_are_checked(specs, workload) -> None:
    cluster = _cluster()
    t = perturb(cluster, specs, level("none"), seed=3)
    assert t.cluster == cluster and t.config == SimConfig()
    with pytest.raises(ConfigError, match="unknown mismatch level 'bogus'"):
        level("bogus")
    a = perturb(cluster, specs, LEVELS["default"], seed=3)
    b = perturb(cluster, specs, LEVELS["default"], seed=3)
    assert a == b  # fixed by the seed before any method runs
    assert a.cluster != cluster and a.config.interference > 0 and len(a.config.extra_latency_s) == 4


def test_structural_mechanisms_slow_the_truth(specs, workload) -> None:
    cluster = _cluster()
    base = evaluate(cluster, workload, default_profile(), seed=0, functions=specs)["latency_mean_s"]
    for change in ({"interference": 0.5}, {"load_slowdown": 1.0}):
        cfg = dataclasses.replace(SimConfig(), **change)
        slowed = evaluate(cluster, workload, default_profile(), seed=0, functions=specs, config=cfg)["latency_mean_s"]
        assert slowed > base * 1.02, change
    cfg = dataclasses.replace(SimConfig(), extra_latency_s=tuple((n.name, 0.05) for n in cluster.nodes))
    delayed = evaluate(cluster, workload, default_profile(), seed=0, functions=specs, config=cfg)
    assert delayed["latency_mean_s"] == pytest.approx(base + 0.05)  # the network delay, added and nothing else


def _on_node(summary, node):
    return summary["where"]["nodes"][node]


def test_the_structural_mechanisms_act_where_they_are_drawn(specs, workload) -> None:
    """Each mechanism of the structural levels changes the node it names and only that node: a CPU
    cap slows the capped function's warm requests there; a start stretch lengthens cold starts
    there; a neighbour slows a node at the times its duty is high, so its requests' latency varies
    with time (a speed factor could not do that)."""
    cluster = _cluster(1.0, 1.0)
    run = lambda cfg: evaluate(cluster, workload, default_profile(), seed=0, functions=specs, config=cfg,  # noqa: E731
                               where=True)
    base = run(SimConfig())
    busy = max(base["where"]["nodes"], key=lambda n: base["where"]["nodes"][n]["requests"])
    capped = run(dataclasses.replace(SimConfig(), cpu_cap=((busy, "cpu", 0.25),)))
    assert _on_node(capped, busy)["warm_mean_s"] > 2.0 * _on_node(base, busy)["warm_mean_s"]
    for other in base["where"]["nodes"]:
        if other != busy and _on_node(base, other)["warm_ok"] and _on_node(capped, other)["warm_ok"]:
            assert _on_node(capped, other)["warm_mean_s"] < 1.5 * _on_node(base, other)["warm_mean_s"]
    stretched = run(dataclasses.replace(SimConfig(), start_stretch=tuple((n.name, 4.0) for n in cluster.nodes)))
    assert stretched["latency_max_s"] > base["latency_max_s"] + 2.0 * specs["cpu"].start_s
    # a neighbour that takes 90 % of every node during the second half of each 60 s period
    noisy = dataclasses.replace(SimConfig(), neighbour=tuple((n.name, 0.9, 60.0, 0.0) for n in cluster.nodes))
    from testbed.sim.engine import Simulation
    out = Simulation(cluster, specs, workload, default_profile(), seed=0, config=noisy).run()
    ok = out.status == 1
    lat = (out.finish_s - out.arrival_s)[ok]
    phase = (out.arrival_s[ok] % 60.0)
    high, low = lat[(phase > 5) & (phase < 25)], lat[(phase > 35) & (phase < 55)]
    assert high.mean() > 2.0 * low.mean()  # duty high in the first half (sin > 0), low in the second


def test_the_structural_levels_draw_every_mechanism_and_keep_the_default_draws(specs, workload) -> None:
    cluster = _cluster()
    default = perturb(cluster, specs, LEVELS["default"], seed=11)
    truth = perturb(cluster, specs, level("structural-severe"), seed=11)
    assert truth.cluster == default.cluster  # the parametric draws are those of the default level
    assert truth.config.cpu_cap and truth.config.neighbour and len(truth.config.start_stretch) == 4
    assert all(f >= 1.0 for _, f in truth.config.start_stretch)
    assert truth.functions["cpu"].work_cpu_s.cv == pytest.approx(2.25 * default.functions["cpu"].work_cpu_s.cv)
    assert truth.config.autoscaler.stable_window_s == pytest.approx(60.0 / 2.25)
    lat = dict(truth.config.extra_latency_s)
    assert any(lat[n] != dict(default.config.extra_latency_s)[n] for n in lat)
    assert perturb(cluster, specs, level("structural-severe"), seed=11) == truth
    slowed = evaluate(truth.cluster, workload, default_profile(), seed=0, functions=truth.functions,
                      config=truth.config)["latency_mean_s"]
    plain = evaluate(default.cluster, workload, default_profile(), seed=0, functions=default.functions,
                     config=default.config)["latency_mean_s"]
    assert slowed != plain


def test_a_written_run_and_the_fast_path_agree_on_where(tmp_path, specs, workload) -> None:
    be = SimBackend(_cluster(), specs)
    run = be.run(workload, tmp_path / "run")
    fast = evaluate(_cluster(), workload, default_profile(), seed=0, functions=specs, where=True)
    assert run.summary["where"] == fast["where"]
    assert sum(c["requests"] for c in run.summary["where"]["nodes"].values()) == run.summary["count"]
