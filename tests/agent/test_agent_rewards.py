"""Reward arithmetic, against numbers computed by hand."""

from __future__ import annotations

import pytest

from agent.errors import AgentError
from agent.rl.rewards import REWARD_CLIP, percent_improvement, reward


def test_percent_improvement():
    assert percent_improvement(2.0, 1.5) == pytest.approx(25.0)
    assert percent_improvement(2.0, 3.0) == pytest.approx(-50.0)
    with pytest.raises(AgentError, match="positive latency"):
        percent_improvement(0.0, 1.0)


# history: reference 2.0 s, then 1.6 s, then 1.8 s; the new run measures 1.5 s
HISTORY = [2.0, 1.6, 1.8]


def test_previous_variant():
    # (1.8 - 1.5) / 1.8 = 16.666...%
    assert reward("previous", HISTORY, 1.5) == pytest.approx(100 * 0.3 / 1.8)
    assert reward("previous", HISTORY, 2.7) == pytest.approx(-50.0)


def test_best_variant_pays_only_new_bests_relative_to_the_reference():
    # best so far 1.6; 1.5 improves it by 0.1 s = 5 % of the reference
    assert reward("best", HISTORY, 1.5) == pytest.approx(5.0)
    assert reward("best", HISTORY, 1.7) == 0.0  # worse than the best: no punishment
    # The return telescopes to the final improvement over the reference.
    runs = [1.6, 1.8, 1.5, 1.9, 1.2]
    hist, total = [2.0], 0.0
    for m in runs:
        total += reward("best", hist, m)
        hist.append(m)
    assert total == pytest.approx(100 * (2.0 - 1.2) / 2.0)


def test_reference_variant():
    assert reward("reference", HISTORY, 1.5) == pytest.approx(25.0)
    assert reward("reference", [2.0], 2.5) == pytest.approx(-25.0)


def test_rewards_are_clipped():
    assert reward("previous", [1.0], 50.0) == -REWARD_CLIP
    assert reward("reference", [1.0], 30.0) == -REWARD_CLIP


def test_unknown_variant_and_empty_history():
    with pytest.raises(AgentError, match="unknown reward 'nope'"):
        reward("nope", [1.0], 1.0)
    with pytest.raises(AgentError, match="reference run"):
        reward("best", [], 1.0)
