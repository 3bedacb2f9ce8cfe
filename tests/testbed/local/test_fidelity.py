"""Calibration maths on crafted run tables, and the fidelity report's rank correlations."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from functions.spec import discover_specs
from loadgen.results import RunResult, empty_placements, summarize
from testbed.cluster import load_cluster
from testbed.errors import InputError, TestbedError
from testbed.local.studies.fidelity import (
    _spearman,
    apply_calibration,
    fidelity_profiles,
    fit_timing,
    load_calibration,
    write_calibration,
)


def _result(rows, placements=None) -> RunResult:
    req = pd.DataFrame(rows)
    for col, default in (("request_id", 0), ("scheduled_s", 0.0), ("sent_s", 0.0), ("finished_s", 0.0), ("http_status", 200)):
        if col not in req:
            req[col] = default
    pl = pd.DataFrame(placements) if placements else empty_placements()
    return RunResult(requests=req, placements=pl, summary=summarize(req))


def test_fit_recovers_work_from_speed_and_limit():
    cluster = load_cluster("lab-small")  # fast-* speed 1.0, slow-* speed 0.5
    specs = discover_specs()
    aes_limit = specs["aes"].cpu_limit_milli / 1000.0  # 0.5 core: served at speed * 0.5
    rows = []
    for _ in range(10):
        # float-ops: 0.04 s of work -> 0.04 s on fast, 0.08 s on slow
        rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 0.04, "status": "ok", "cold_start": False})
        rows.append({"function": "float-ops", "node": "slow-1", "latency_s": 0.08, "status": "ok", "cold_start": False})
        rows.append({"function": "aes", "node": "fast-1", "latency_s": 0.1 / aes_limit, "status": "ok", "cold_start": False})
        # dynamic-html (limit 0.5 core): 0.02 s of work plus a fixed 0.01 s path that no speed changes
        rows.append({"function": "dynamic-html", "node": "fast-0", "latency_s": 0.01 + 0.02 / 0.5, "status": "ok", "cold_start": False})
        rows.append({"function": "dynamic-html", "node": "slow-0", "latency_s": 0.01 + 0.02 / 0.25, "status": "ok", "cold_start": False})
    # cold and failed requests say nothing about the work
    rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 9.0, "status": "ok", "cold_start": True})
    rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 30.0, "status": "timeout", "cold_start": False})
    placements = [
        {"pod": f"float-ops-{i}", "function": "float-ops", "node": "fast-0", "created_s": 0.0, "scheduled_s": 1.0,
         "ready_s": 1.0 + pull + 0.7, "deleted_s": None, "image_pull_s": pull, "start_s": 0.6, "init_s": 0.1}
        for i, pull in enumerate([0.0, 2.7, 0.0])
    ]
    fitted = fit_timing([_result(rows, placements)], cluster, specs, ready_delay_s=0.2)
    assert fitted["float-ops"]["work_cpu_s_mean"] == pytest.approx(0.04)
    assert fitted["float-ops"]["work_io_s"] == pytest.approx(0.0, abs=1e-9)
    assert fitted["aes"]["work_cpu_s_mean"] == pytest.approx(0.1) and fitted["aes"]["work_io_s"] == 0.0
    assert fitted["dynamic-html"]["work_cpu_s_mean"] == pytest.approx(0.02)
    assert fitted["dynamic-html"]["work_io_s"] == pytest.approx(0.01)
    assert fitted["float-ops"]["init_s"] == pytest.approx(0.1)
    assert fitted["float-ops"]["start_s"] == pytest.approx(0.7 - 0.1 - 0.2)
    assert fitted["float-ops"]["warm_samples"] == 20 and fitted["float-ops"]["cold_samples"] == 3
    assert "start_s" not in fitted["aes"]


def test_calibration_file_round_trip(tmp_path):
    fitted = {"float-ops": {"work_cpu_s_mean": 0.05, "work_io_s": 0.01, "start_s": 0.3, "init_s": 0.02, "warm_samples": 9, "cold_samples": 2},
              "no-such-fn": {"work_cpu_s_mean": 1.0}}
    path = write_calibration(tmp_path / "cal.yaml", fitted, info={"cluster": "lab-small"})
    specs = apply_calibration(None, load_calibration(path))
    f = specs["float-ops"]
    orig = discover_specs()["float-ops"]
    assert (f.work_cpu_s.mean, f.work_io_s, f.start_s, f.init_s) == (0.05, 0.01, 0.3, 0.02)
    assert f.work_cpu_s.distribution == orig.work_cpu_s.distribution and f.work_cpu_s.cv == orig.work_cpu_s.cv
    assert specs["aes"] == discover_specs()["aes"]
    (tmp_path / "bad.yaml").write_text("just: text\n")
    with pytest.raises(InputError, match="functions"):
        load_calibration(tmp_path / "bad.yaml")


def test_profiles_are_seeded_and_start_with_the_default():
    from testbed.scheduler.config import default_profile

    a, b = fidelity_profiles(6, seed=3), fidelity_profiles(6, seed=3)
    assert a == b and a[0] == default_profile() and len(set(map(repr, a))) == 6
    with pytest.raises(InputError):
        fidelity_profiles(1)


def test_spearman_of_orderings():
    assert _spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert _spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert _spearman([1, 2, math.nan, 4, 5], [1, 2, 3, 4, 5]) == pytest.approx(1.0)  # a failed run is left out
    assert _spearman([1, 1, 1], [1, 2, 3]) is None


class _DriftingLab:
    """A lab whose profiles have fixed true latencies and whose host runs ``speed[round]`` times
    slower in each round (the round is told by the run directory), recording what it ran."""

    def __init__(self, truth: list[float], slow: dict[int, float], name: str = "lab-small"):
        from types import SimpleNamespace

        self.truth, self.slow, self.cluster = truth, slow, SimpleNamespace(name=name)
        self.ran: list[tuple[int, str, int]] = []
        self._profile = None

    def apply(self, profile) -> None:
        self._profile = profile

    def reset(self) -> None:
        pass

    def run(self, workload, run_dir, *, seed):
        i = int(run_dir.name.split("-")[1])
        r = int(run_dir.parent.name.split("-")[1]) if run_dir.parent.name.startswith("round-") else 0
        self.ran.append((i, str(run_dir), seed))
        v = self.truth[i] * self.slow.get(r, 1.0)
        return RunResult(requests=pd.DataFrame(), summary={"latency_mean_s": v, "latency_p95_s": 2 * v,
                                                           "host": {"probe": {"cpu_ms": 100.0 * self.slow.get(r, 1.0),
                                                                              "unpack_ms": 40.0}}})


def test_rounds_rank_profiles_by_their_ratio_to_the_same_rounds_default(tmp_path):
    """Three rounds, the host 2x slower in round 1: each round runs every profile once in its own
    seeded order on its own arrivals (seed + round), and a profile's lab figure is its ratio to
    that round's default run, so the drift cancels exactly while the raw median does not.
    Planted: dividing every round by round 0's anchor keeps the slow round's 2x in the ratios
    (profile 0 at 1.26x itself, not 1.0x)."""
    from testbed.local.studies.fidelity import fidelity, round_order

    truth = [2.0, 1.0, 3.0, 4.0, 2.5]
    lab = _DriftingLab(truth, {1: 2.0})
    profiles = fidelity_profiles(5, seed=1)
    rep = fidelity(lab, {}, _Sized(), profiles, tmp_path, seed=7, rounds=3)
    assert [r["order"] for r in rep["rounds"]] == [round_order(5, 7, r) for r in range(3)]
    assert len({tuple(r["order"]) for r in rep["rounds"]}) > 1
    def round_of(d: str) -> int:
        return int(d.split("round-")[1].split("/")[0]) if "round-" in d else 0

    assert [[i for i, d, _ in lab.ran if round_of(d) == r] for r in range(3)] == [round_order(5, 7, r) for r in range(3)]
    assert {s for _, d, s in lab.ran if "round-2/" in d} == {9}
    assert any(d.endswith("local/profile-03") for _, d, _ in lab.ran)  # round 0 where `twin fidelity` reads it
    for row, t in zip(rep["rows"], truth, strict=True):
        assert row["local_mean_ratio"] == pytest.approx(t / truth[0])
        assert row["local_p95_ratio"] == pytest.approx(t / truth[0])
    assert rep["rows"][2]["local_mean_s"] == pytest.approx(3.0)  # the raw median keeps the slow round's pull
    assert rep["rho_between_rounds"] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert rep["host"] == {"cpu_ms": [100.0, 200.0], "unpack_ms": [40.0, 40.0]}


class _Sized:
    name = "lab"

    def __len__(self) -> int:
        return 0


def test_retest_compares_two_sessions_and_refuses_two_different_studies(tmp_path):
    from testbed.local.studies.fidelity import fidelity, retest

    profiles = fidelity_profiles(5, seed=1)
    fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {}), {}, _Sized(), profiles, tmp_path / "a", rounds=2)
    fidelity(_DriftingLab([2.0, 1.2, 2.9, 4.4, 2.4], {0: 1.7, 1: 1.9}), {}, _Sized(), profiles, tmp_path / "b", rounds=2)
    r = retest(tmp_path / "a", tmp_path / "b")
    assert r["rho"]["mean"] == pytest.approx(1.0) and r["profiles"] == 5
    assert r["expected"] == pytest.approx(1.0)  # noise-free labs: nothing keeps the retest from 1
    assert r["second"]["host"]["cpu_ms"] == [170.0, 190.0] and r["first"]["rounds"] == 2
    fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {}), {}, _Sized(), fidelity_profiles(5, seed=2), tmp_path / "c")
    with pytest.raises(InputError, match="different profiles"):
        retest(tmp_path / "a", tmp_path / "c")
    with pytest.raises(InputError, match="missing"):
        retest(tmp_path / "a", tmp_path / "nothing")


def _study(rng, true: np.ndarray, noise: float, drift: list[float]) -> list[dict]:
    return [{"local_rounds": [{"round": r, "mean_s": math.exp(1.0 + t + d + rng.normal(0.0, noise))}
                              for r, d in enumerate(drift)]} for t in true]


def test_separation_measures_the_profiles_spread_against_the_run_noise_whatever_a_round_did():
    """400 profiles of true log spread 0.3 measured in 3 rounds with run noise 0.1, one round on a
    host 2x slower: the spread, the noise, their ratio and the reliability come out as built.
    Planted: leaving out the round effects (a one-way model) counts the slow round as run noise
    (run_sd 0.48, not 0.10) and the test fails."""
    from testbed.local.studies.fidelity import separation

    rng = np.random.default_rng(3)
    true = rng.normal(0.0, 0.3, 400)
    sep = separation(_study(rng, true, 0.1, [0.0, math.log(2.0), -0.2]))
    assert sep["run_sd"] == pytest.approx(0.1, rel=0.08)
    assert sep["profile_sd"] == pytest.approx(float(true.std(ddof=1)), rel=0.08)
    assert sep["ratio"] == pytest.approx(3.0, rel=0.15)
    assert sep["reliability"] == pytest.approx(0.09 / (0.09 + 0.01 / 3), abs=0.02)
    assert sep["rounds_for_0_9"] == 1 and sep["profiles"] == 400 and sep["rounds"] == 3


def test_separation_predicts_how_well_a_second_study_agrees():
    """Profiles as far apart as the noise (ratio 1), 2 rounds: the reliability (0.67) is the rank
    agreement two such studies actually reach, and the rounds asked for reach 0.9 when run.
    Planted: a reliability of 1 whatever the noise fails here and above."""
    from testbed.local.studies.fidelity import separation

    rng = np.random.default_rng(5)
    true = rng.normal(0.0, 0.3, 2000)
    a, b = _study(rng, true, 0.3, [0.0, 0.4]), _study(rng, true, 0.3, [0.1, -0.3])
    sep = separation(a)
    assert sep["reliability"] == pytest.approx(2 / 3, abs=0.04)

    def means(study):
        return [float(np.mean([math.log(x["mean_s"]) for x in row["local_rounds"]])) for row in study]

    assert _spearman(means(a), means(b)) == pytest.approx(sep["reliability"], abs=0.05)
    k = sep["rounds_for_0_9"]
    assert 7 <= k <= 11
    c, d = _study(rng, true, 0.3, [0.0] * k), _study(rng, true, 0.3, [0.0] * k)
    assert _spearman(means(c), means(d)) >= 0.88


def test_separation_needs_two_rounds_and_leaves_failed_profiles_out():
    from testbed.local.studies.fidelity import separation

    one = [{"local_rounds": [{"round": 0, "mean_s": v}]} for v in (1.0, 2.0, 3.0)]
    assert separation(one) is None
    rows = _study(np.random.default_rng(1), np.array([0.0, 0.5, 1.0, 1.5]), 0.05, [0.0, 0.1])
    rows[1]["local_rounds"][1]["mean_s"] = math.nan
    assert separation(rows)["profiles"] == 3
    rows[2]["local_rounds"][0]["mean_s"] = math.nan
    assert separation(rows) is None


def test_the_retest_command_prints_each_sides_separation_and_what_an_unmoved_lab_gives(tmp_path):
    """`scoretune fidelity --retest A B` as a user types it: each study's separation line and the
    rho a lab that did not move would reach, beside the measured one."""
    from typer.testing import CliRunner

    from agent.cli import app
    from testbed.local.studies.fidelity import fidelity

    profiles = fidelity_profiles(5, seed=1)
    fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {1: 1.3}), {}, _Sized(), profiles, tmp_path / "a", rounds=2)
    fidelity(_DriftingLab([2.0, 1.2, 2.9, 4.4, 2.4], {}), {}, _Sized(), profiles, tmp_path / "b", rounds=2)
    got = CliRunner().invoke(app, ["fidelity", "--retest", str(tmp_path / "a"), str(tmp_path / "b")], terminal_width=300)
    assert got.exit_code == 0, got.output
    out = " ".join(got.output.split())
    assert out.count("separation: profiles spread") == 2
    assert "test-retest Spearman rho = 1.00 (mean" in out
    assert "Pearson of the log figures 0.99, where a lab that did not move would give about 1.00" in out


def test_show_prints_a_finished_study_with_its_separation_even_one_written_before_it(tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app
    from testbed.local.studies.fidelity import fidelity

    fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {1: 1.3}), {}, _Sized(), fidelity_profiles(5, seed=1),
             tmp_path / "a", rounds=2)
    path = tmp_path / "a" / "fidelity.json"
    old = json.loads(path.read_text())
    del old["separation"]  # as the studies of 2026-12-07 were written
    path.write_text(json.dumps(old))
    got = CliRunner().invoke(app, ["fidelity", "--show", str(tmp_path / "a")], terminal_width=300)
    assert got.exit_code == 0, got.output
    out = " ".join(got.output.split())
    assert "separation: profiles spread" in out and "read:" in out and "written:" not in out
    bad = CliRunner().invoke(app, ["fidelity", "--show", str(tmp_path / "none")])
    assert bad.exit_code != 0 and "missing" in bad.output and "Traceback" not in bad.output


class _FailingLab(_DriftingLab):
    """The drifting lab whose runs of the profiles in ``broken`` fail (as runc failing every pod)."""

    def __init__(self, truth, broken: set[int]):
        super().__init__(truth, {})
        self.broken = broken

    def run(self, workload, run_dir, *, seed):
        res = super().run(workload, run_dir, seed=seed)
        if int(run_dir.name.split("-")[1]) in self.broken:
            return RunResult(requests=pd.DataFrame(), summary={"failed": True, "failure": "runc could not start"})
        return res


def test_a_study_whose_runs_failed_says_so_and_one_that_measured_nothing_fails(tmp_path):
    """Planted: without the check a study whose every run failed printed a table of NaN and
    exited 0 (lab-hidden-neighbour, 29 of 32 runs failed on a pod quota above its node's)."""
    from testbed.local.studies.fidelity import failures, fidelity

    profiles = fidelity_profiles(5, seed=1)
    rep = fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {}), {}, _Sized(), profiles, tmp_path / "ok", rounds=2)
    assert failures(rep, tmp_path / "ok" / "fidelity.json") is None
    rep = fidelity(_FailingLab([2.0, 1.0, 3.0, 4.0, 2.5], {3}), {}, _Sized(), profiles, tmp_path / "some", rounds=2)
    assert "2 of 10 lab runs failed" in failures(rep, tmp_path / "some" / "fidelity.json")
    rep = fidelity(_FailingLab([2.0, 1.0, 3.0, 4.0, 2.5], {0, 1, 2}), {}, _Sized(), profiles, tmp_path / "none", rounds=2)
    with pytest.raises(TestbedError, match="too few to rank"):
        failures(rep, tmp_path / "none" / "fidelity.json")
    assert (tmp_path / "none" / "fidelity.json").exists()  # kept for inspection


