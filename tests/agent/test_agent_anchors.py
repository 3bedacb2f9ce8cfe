"""Anchors (agent/loop/anchors.py): the reference measured again every k steps of a live
experiment, the drift it shows reported and taken out of what the tuner is told."""

from __future__ import annotations

import json

import numpy as np
import pytest
from agent_fixtures import AnalyticBackend, AnalyticObjective, tiny_workload

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.loop.anchors import anchor_due, anchor_first, drift_of
from agent.loop.config import ExperimentConfig
from agent.loop.experiment import Experiment
from agent.loop.log import read_log
from agent.tuners.factory import make_tuner


class _SlowingLab(AnalyticBackend):
    """The analytic lab, ``factor`` times slower from its ``after``-th run on (a lab that drifts
    mid-experiment below any host threshold: a filling cache, a warming neighbour)."""

    def __init__(self, objective: AnalyticObjective, *, after: int, factor: float) -> None:
        super().__init__(objective)
        self.after, self.factor = after, factor

    def run(self, workload, out_dir, *, seed=0):
        if self.runs + 1 >= self.after:
            self.objective.base_s *= self.factor
            self.factor = 1.0  # once
        return super().run(workload, out_dir, seed=seed)


class _Recording:
    """A tuner that records what it is told."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.told = inner, inner.name, []

    def suggest(self):
        return self.inner.suggest()

    def tell(self, action, metric: float) -> None:
        self.told.append(metric)
        self.inner.tell(action, metric)


def _experiment(tmp_path, every: int, *, after: int = 9, factor: float = 2.0):
    cfg = ExperimentConfig(method="random", backend="local", cluster="analytic", workload="tiny", steps=8, seed=4,
                           anchor_every=every)
    lab = _SlowingLab(AnalyticObjective(seed=2), after=after, factor=factor)
    tuner = _Recording(make_tuner("random", ActionCodec(), seed=4))
    summary = Experiment(cfg, lab, tiny_workload(), tuner, tmp_path).run()
    return summary, lab, tuner


def test_a_lab_that_slows_mid_experiment_is_corrected_for_by_the_anchors(tmp_path):
    """The lab turns 2x slower at its 9th run; with an anchor at every step the tuner is told each
    profile's true latency (to the step whose anchor ran before the change), the best step is the
    truly best one, and summary and log say how far the reference moved. Planted: telling the
    tuner ``record.metric`` (uncorrected) fails: the later steps are told 2x their latency."""
    summary, _, tuner = _experiment(tmp_path, 1)
    records = read_log(tmp_path)
    truth = [AnalyticObjective(seed=2)(r.weight_setting()) for r in records]
    off = [abs(told / t - 1.0) for told, t in zip(tuner.told, truth, strict=True)]
    assert sum(x > 1e-6 for x in off) <= 1  # the one step whose change fell between its two runs
    assert max(r.metric / t for r, t in zip(records, truth, strict=True)) == pytest.approx(2.0)
    assert summary["best_step"] == int(np.argmin(truth))
    assert summary["anchors"]["drift_range"] == [pytest.approx(1.0), pytest.approx(2.0)]
    assert len(summary["anchors"]["runs"]) == 8
    assert all((tmp_path / "runs" / f"step-{s:03d}" / "anchor").is_dir() for s in range(1, 9))
    assert "anchors (8 reference runs" in (tmp_path / "summary.md").read_text()


def test_anchors_every_k_steps_hold_the_last_drift_and_run_in_a_seeded_order(tmp_path):
    summary, lab, _ = _experiment(tmp_path, 3, after=4, factor=1.5)
    records = read_log(tmp_path)
    assert [r.step for r in records if r.anchor is not None] == [3, 6]
    assert [r.drift for r in records][:3] == [1.0, 1.0, 1.0]
    assert records[3].drift == pytest.approx(1.5) and records[4].drift == records[3].drift
    assert lab.runs == 1 + 8 + 2
    assert anchor_due(3, 3) and not anchor_due(0, 3) and not anchor_due(4, 3) and not anchor_due(5, 0)
    assert {anchor_first(4, s) for s in range(40)} == {True, False}
    assert anchor_first(4, 7) == anchor_first(4, 7)
    assert drift_of(2.0, 3.0, 1.2) == pytest.approx(1.5) and drift_of(2.0, None, 1.2) == 1.2 and drift_of(2.0, None, None) == 1.0


def test_without_anchors_nothing_changes_and_a_resume_tells_the_tuner_the_same(tmp_path):
    summary, _, tuner = _experiment(tmp_path / "plain", 0)
    assert summary["anchors"] is None
    assert all(r.drift is None and r.anchor is None for r in read_log(tmp_path / "plain"))
    _, _, first = _experiment(tmp_path / "a", 2)
    cfg = ExperimentConfig.load(tmp_path / "a")
    again = _Recording(make_tuner("random", ActionCodec(), seed=4))
    Experiment(cfg, AnalyticBackend(AnalyticObjective(seed=2)), tiny_workload(), again, tmp_path / "a").run(resume=True)
    assert again.told == first.told  # the replay tells the corrected figures, as the live run did
    assert json.loads((tmp_path / "a" / "config.json").read_text())["anchor_every"] == 2


@pytest.mark.parametrize(("kw", "says"), [({"repeats": 2}, "needs repeats 1"), ({"backend": "sim"}, "deterministic"),
                                         ({"anchor_every": -1}, "0..")])
def test_anchors_refuse_what_they_cannot_mean(kw, says):
    args = {"method": "random", "backend": "local", "cluster": "analytic", "workload": "tiny", "anchor_every": 2, **kw}
    with pytest.raises(AgentError, match=says):
        ExperimentConfig(**args)


def test_the_cli_names_the_option_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app

    got = CliRunner().invoke(app, ["tune", "--backend", "sim", "--cluster", "lab-small", "--workload", "lab", "--method",
                                   "gp", "--steps", "2", "--anchor-every", "2", "--out", str(tmp_path / "x")])
    assert got.exit_code != 0 and "--anchor-every needs a measured backend" in got.output
    assert "Traceback" not in got.output and not (tmp_path / "x" / "experiment.jsonl").exists()
