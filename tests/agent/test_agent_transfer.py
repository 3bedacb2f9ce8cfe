"""The transfer baselines (agent/tuners/transfer.py): the prior's arithmetic by hand, the tuners'
first runs, and a broken prior file as one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from agent_fixtures import AnalyticObjective

import agent.tuners.transfer as transfer
from agent.actions import ActionCodec
from agent.errors import InputError
from agent.evaluation.runner import run_experiment
from agent.tuners.factory import make_tuner
from agent.tuners.transfer import TransferPrior

CODEC = ActionCodec()


def _prior() -> TransferPrior:
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (4, CODEC.dim)).astype(np.float32)
    relative = np.array([[1.0, 1.0, 1.0],    # the default weights
                         [0.5, 1.2, 1.1],    # great on task 0 only
                         [0.9, 0.9, 0.9],    # a little better everywhere: the learned default
                         [1.3, 0.6, 0.95]])  # great on task 1
    return TransferPrior(actions, relative, ["a", "b", "c"])


def test_learned_default_portfolio_and_ranks_by_hand():
    prior = _prior()
    assert np.array_equal(prior.learned_default(), prior.actions[2])  # mean 0.9 beats 0.933 and 0.95
    # greedy on top of the default weights (always run, 1.0): mean of min(1, row) is 0.833 for row 1,
    # 0.9 for row 2, 0.85 for row 3: row 1; then with (0.5, 1, 1): row 3 gives 0.683, row 2 0.767;
    # then row 2: (0.5, 0.6, 0.9)
    order = [next(i for i, a in enumerate(prior.actions) if np.array_equal(a, p)) for p in prior.portfolio(3)]
    assert order == [1, 3, 2]
    assert prior.relative[order].min(axis=0).mean() == pytest.approx((0.5 + 0.6 + 0.9) / 3)
    assert prior.ranks()[:, 0].tolist() == [2 / 3, 0.0, 1 / 3, 1.0]


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    path = tmp_path / "prior.json"
    _prior().save(path)
    monkeypatch.setattr(transfer, "TRANSFER_PRIOR", path)
    return path


def test_the_tuners_start_where_the_prior_says(shipped):
    prior = TransferPrior.load(shipped)
    settings, _ = run_experiment(make_tuner("learned-default", CODEC, seed=0), AnalyticObjective(seed=1), 3, CODEC)
    assert all(s == CODEC.decode(prior.learned_default()) for s in settings[1:])
    settings, _ = run_experiment(make_tuner("gp-warm", CODEC, seed=0), AnalyticObjective(seed=1), 5, CODEC)
    assert settings[1:4] == [CODEC.decode(a) for a in prior.portfolio(3)]  # then GP-BO
    a = run_experiment(make_tuner("ws-cmaes", CODEC, seed=3), AnalyticObjective(seed=1), 4, CODEC)[1]
    b = run_experiment(make_tuner("ws-cmaes", CODEC, seed=3), AnalyticObjective(seed=1), 4, CODEC)[1]
    assert a == b and len(a) == 5


@pytest.mark.parametrize(("content", "message"), [
    ("{", "not a transfer prior"),
    ('{"tasks": ["a"], "actions": [[0.0, 0.0]], "relative": [[1.0]]}', "actions must be a list of"),
    (json.dumps({"tasks": ["a"], "actions": [[0.0] * CODEC.dim], "relative": [[-1.0]]}), "positive latency ratio"),
])
def test_a_broken_prior_is_one_line_naming_it(shipped, content, message):
    shipped.write_text(content)
    with pytest.raises(InputError, match=message) as err:
        make_tuner("gp-warm", CODEC, seed=0)
    assert str(shipped) in str(err.value)


def test_the_shipped_prior_loads_and_comes_from_training_tasks_only():
    from agent.objectives.sim import split_names

    prior = TransferPrior.load(transfer.TRANSFER_PRIOR)
    held_out = set(split_names("test"))
    assert prior.tasks and not held_out & set(prior.tasks)
    assert all(int(t.rsplit("-", 1)[1]) < 1_000_000 for t in prior.tasks if t.startswith("gen"))  # no validation seeds
    assert prior.provenance.get("command", "").startswith("scoretune transfer-prior")


def test_the_priors_training_tasks_draw_from_training_seeds_only():
    from agent.evaluation.transfer_prior import training_tasks
    from agent.objectives.sim import GENERATED_TRAIN_SEEDS, split_names

    tasks = training_tasks(2, small=3)
    assert tasks[: len(split_names("train"))] == split_names("train")
    assert [t for t in tasks if t.startswith("gensmall-")] == ["gensmall-0", "gensmall-1", "gensmall-2"]
    assert [t for t in tasks if t.startswith("gen-")] == ["gen-0", "gen-1"]
    assert all(int(t.rsplit("-", 1)[1]) < GENERATED_TRAIN_SEEDS for t in tasks if t.startswith("gen"))
    assert not [t for t in training_tasks(2) if t.startswith("gensmall-")]  # the family only when asked