def test_retest_refuses_two_studies_of_one_name_on_different_hardware(tmp_path):
    """lab-hidden-neighbour was redesigned under its name: a retest of the old study against the
    new one would compare two clusters. The report records the declared hardware (and studies
    from before it did are told apart by the CPU their lab demanded). Planted: without the check
    the retest compares them (rho 1.0) and passes."""
    from testbed.local.studies.fidelity import fidelity, retest

    profiles = fidelity_profiles(5, seed=1)
    old = _DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {})
    old.hardware_declared = {"roomy": {"cpu_milli": 1200}}
    new = _DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {})
    new.hardware_declared = {"roomy": {"cpu_milli": 600}}
    fidelity(old, {}, _Sized(), profiles, tmp_path / "old", rounds=2)
    fidelity(new, {}, _Sized(), profiles, tmp_path / "new", rounds=2)
    with pytest.raises(InputError, match="different hardware"):
        retest(tmp_path / "old", tmp_path / "new")
    # a study written before the hardware was recorded: its first run's lab_scale says what it demanded
    for d, demand in (("old", 4400), ("new", 3200)):
        path = tmp_path / d / "fidelity.json"
        rep = json.loads(path.read_text())
        del rep["lab"]
        path.write_text(json.dumps(rep))
        (tmp_path / d / "local" / "profile-00").mkdir(parents=True, exist_ok=True)
        (tmp_path / d / "local" / "profile-00" / "summary.json").write_text(
            json.dumps({"lab_scale": {"host_fit": {"demand_milli": demand}}}))
    with pytest.raises(InputError, match="different hardware"):
        retest(tmp_path / "old", tmp_path / "new")
    fidelity(new, {}, _Sized(), profiles, tmp_path / "again", rounds=2)
    fidelity(new, {}, _Sized(), profiles, tmp_path / "again2", rounds=2)
    assert retest(tmp_path / "again", tmp_path / "again2")["rho"]["mean"] == pytest.approx(1.0)


def test_the_retest_prints_each_sides_commit(tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app
    from testbed.local.studies.fidelity import code_revision, fidelity

    profiles = fidelity_profiles(5, seed=1)
    for d in ("a", "b"):
        fidelity(_DriftingLab([2.0, 1.0, 3.0, 4.0, 2.5], {}), {}, _Sized(), profiles, tmp_path / d, rounds=2)
    rep = json.loads((tmp_path / "a" / "fidelity.json").read_text())
    assert rep["git_revision"] == code_revision()
    got = CliRunner().invoke(app, ["fidelity", "--retest", str(tmp_path / "a"), str(tmp_path / "b")], terminal_width=300)
    out = " ".join(got.output.split())
    assert got.exit_code == 0 and out.count(f"code {code_revision() or 'not recorded'}") == 2
