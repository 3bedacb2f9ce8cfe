"""``NAME+gpK``: NAME proposes the first K runs, then GP-BO continues from every run made so far."""

from __future__ import annotations

import numpy as np
import pytest

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.tuners.factory import is_baseline, is_method, make_tuner
from agent.tuners.handover import HandOver, split_handover
from agent.tuners.search import FixedTuner

CODEC = ActionCodec()


def test_the_suffix_grammar():
    assert split_handover("policy:sample+gp3") == ("policy:sample", 3)
    assert split_handover("tpe") == ("tpe", None)
    assert split_handover("gp+reeval") == ("gp+reeval", None)
    with pytest.raises(AgentError, match=r"\+gpK hands over after K >= 1 runs"):
        split_handover("tpe+gp0")
    assert is_method("tpe+gp2") and is_baseline("tpe+gp2")
    assert is_method("policy:sample+gp3", {"policy:sample": "x.zip"}) and not is_baseline("policy:sample+gp3")
    assert not is_method("nonsense+gp3")


def test_the_first_method_proposes_k_runs_then_gp_continues_from_all_of_them():
    equal = CODEC.encode(CODEC.equal())
    tuner = HandOver(FixedTuner("equal", CODEC, CODEC.equal()), CODEC, k=3, seed=0)
    rng = np.random.default_rng(0)
    tuner.tell(CODEC.reference_action(), 1.0)  # the reference
    proposals = []
    for _ in range(6):
        a = tuner.suggest()
        proposals.append(a)
        tuner.tell(a, float(rng.uniform(0.5, 1.5)))
    assert all(np.allclose(p, equal) for p in proposals[:3])  # the first method's k runs
    assert not any(np.allclose(p, equal) for p in proposals[3:])  # then GP-BO's own
    trials = tuner.then.study.get_trials(deepcopy=False)
    assert len(trials) == 7  # the GP was told the reference, the first method's runs and its own
    assert tuner.name == "equal+gp3"


def test_make_tuner_builds_the_hand_over_around_any_method():
    tuner = make_tuner("random+gp2", CODEC, seed=4, steps=5)
    assert isinstance(tuner, HandOver) and tuner.k == 2 and tuner.first.name == "random"
