"""The task-mixture tuner (agent/tuners/mixture.py): the first profile is the portfolio's, a
measurement moves the weight to the task that predicted it, and the next profile is that task's best."""

from __future__ import annotations

import json

import numpy as np
import pytest
from agent_fixtures import AnalyticObjective

import agent.tuners.transfer as transfer
from agent.actions import ActionCodec
from agent.errors import AgentError, InputError
from agent.evaluation.runner import run_experiment
from agent.tuners.factory import is_baseline, is_method, make_tuner
from agent.tuners.mixture import TaskMixture
from agent.tuners.transfer import TransferPrior

CODEC = ActionCodec()


def _prior() -> TransferPrior:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (5, CODEC.dim)).astype(np.float32)
    actions[0] = CODEC.reference_action()
    relative = np.array([[1.0, 1.0, 1.0],     # the default weights
                         [0.5, 1.2, 1.1],     # great on task a only
                         [0.9, 0.9, 0.9],     # a little better everywhere
                         [1.3, 0.6, 0.95],    # great on task b
                         [1.25, 0.95, 0.7]])  # great on task c
    return TransferPrior(actions, relative, ["a", "b", "c"])


def _index(prior: TransferPrior, action: np.ndarray) -> int:
    return next(i for i, a in enumerate(prior.actions) if np.allclose(a, action))


def test_first_profile_is_the_portfolios_then_the_matching_tasks_best():
    prior = _prior()
    tuner = TaskMixture(prior, CODEC, sigma=0.02, per_gap=False)
    tuner.tell(CODEC.reference_action(), 2.0)
    first = tuner.suggest()
    assert _index(prior, first) == _index(prior, prior.portfolio(1)[0]) == 1
    # the new cluster answers like task b (candidate 1 costs 1.2 x the reference there)
    tuner.tell(first, 2.0 * 1.2)
    w = tuner.weights()
    assert w.argmax() == 1 and w[1] > 0.99 and w.sum() == pytest.approx(1.0)
    assert _index(prior, tuner.suggest()) == 3  # task b's best untried profile
    # had it answered like task c instead, the next profile is c's best
    other = TaskMixture(prior, CODEC, sigma=0.02, per_gap=False)
    other.tell(CODEC.reference_action(), 2.0)
    other.tell(other.suggest(), 2.0 * 1.1)
    assert _index(prior, other.suggest()) == 4


def test_gains_count_as_shares_of_each_tasks_headroom():
    # headroom a 0.5, b 0.4, c 0.3; sum_j min(1, R) / h: candidate 1 6.83, 2 7.05, 3 6.67, 4 6.71
    prior = _prior()
    tuner = TaskMixture(prior, CODEC)
    tuner.tell(CODEC.reference_action(), 1.0)
    assert _index(prior, tuner.suggest()) == 3  # by latency alone it is 1 (2.5 against 2.55)


def test_never_repeats_a_candidate_and_ignores_foreign_actions():
    prior = _prior()
    tuner = TaskMixture(prior, CODEC)
    tuner.tell(CODEC.reference_action(), 1.0)
    seen = []
    for _ in range(4):  # 4 untried candidates beside the reference
        a = tuner.suggest()
        seen.append(_index(prior, a))
        tuner.tell(a, 0.8)
    assert sorted(seen) == [1, 2, 3, 4]
    before = tuner.weights().copy()
    tuner.tell(np.full(CODEC.dim, 0.123, dtype=np.float32), 0.1)  # not a candidate: no task predicted it
    assert np.array_equal(tuner.weights(), before) and tuner.best == pytest.approx(0.1)
    assert _index(prior, tuner.suggest()) in range(5)  # all ran: it starts over rather than fail


def _with_facts() -> TransferPrior:
    prior = _prior()
    # cold share, failure share, ln(p99/p50), ln(mean/p50) of each task's default-weights run
    facts = np.array([[0.01, 0.0, 3.0, 1.0], [0.20, 0.05, 1.0, 0.2], [0.02, 0.40, 2.0, 0.5]])
    return TransferPrior(prior.actions, prior.relative, prior.tasks, {}, facts)


