"""A step the lab cannot prepare (testbed.errors.LabFault: a node not Ready, a cache that will not
purge, a rollout rolled back) is void and retried after ``fault_wait_s``, bounded by
``max_reruns``; beyond that the experiment ends with the reference restored and restore.json
saying why. Nothing already recorded is lost."""

from __future__ import annotations

import json

import pytest
from agent_fixtures import AnalyticBackend, AnalyticObjective, tiny_workload

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.loop.config import RESTORE_NAME, ExperimentConfig
from agent.loop.experiment import Experiment
from agent.loop.log import read_log
from agent.tuners.factory import make_tuner

CODEC = ActionCodec()


def _experiment(out, be, **kw):
    cfg = ExperimentConfig(**{"method": "random", "backend": "local", "cluster": "analytic", "workload": "tiny",
                              "steps": 2, "seed": 0, "fault_wait_s": 0.0, **kw})
    return Experiment(cfg, be, tiny_workload(), make_tuner(cfg.method, CODEC, seed=cfg.seed), out)


def test_a_passing_lab_fault_voids_the_attempt_and_the_step_is_retried(tmp_path):
    be = AnalyticBackend(AnalyticObjective(seed=2), lab_faults=frozenset({2, 3}))  # step 1's first two resets
    summary = _experiment(tmp_path, be).run()
    records = read_log(tmp_path)
    assert [len(r.voided) for r in records] == [0, 2, 0]
    assert all(v["stage"] == "prepare" and "node n" in v["reason"] for v in records[1].voided)
    assert be.runs == 3  # one run per step: the void attempts never ran the workload
    assert summary["voided_runs"] == 2 and not (tmp_path / RESTORE_NAME).exists()


def test_a_lab_that_stays_broken_ends_the_experiment_with_the_reference_restored(tmp_path):
    be = AnalyticBackend(AnalyticObjective(seed=2), lab_faults=frozenset(range(2, 100)))
    with pytest.raises(AgentError, match=r"step-001/cand-0: 3 attempts in a row were void \(last: node health: node n4 is "
                                         r"not Ready"):
        _experiment(tmp_path, be, max_reruns=2).run()
    assert len(read_log(tmp_path)) == 1  # the reference step, kept
    rec = json.loads((tmp_path / RESTORE_NAME).read_text())
    assert rec["restored"] is True and "3 attempts in a row were void" in rec["why"]
    assert be.applied[-1] == CODEC.reference().to_profile()


def test_fault_wait_is_checked():
    with pytest.raises(AgentError, match=r"fault_wait_s must be a number of seconds in \[0, 3600\], got -1"):
        ExperimentConfig(method="random", backend="sim", cluster="c", workload="w", fault_wait_s=-1)
    old = {"method": "random", "backend": "sim", "cluster": "c", "workload": "w"}  # a config.json before the field
    assert ExperimentConfig.from_dict(old).fault_wait_s == 30.0
