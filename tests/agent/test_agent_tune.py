"""The live tuning loop: the log, resume after a kill, voided runs, the applied and exported profile."""

from __future__ import annotations

import json

import numpy as np
import pytest
from agent_fixtures import AnalyticBackend, AnalyticObjective, Crash, tiny_workload

from agent.actions import ActionCodec
from agent.errors import AgentError, ExperimentLogError
from agent.loop.config import BEST_CONFIG_NAME, ExperimentConfig
from agent.loop.experiment import Experiment
from agent.loop.log import read_log
from agent.tuners.factory import make_tuner
from testbed.scheduler.config import (
    DEFAULT_SCORE_WEIGHTS,
    load_config,
    profile_weights,
    read_config_dict,
    validate_config_dict,
)

CODEC = ActionCodec()


def _config(**kw):
    base = dict(method="tpe", backend="sim", cluster="analytic", workload="tiny", steps=5, seed=0)
    base.update(kw)
    return ExperimentConfig(**base)


def _experiment(out, be, **kw):
    cfg = _config(**kw)
    return Experiment(cfg, be, tiny_workload(), make_tuner(cfg.method, CODEC, seed=cfg.seed), out)


def test_full_experiment_writes_log_summary_and_a_valid_best_config(tmp_path):
    backend = AnalyticBackend(AnalyticObjective(seed=1))
    summary = _experiment(tmp_path, backend).run()
    records = read_log(tmp_path)
    assert [r.step for r in records] == list(range(6))
    for key in ("method", "backend", "steps", "metric", "reference_metric", "best_metric", "improvement_pct",
                "best_step", "best_weights"):
        assert key in summary
    assert summary["platform"] == "knative"  # what served the functions, at the top level
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["best_metric"] == min(r.metric for r in records)
    assert on_disk["reference_metric"] == records[0].metric
    assert on_disk["improvement_pct"] == pytest.approx(
        100 * (records[0].metric - on_disk["best_metric"]) / records[0].metric)
    doc = read_config_dict(tmp_path / BEST_CONFIG_NAME)
    assert validate_config_dict(doc) == []
    best = min(records, key=lambda r: r.metric)
    exported = load_config(tmp_path / BEST_CONFIG_NAME).profile("default-scheduler")
    assert profile_weights(exported) == {k: best.setting["weights"][k] for k in profile_weights(exported)}
    assert backend.applied[-1] == exported  # the best profile is what the cluster is left on
    assert (tmp_path / "tuning-curve.png").stat().st_size > 0
    assert "| step |" in (tmp_path / "summary.md").read_text()
    for r in records:  # every run directory the log names exists
        for d in r.run_dirs:
            assert (tmp_path / d / "summary.json").exists()


@pytest.mark.parametrize("crash_on_run", [1, 3, 6])
def test_resume_after_a_kill_neither_repeats_nor_loses_a_step(tmp_path, crash_on_run):
    whole = _experiment(tmp_path / "whole", AnalyticBackend(AnalyticObjective(seed=2))).run()
    crashing = AnalyticBackend(AnalyticObjective(seed=2), crash_on_run=crash_on_run)
    with pytest.raises(Crash):
        _experiment(tmp_path / "cut", crashing).run()
    done = read_log(tmp_path / "cut")
    assert len(done) == crash_on_run - 1  # run k is the k-th step (repeats=1), and it never finished
    fresh = AnalyticBackend(AnalyticObjective(seed=2))
    resumed = _experiment(tmp_path / "cut", fresh).run(resume=True)
    assert fresh.runs == 6 - (crash_on_run - 1)  # only the missing steps ran
    cut = read_log(tmp_path / "cut")
    ref = read_log(tmp_path / "whole")
    assert [r.step for r in cut] == list(range(6))
    assert [r.action for r in cut] == [r.action for r in ref]  # the same trajectory as without the kill
    assert resumed["best_metric"] == whole["best_metric"]


def test_resume_refuses_another_config_and_a_fresh_run_refuses_an_existing_log(tmp_path):
    _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2))).run()
    with pytest.raises(AgentError, match="already holds an experiment"):
        _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2))).run()
    with pytest.raises(ExperimentLogError, match="method = 'tpe'; it cannot be resumed with 'random'"):
        _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2)), method="random").run(resume=True)
    with pytest.raises(ExperimentLogError, match="steps = 5; it cannot be resumed with 3"):
        _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2)), steps=3).run(resume=True)
    with pytest.raises(ExperimentLogError, match="no experiment to resume"):
        _experiment(tmp_path / "empty", AnalyticBackend(AnalyticObjective(seed=2))).run(resume=True)


def test_a_torn_last_log_line_is_dropped(tmp_path):
    _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2))).run()
    log = tmp_path / "experiment.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    assert len(read_log(tmp_path)) == 3


