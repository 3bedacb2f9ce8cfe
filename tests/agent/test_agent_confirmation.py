"""The randomized interleaved confirmation (agent/loop/confirmation.py), its power (agent.stats),
the host check (agent/loop/hostcheck.py) and the A/A summary (agent/loop/verify.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from agent.loop.confirmation import FIRST_STAGE, pair_orders, run_pairs
from agent.loop.hostcheck import HOST_NAME, HostDrift, check_host
from agent.loop.outcome import Scored, Void
from agent.loop.verify import futility_verdict
from agent.stats import (
    IMPROVEMENT,
    NO_DIFFERENCE,
    NOT_CONFIRMED,
    mde_pct,
    pairs_for_mde,
    stein_interval,
    stein_mde,
    stein_pairs,
)


def _attempt_from(values: dict[str, list[float]], log: list[tuple[str, int, int]] | None = None, voids=()):
    """An attempt that returns each arm's next value, writes a run directory, and voids the
    attempts numbered in ``voids`` (counting every call)."""
    calls = {"n": 0}
    it = {arm: iter(v) for arm, v in values.items()}

    def attempt(arm: str, run_dir: Path, seed: int):
        calls["n"] += 1
        run_dir.mkdir(parents=True, exist_ok=True)
        if log is not None:
            log.append((arm, seed, calls["n"]))
        if calls["n"] in voids:
            return Void("dispatch lag p99 0.9 s > 0.5 s")
        return Scored(next(it[arm]))

    return attempt


def test_orders_are_balanced_seeded_and_not_fixed():
    for n in (2, 7, 8, 15):
        o = pair_orders(n, 3)
        firsts = [a for a, _ in o]
        assert abs(firsts.count("ref") - firsts.count("cand")) <= 1
        assert o == pair_orders(n, 3)
    # not the old fixed ref-then-cand order, and different seeds give different orders
    assert len({tuple(pair_orders(8, s)) for s in range(10)}) > 1
    assert any(o[0] == "cand" for o in pair_orders(8, 0))


def test_both_runs_of_a_pair_share_a_seed_and_pairs_differ(tmp_path):
    log: list[tuple[str, int, int]] = []
    run_pairs(_attempt_from({"ref": [1.0] * 4, "cand": [1.0] * 4}, log), 4, tmp_path, seed=100, max_reruns=0,
              stop_for_futility=False)
    seeds = [s for _, s, _ in log]
    assert seeds == [100, 100, 101, 101, 102, 102, 103, 103]


def test_a_void_voids_its_pair_and_is_counted_against_its_arm(tmp_path):
    """The second call (pair 0's second run) is void: both runs of pair 0 are redone and kept
    aside as void, so the void rule cannot keep one arm's run and redraw the other's (planted:
    rerunning only the voided run leaves ref-0.void-1 missing and 5 attempts, not 6)."""
    order0 = pair_orders(2, 0)[0]
    log: list[tuple[str, int, int]] = []
    r = run_pairs(_attempt_from({"ref": [1.0, 1.0, 1.0], "cand": [1.0, 1.0, 1.0]}, log, voids={2}), 2, tmp_path,
                  seed=0, max_reruns=2, stop_for_futility=False)
    assert r["runs_attempted"] == 6 and len(r["voided"]) == 1
    assert r["voids_by_arm"][order0[1]] == 1 and r["voids_by_arm"][order0[0]] == 0
    assert (tmp_path / f"{order0[0]}-0.void-1").is_dir() and (tmp_path / f"{order0[1]}-0.void-1").is_dir()
    assert [a for a, _, _ in log[:4]] == [order0[0], order0[1], order0[0], order0[1]]
    assert r["void_rate"] == pytest.approx(1 / 6, abs=1e-3)


def test_a_pair_void_too_often_ends_the_confirmation_naming_the_reason(tmp_path):
    from agent.errors import AgentError

    with pytest.raises(AgentError, match="pair 0 was void 2 times in a row .*dispatch lag"):
        run_pairs(_attempt_from({"ref": [1.0] * 9, "cand": [1.0] * 9}, voids={1, 3}), 3, tmp_path, seed=0, max_reruns=1)


def test_a_first_run_effect_cannot_favour_an_arm_once_orders_are_randomized(tmp_path):
    """The lab measured its first run of a pair slower (a carry-over): with the old fixed
    ref-then-cand order an identical candidate then wins every pair and confirms; randomized and
    balanced, the effect cancels in the mean (planted: with every order ref-first this confirms)."""
    def attempt_factory():
        state = {"first": True}

        def attempt(arm: str, run_dir: Path, seed: int):
            slow = state["first"]
            state["first"] = not state["first"]
            return Scored(1.3 if slow else 1.0 + 0.001 * (seed % 3))
        return attempt

    r = run_pairs(attempt_factory(), 8, tmp_path, seed=5, max_reruns=0, stop_for_futility=False)
    assert r["verdict"] == NO_DIFFERENCE and abs(r["improvement_pct"]) < 5


def test_mde_matches_the_power_of_a_paired_t_test():
    """At the MDE, a simulated paired t-test at 95 % rejects in about 80 % of draws."""
    sd, n = 10.0, 8
    m = mde_pct(sd, n)
    rng = np.random.default_rng(1)
    d = rng.normal(m, sd, size=(20000, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    power = float(np.mean(t > stats.t.ppf(0.975, n - 1)))
    assert 0.75 < power < 0.85
    assert mde_pct(sd, 1) is None and mde_pct(None, 5) is None
    n15 = pairs_for_mde(23.0, 15.0)
    assert mde_pct(23.0, n15) <= 15.0 < mde_pct(23.0, n15 - 1)


def test_the_verdict_states_its_spread_and_minimum_detectable_effect(tmp_path):
    r = run_pairs(_attempt_from({"ref": [10, 10, 10, 10], "cand": [8, 8.5, 7.5, 8.2]}), 4, tmp_path, seed=0,
                  max_reruns=0)
    assert r["verdict"] == IMPROVEMENT and r["pairs"] == 4
    assert r["mde_pct"] == pytest.approx(mde_pct(r["sd_pct"], 4))
    assert r["sd_pct"] == pytest.approx(np.std([20, 15, 25, 18], ddof=1))


def test_futility_never_turns_a_non_improvement_into_an_improvement():
    rng = np.random.default_rng(0)
    for _ in range(300):
        refs = list(rng.uniform(1, 2, 6))
        cands = list(np.asarray(refs) * rng.uniform(0.7, 1.3, 6))
        from agent.stats import paired_improvement, verdict

        full = verdict(paired_improvement(refs, cands))
        shipped = futility_verdict(refs, cands, full)
        assert shipped in (full, NOT_CONFIRMED)
        if full != IMPROVEMENT:
            assert shipped != IMPROVEMENT
    assert futility_verdict([1, 1, 1], [1.1, 0.9, 0.9], NO_DIFFERENCE) == NOT_CONFIRMED


def _two_stage(sd: float, effect: float, draws: int, rng: np.random.Generator, *, target: float = 15.0,
               n0: int = FIRST_STAGE) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` two-stage confirmations of normal paired differences (mean ``effect``, deviation
    ``sd``): whether each called an improvement, and how many pairs each used."""
    called, used = np.zeros(draws, bool), np.zeros(draws, int)
    for i in range(draws):
        first = rng.normal(effect, sd, n0)
        total, _ = stein_pairs(first, target, most=10_000)
        d = np.concatenate([first, rng.normal(effect, sd, total - n0)])
        called[i] = stein_interval(d, n0).low > 0
        used[i] = total
    return called, used


def test_the_two_stage_design_keeps_its_level_and_its_power_whatever_the_noise():
    """Stein's design over normal differences: at no effect it calls an improvement in about
    2.5 % of draws (one side of a 95 % interval), at the target in about 80 %, for a quiet and a
    noisy lab alike (measured: 2.7 % and 2.5 % false, power 1.00 and 0.82), with more pairs where
    the noise is larger. Planted: sizing the second stage with normal quantiles (as if the first
    stage's deviation were the truth) gives too few pairs and a power of 0.63 at sd 20."""
    rng = np.random.default_rng(11)
    for sd in (6.0, 20.0):
        null, used0 = _two_stage(sd, 0.0, 3000, rng)
        hit, used = _two_stage(sd, 15.0, 3000, rng)
        assert null.mean() < 0.04, (sd, null.mean())
        assert hit.mean() > 0.76, (sd, hit.mean())
    assert np.median(used) > np.median(_two_stage(6.0, 15.0, 300, rng)[1])
    assert stein_pairs([1.0, 1.0, 1.0], 15.0, most=50) == (3, 3)  # no spread, no second stage
    assert stein_pairs([0.0, 40.0, -40.0, 20.0, -20.0, 0.0], 15.0, most=30) == (30, 44)  # capped, uncapped said
    assert stein_mde(20.0, 6, 100) < 15.0 < stein_mde(20.0, 6, 20)


def test_a_two_stage_confirmation_runs_as_many_pairs_as_the_first_stage_says(tmp_path):
    """The first stage's spread sizes the rest (the design recorded), each stage's orders are
    balanced, the cap holds, and no pair is ever skipped for futility: the interval's width is
    fixed by the first stage, so a bad start decides nothing (in a fixed design of three pairs the
    same start stops at once)."""
    ref = [10.0] * 40
    cand = [11.0, 9.0, 12.5, 8.5, 11.8, 10.2] + [9.0] * 34  # a losing start
    r = run_pairs(_attempt_from({"ref": ref, "cand": cand}), 30, tmp_path / "a", seed=2, max_reruns=0, mde_target=15.0)
    first = [100 * (10 - c) / 10 for c in cand[:FIRST_STAGE]]
    total, need = stein_pairs(first, 15.0, most=30)
    assert r["design"] == {"kind": "two-stage", "mde_target_pct": 15.0, "first_stage": FIRST_STAGE,
                           "first_stage_sd_pct": pytest.approx(float(np.std(first, ddof=1))), "pairs_needed": need,
                           "cap": 30, "pairs": total}
    assert FIRST_STAGE < total <= 30 and r["pairs"] == total and not r["stopped_early"]
    later = [o[0] for o in r["orders"][FIRST_STAGE:]]
    assert abs(later.count("ref") - later.count("cand")) <= 1
    assert r["mde_pct"] == pytest.approx(stein_mde(float(np.std(first, ddof=1)), FIRST_STAGE, total))
    fixed = run_pairs(_attempt_from({"ref": ref, "cand": cand}), 3, tmp_path / "b", seed=2, max_reruns=0)
    assert fixed["stopped_early"] and fixed["pairs"] == 1 and fixed["design"] == {"kind": "fixed", "pairs": 3}
    small = run_pairs(_attempt_from({"ref": ref, "cand": cand}), 4, tmp_path / "c", seed=2, max_reruns=0,
                      mde_target=15.0, stop_for_futility=False)
    assert small["design"] == {"kind": "fixed", "pairs": 4, "mde_target_pct": 15.0} and small["pairs"] == 4


def test_a_resumed_experiment_redoes_a_confirmation_made_under_another_design():
    from agent.loop.confirmation import finished

    fixed = {"design": {"kind": "fixed", "pairs": 20}, "samples": [1.0] * 20, "pairs_planned": 20}
    staged = {"design": {"kind": "two-stage", "mde_target_pct": 15.0, "cap": 20, "pairs": 9}, "samples": [1.0] * 9,
              "pairs_planned": 9}
    assert finished(fixed, 20, 0.0) and not finished(staged, 20, 0.0)
    assert finished(staged, 20, 15.0) and not finished(fixed, 20, 15.0) and not finished(staged, 30, 15.0)
    assert not finished({**staged, "samples": [1.0] * 7}, 20, 15.0)  # interrupted in its second stage
    old = {"samples": [1.0, 2.0], "pairs_planned": 20, "stopped_early": True}  # written before designs were recorded
    assert finished(old, 20, 0.0)
    small = {"design": {"kind": "fixed", "pairs": 4, "mde_target_pct": 15.0}, "samples": [1.0] * 4, "pairs_planned": 4}
    assert finished(small, 4, 15.0)  # a target asked for, but no room for a second stage


def _summary(cpu_ms: float, unpack_ms: float) -> dict:
    return {"host": {"probe": {"cpu_ms": cpu_ms, "unpack_ms": unpack_ms, "at": 0.0}}}


def test_the_first_probe_is_kept_and_a_drift_beyond_the_threshold_pauses_in_one_line(tmp_path):
    assert check_host(tmp_path, tmp_path / "r0", _summary(100, 40), 1.25) == {}
    assert json.loads((tmp_path / HOST_NAME).read_text())["probe"]["cpu_ms"] == 100
    assert check_host(tmp_path, tmp_path / "r1", _summary(112, 44), 1.25) == {"cpu_ms": 1.12, "unpack_ms": 1.1}
    with pytest.raises(HostDrift) as err:
        check_host(tmp_path, tmp_path / "r2", _summary(210, 41), 1.25)
    assert "\n" not in str(err.value) and "cpu probe 2.10x" in str(err.value) and "--resume" in str(err.value)
    with pytest.raises(HostDrift):  # faster counts too: the first steps were measured on another machine
        check_host(tmp_path, tmp_path / "r3", _summary(100, 20), 1.25)
    assert check_host(tmp_path, tmp_path / "r4", _summary(300, 40), 0) is not None  # 0: no check
    assert check_host(tmp_path, tmp_path / "r5", {"host": {}}, 1.25) is None  # a backend without probes


def test_the_experiments_confirmation_runs_randomized_pairs_and_states_its_power(tmp_path):
    """A live experiment on a noisy backend: its confirmation is ``confirm`` pairs in a balanced
    random order (not the old ref-then-cand), each verdict with its spread and MDE, and
    ``scoretune confirm``'s re-confirmation runs the same protocol on the saved profile."""
    from agent_fixtures import AnalyticBackend, AnalyticObjective, tiny_workload

    from agent.actions import ActionCodec
    from agent.loop.config import ExperimentConfig
    from agent.loop.experiment import Experiment
    from agent.tuners.factory import make_tuner

    cfg = ExperimentConfig(method="random", backend="local", cluster="analytic", workload="tiny", steps=4, seed=3,
                           confirm=6)
    backend = AnalyticBackend(AnalyticObjective(seed=7), noise=0.05)
    summary = Experiment(cfg, backend, tiny_workload(), make_tuner("random", ActionCodec(), seed=3), tmp_path).run()
    conf = summary["confirmation"]
    assert conf is not None, "the random tuner's best beat the reference by chance: pick another seed"
    assert conf["pairs_planned"] == 6 and conf["mde_pct"] is not None and conf["sd_pct"] is not None
    firsts = [o[0] for o in conf["orders"]]
    if len(firsts) == 6:
        assert firsts.count("ref") == 3
    runs = sorted(p.name for p in (tmp_path / "runs" / "confirm").iterdir())
    assert runs[: 2 * conf["pairs"]] == sorted([f"{a}-{r}" for r in range(conf["pairs"]) for a in ("cand", "ref")])
    assert conf["seeds"] == [1003 + r for r in range(conf["pairs"])]


def test_the_aa_report_pools_calibrations_per_cluster(tmp_path):
    """Two calibrations of one cluster and one of another, written as `calibrate --aa` writes
    them; the pooled report counts every confirmation once and pools the pairs' spread."""
    from typer.testing import CliRunner

    from agent.cli import app
    from agent.loop.config import ExperimentConfig
    from agent.loop.verify import futility_verdict, pool_aa, summarize_aa

    rng = np.random.default_rng(4)
    diffs = []
    for k, cluster in enumerate(["lab-hidden-cpu", "lab-hidden-cpu", "lab-hidden-links"]):
        out = tmp_path / f"cal-{k}"
        results = []
        for i in range(2):
            vals = {"ref": list(rng.uniform(2, 3, 3))}
            vals["cand"] = [v * float(rng.uniform(0.9, 1.1)) for v in vals["ref"]]
            r = run_pairs(_attempt_from(vals), 3, out / f"aa-{i:02d}", seed=i, max_reruns=0, stop_for_futility=False)
            r["shipped_verdict"] = futility_verdict(r["reference_samples"], r["samples"], r["verdict"])
            (out / f"aa-{i:02d}" / "confirmation.json").write_text(json.dumps(r))
            results.append(r)
            if cluster == "lab-hidden-cpu":
                diffs += [100 * (a - b) / a for a, b in zip(r["reference_samples"], r["samples"], strict=True)]
        summarize_aa(ExperimentConfig(method="default", backend="local", cluster=cluster, workload="lab"), results, out)
    pooled = pool_aa(tmp_path)
    cpu = pooled["clusters"]["lab-hidden-cpu"]
    assert pooled["confirmations"] == 6 and cpu["confirmations"] == 4 and pooled["clusters"]["lab-hidden-links"]["confirmations"] == 2
    assert cpu["paired_sd_pct"] == pytest.approx(np.std(diffs, ddof=1))
    assert cpu["mde_pct"] == pytest.approx(mde_pct(cpu["paired_sd_pct"], 3))
    assert len(cpu["first_run_over_partner"]) == 4
    result = CliRunner().invoke(app, ["calibrate", "--aa", "--report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "| lab-hidden-cpu | 4 | 3 |" in result.output and (tmp_path / "aa-pooled.json").exists()
    empty = CliRunner().invoke(app, ["calibrate", "--aa", "--report", str(tmp_path / "cal-0" / "aa-00")])
    assert empty.exit_code == 1 and "no A/A calibration under it" in empty.output


@pytest.mark.lab
def test_calibrate_aa_on_the_process_lab_measures_the_protocol_and_leaves_nothing(tmp_path, monkeypatch):
    """One A/A confirmation of two pairs on the process lab, end to end: every run through the
    experiment's attempt (the host probe, the scaled lab, the seed's arrivals), aa.json written,
    no lab process left. The lab's state directory is put under ``tmp_path`` so that only this
    lab's agents are counted (another test's lab may be up beside it under xdist)."""
    import tempfile

    import psutil
    from typer.testing import CliRunner

    from agent.cli import app

    labs = tmp_path / "labs"
    labs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(labs))
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(mkdtemp(*a, **k)) or made[-1])

    def agents() -> set[int]:
        return {p.pid for p in psutil.process_iter(["cmdline"])
                if "testbed.local.node_agent" in (cmd := p.info["cmdline"] or []) and any(str(labs) in a for a in cmd)}

    out = tmp_path / "aa"
    result = CliRunner().invoke(app, ["calibrate", "--aa", "--cluster", "lab-small", "--duration", "4",
                                      "--confirmations", "1", "--pairs", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    aa = json.loads((out / "aa.json").read_text())
    assert aa["confirmations"] == 1 and aa["pairs"] == 2 and aa["runtime"] == "process"
    conf = json.loads((out / "aa-00" / "confirmation.json").read_text())
    assert conf["seeds"] == [1001, 1002]  # calibrate's --seed 1, plus 1000 per confirmation
    s = json.loads((out / "aa-00" / "ref-0" / "summary.json").read_text())
    assert s["arrivals"]["seed"] == 1001 and s["host"]["probe"]["cpu_ms"] > 0 and "lab_scale" in s
    assert json.loads((out / "host.json").read_text())["probe"]["cpu_ms"] > 0
    assert any(Path(d).name.startswith("scoretune-local-") for d in made)  # its lab was under tmp_path
    assert not agents()  # the lab it started is down