def test_the_reference_runs_facts_pick_the_first_profile():
    prior = _with_facts()
    looks_like = {"cold_share": 0.021, "failure_share": 0.38, "tail_p99_p50": 2.1, "tail_mean_p50": 0.45}
    tuner = TaskMixture(prior, CODEC)
    tuner.observe(looks_like)
    tuner.tell(CODEC.reference_action(), 1.0)
    assert tuner.weights().argmax() == 2 and tuner.weights()[2] > 0.99
    assert _index(prior, tuner.suggest()) == 4  # task c's best, not the portfolio's first (1)
    blind = TaskMixture(prior, CODEC, width=None, per_gap=False)
    blind.observe(looks_like)
    blind.tell(CODEC.reference_action(), 1.0)
    assert _index(prior, blind.suggest()) == 1 and np.allclose(blind.weights(), 1 / 3)
    late = TaskMixture(prior, CODEC)  # facts after the reference (a candidate's run) do not reset the weights
    late.tell(CODEC.reference_action(), 1.0)
    late.observe(looks_like)
    assert np.allclose(late.weights(), 1 / 3)


def test_facts_travel_from_the_objective_through_the_loop(tmp_path, monkeypatch):
    path = tmp_path / "prior.json"
    _with_facts().save(path)
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", path)
    assert np.array_equal(TransferPrior.load(path).facts, _with_facts().facts)  # the file round trip

    class Told(AnalyticObjective):
        def facts(self, setting):
            return {"cold_share": 0.021, "failure_share": 0.38, "tail_p99_p50": 2.1, "tail_mean_p50": 0.45}

    settings, _ = run_experiment(make_tuner("task-mixture", CODEC), Told(seed=1), 2, CODEC)
    assert settings[1] == CODEC.decode(_with_facts().actions[4])
    settings, _ = run_experiment(make_tuner("task-mixture:nofacts:latency", CODEC), Told(seed=1), 2, CODEC)
    assert settings[1] == CODEC.decode(_with_facts().actions[1])


def test_a_prior_with_broken_facts_is_one_line(tmp_path):
    path = tmp_path / "prior.json"
    data = _with_facts().to_dict()
    data["facts"]["values"] = data["facts"]["values"][:2]
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"prior.json.*facts.values"):
        TransferPrior.load(path)


def test_sigma_must_be_positive():
    with pytest.raises(AgentError, match="sigma"):
        TaskMixture(_prior(), CODEC, sigma=0.0)


def test_the_factory_builds_it_from_the_shipped_prior(tmp_path, monkeypatch):
    path = tmp_path / "prior.json"
    _prior().save(path)
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", path)
    tuner = make_tuner("task-mixture:sigma0.25", CODEC)
    assert isinstance(tuner, TaskMixture) and tuner.sigma == 0.25 and tuner.name == "task-mixture:sigma0.25"
    assert is_method("task-mixture:sigma0.1+gp3") and is_method("task-mixture:sigma0.05") and is_method("task-mixture:latency")
    assert make_tuner("task-mixture:sigma0.2:nofacts:latency", CODEC)._scale.tolist() == [1.0, 1.0, 1.0]
    assert not is_baseline("task-mixture") and not is_method("task-mixture:sigma")
    for bad in ("task-mixture:sigma0", "task-mixture:width0.0", "task-mixture+gp3"):  # refused before anything runs
        with pytest.raises(AgentError, match=r"positive|already hands over"):
            is_method(bad)
    settings, values = run_experiment(make_tuner("task-mixture:latency+gp2", CODEC, seed=0), AnalyticObjective(seed=1), 4,
                                      CODEC)
    assert settings[1] == CODEC.decode(_prior().portfolio(1)[0]) and len(values) == 5


def test_the_live_loop_logs_the_facts_and_a_resume_replays_them(tmp_path, monkeypatch):
    from agent_fixtures import AnalyticBackend, tiny_workload

    from agent.loop.config import LOG_NAME, ExperimentConfig
    from agent.loop.experiment import Experiment
    from agent.loop.log import read_log

    def experiment(out):
        cfg = ExperimentConfig(method="task-mixture", backend="sim", cluster="analytic", workload="tiny", steps=3)
        return Experiment(cfg, AnalyticBackend(AnalyticObjective(seed=2)), tiny_workload(),
                          make_tuner("task-mixture", CODEC), out)

    # a prior whose task c looks exactly like the analytic backend's reference run
    probe = tmp_path / "probe"
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", tmp_path / "blind.json")
    _prior().save(tmp_path / "blind.json")
    experiment(probe).run()
    seen = read_log(probe)[0].facts
    assert set(seen) == {"cold_share", "failure_share", "tail_p99_p50", "tail_mean_p50"}
    prior = _with_facts()
    prior.facts[2] = [seen[k] for k in ("cold_share", "failure_share", "tail_p99_p50", "tail_mean_p50")]
    prior.save(tmp_path / "prior.json")
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", tmp_path / "prior.json")
    whole = tmp_path / "whole"
    live = experiment(whole)
    live.run()
    records = read_log(whole)
    assert records[1].setting == CODEC.decode(prior.actions[4]).to_dict()  # task c's best first
    cut = tmp_path / "cut"
    experiment(cut).run()
    log = cut / LOG_NAME
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:2]))  # steps 0 and 1 kept
    resumed = experiment(cut)
    resumed.run(resume=True)
    assert [r.action for r in read_log(cut)] == [r.action for r in records]
    assert np.allclose(resumed.tuner.first.log_weight, live.tuner.first.log_weight)  # the replay told the facts too