def test_void_runs_are_rerun_and_never_scored(tmp_path):
    backend = AnalyticBackend(AnalyticObjective(seed=4), void_runs=frozenset({2}))
    exp = _experiment(tmp_path, backend, backend="local")  # a measured backend: its load generator can lag
    exp.run()
    records = read_log(tmp_path)
    assert backend.runs == 7  # 6 steps + 1 rerun
    voided = records[1].voided
    assert len(voided) == 1 and "dispatch lag" in voided[0]["reason"]
    assert (tmp_path / voided[0]["run_dir"]).exists()
    # the scored metric is the clean rerun's (no lag added)
    clean = AnalyticBackend(AnalyticObjective(seed=4))
    _experiment(tmp_path / "clean", clean, backend="local").run()
    assert records[1].metric == read_log(tmp_path / "clean")[1].metric


def test_persistently_unhealthy_runs_stop_the_experiment(tmp_path):
    backend = AnalyticBackend(AnalyticObjective(seed=4), void_runs=frozenset(range(1, 50)))
    with pytest.raises(AgentError, match="void"):
        _experiment(tmp_path, backend, backend="local", max_reruns=2).run()


def test_the_reference_stays_applied_when_nothing_beats_it(tmp_path):
    obj = AnalyticObjective(seed=5)
    # make the default weights the optimum
    obj.targets = {p: float(np.log10(w)) for p, w in DEFAULT_SCORE_WEIGHTS.items()}
    obj.target_share = 0.0
    backend = AnalyticBackend(obj)
    summary = _experiment(tmp_path, backend, method="random").run()
    assert summary["best_step"] == 0 and summary["applied_step"] == 0
    assert summary["verdict"] == "no improvement found"
    assert profile_weights(backend.applied[-1]) == DEFAULT_SCORE_WEIGHTS


def test_noisy_backend_pairs_repeats_and_calls_noise_no_difference(tmp_path):
    obj = AnalyticObjective(seed=6)
    backend = AnalyticBackend(obj, noise=0.3)
    summary = _experiment(tmp_path, backend, method="equal", backend="local", repeats=3).run()
    records = read_log(tmp_path)
    assert backend.runs == 3 + 5 * 6  # reference x3, then per step 3 x (reference + candidate)
    for r in records[1:]:
        assert len(r.samples) == 3 and len(r.reference_samples) == 3
        assert r.ci_low is not None and r.ci_low <= r.improvement_pct + 1e-9
    if summary["verdict"] != "improvement":
        assert summary["applied_step"] == 0  # an unproven gain is not applied


def test_confirmation_reruns_the_best_paired_and_decides_what_is_applied(tmp_path):
    obj = AnalyticObjective(seed=8)
    backend = AnalyticBackend(obj, noise=0.01)
    summary = _experiment(tmp_path, backend, method="hill", backend="local", confirm=3).run()
    assert backend.runs == 6 + 2 * 3  # T+1 steps, then 3 (reference, best) pairs
    conf = json.loads((tmp_path / "confirmation.json").read_text())
    assert conf["best_step"] == summary["best_step"] > 0
    assert len(conf["samples"]) == len(conf["reference_samples"]) == 3
    assert summary["verdict"] == conf["verdict"] == "improvement"  # 1 % noise, a clear gain
    assert summary["applied_step"] == summary["best_step"]
    assert summary["improvement_ci_pct"] == [conf["ci_low"], conf["ci_high"]]
    # resuming a finished experiment reuses the confirmation instead of rerunning it
    again = AnalyticBackend(obj, noise=0.01)
    _experiment(tmp_path, again, method="hill", backend="local", confirm=3).run(resume=True)
    assert again.runs == 0


def test_unreplicated_gain_on_a_measured_backend_is_not_applied_without_confirmation(tmp_path):
    backend = AnalyticBackend(AnalyticObjective(seed=8), noise=0.01)
    summary = _experiment(tmp_path, backend, method="hill", backend="local").run()
    assert summary["best_step"] > 0 and summary["verdict"] == "unreplicated"
    assert summary["applied_step"] == 0


def test_every_step_says_where_its_time_went_and_the_summary_adds_it_up(tmp_path, monkeypatch):
    backend = AnalyticBackend(AnalyticObjective(seed=1))
    real_run = backend.run

    def slow_run(*args, **kw):
        import time

        time.sleep(0.05)
        return real_run(*args, **kw)

    monkeypatch.setattr(backend, "run", slow_run)
    summary = _experiment(tmp_path, backend, steps=3, backend="local", confirm=2).run()
    records = read_log(tmp_path)
    assert all(r.seconds["run"] >= 0.05 and r.seconds["prepare"] >= 0 and "tuner" in r.seconds for r in records)
    confirmation = json.loads((tmp_path / "confirmation.json").read_text()) if summary["confirmation"] else None
    total = sum(r.seconds["run"] for r in records) + (confirmation["seconds"]["run"] if confirmation else 0.0)
    assert summary["seconds"]["run"] == pytest.approx(total, abs=0.01)
    if confirmation:  # two pairs of runs, each at least the sleep
        assert confirmation["seconds"]["run"] >= 4 * 0.05