def test_the_plain_name_is_the_validated_tuner(tmp_path, monkeypatch):
    from agent.tuners.handover import HandOver
    from agent.tuners.mixture import HANDOVER, SIGMA, WIDTH
    from agent.tuners.noise_aware import Reeval

    path = tmp_path / "prior.json"
    _with_facts().save(path)
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", path)
    tuner = make_tuner("task-mixture", CODEC, seed=1)
    assert isinstance(tuner, HandOver) and tuner.k == HANDOVER and tuner.name == "task-mixture"
    assert isinstance(tuner.first, TaskMixture) and (tuner.first.sigma, tuner.first.width) == (SIGMA, WIDTH)
    assert isinstance(make_tuner("task-mixture+reeval", CODEC, steps=10), Reeval)
    with pytest.raises(AgentError, match="already hands over"):
        make_tuner("task-mixture+gp2", CODEC)
    with pytest.raises(AgentError, match="budget"):
        make_tuner("task-mixture+reeval", CODEC)
    # the same runs as the spelled-out form
    a = run_experiment(make_tuner("task-mixture", CODEC, seed=4), AnalyticObjective(seed=1), 5, CODEC)[1]
    b = run_experiment(make_tuner(f"task-mixture:sigma{SIGMA}:width{WIDTH}+gp{HANDOVER}", CODEC, seed=4),
                       AnalyticObjective(seed=1), 5, CODEC)[1]
    assert a == b


def test_a_broad_share_keeps_every_task_in_play(tmp_path):
    prior = _with_facts()
    looks_like = {"cold_share": 0.021, "failure_share": 0.38, "tail_p99_p50": 2.1, "tail_mean_p50": 0.45}
    sharp = TaskMixture(prior, CODEC)
    sharp.observe(looks_like)
    broad = TaskMixture(prior, CODEC, broad=0.3)
    broad.observe(looks_like)
    # (1 - 0.3) * the kernel's weights + 0.3 / 3 each
    assert np.allclose(broad.weights(), 0.7 * sharp.weights() + 0.1)
    assert broad.weights().min() >= 0.1 - 1e-12 and sharp.weights().min() < 1e-6
    uniform = TaskMixture(prior, CODEC, broad=1.0)
    uniform.observe(looks_like)
    assert np.allclose(uniform.weights(), 1 / 3)
    with pytest.raises(AgentError, match="broad"):
        TaskMixture(prior, CODEC, broad=1.5)
    path = tmp_path / "prior.json"
    prior.save(path)
    assert make_tuner("task-mixture:sigma0.05:width0.5:broad0.3", CODEC, prior=path).broad == 0.3
    with pytest.raises(AgentError, match="at most 1"):
        is_method("task-mixture:sigma0.05:broad2")


def test_a_prior_file_given_is_the_one_every_transfer_method_reads(tmp_path, monkeypatch):
    mine = _prior()
    relative = mine.relative.copy()
    relative[4] = [0.6, 0.6, 0.6]  # candidate 4 now the best everywhere (first of none in the shipped)
    other = TransferPrior(mine.actions, relative, mine.tasks)
    shipped, given = tmp_path / "shipped.json", tmp_path / "given.json"
    mine.save(shipped)
    other.save(given)
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", shipped)
    for method in ("learned-default", "task-mixture", "gp-warm"):
        first = {}
        for name, path in (("shipped", None), ("given", given)):
            settings, _ = run_experiment(make_tuner(method, CODEC, prior=path), AnalyticObjective(seed=1), 1, CODEC)
            first[name] = settings[1]
        assert first["given"] == CODEC.decode(mine.actions[4]) != first["shipped"], method


def test_evaluate_checks_the_prior_before_anything_runs(tmp_path):
    from agent.evaluation.study import evaluate

    broken = tmp_path / "prior.json"
    broken.write_bytes(b"\x00\x01 not json")
    with pytest.raises(InputError, match=r"prior.json.*not a transfer prior"):
        evaluate(["homog-web"], seeds=1, out_dir=tmp_path / "out", methods=["task-mixture"], prior=broken)
    assert not (tmp_path / "out").exists()
