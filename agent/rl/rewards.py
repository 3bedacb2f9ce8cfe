"""Percentage-improvement rewards (the paper's first ingredient), as pure functions.

A tuning experiment minimises a latency metric ``m`` (seconds). Step 0 measures the reference
(kube-scheduler's default weights), ``m_ref``; step ``t >= 1`` measures ``m_t``. With
``best_{t-1} = min(m_0, ..., m_{t-1})``, every variant is a percentage (percent points):

- ``previous``:  ``100 (m_{t-1} - m_t) / m_{t-1}`` — improvement over the previous step. It rewards
  moving downhill from wherever the agent is; a bad step is paid back by the next one.
- ``best``:      ``100 max(0, best_{t-1} - m_t) / m_ref`` — the part of a *new best* gained at this
  step, relative to the reference. It never punishes exploration, and the episode's return
  telescopes to the final improvement ``100 (m_ref - best_T) / m_ref``: exactly what the
  experiment is judged by (the best profile seen is the one that is applied).
- ``reference``: ``100 (m_ref - m_t) / m_ref`` — improvement of this step over the reference. Its
  return is ``T`` times the mean improvement, so it also asks every step to be good.

A fourth variant exists for training only, where the simulator knows what a lab never does:

- ``true``: ``100 (q(inc_{t-1}) - q(inc_t)) / q(ref)`` with ``inc_t`` the profile a tuner would
  apply after step ``t`` (the best *measured* so far) and ``q`` its **true** latency (the noisy
  protocol's truth: a mean over simulator seeds no measurement draws). Under noise the incumbent can
  change to a profile that only measured lucky, and this reward is then negative, where ``best``
  pays for the lucky draw. The return telescopes to the true improvement of the applied profile,
  exactly what the noisy protocol scores. Without noise a measurement is the truth and ``true``
  equals ``best``.

Rewards are clipped to ``[-REWARD_CLIP, REWARD_CLIP]`` so one pathological run (a profile that
strands pods, latency x20) cannot dominate a PPO batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent.errors import AgentError

REWARDS = ("previous", "best", "reference")
"""The rewards a measured history gives (a live experiment records one of these)."""
TRUE_REWARD = "true"
TRAIN_REWARDS = (*REWARDS, TRUE_REWARD)
"""The rewards training offers: the measured ones and the truth's (agent.rl.env)."""
REWARD_CLIP = 100.0


def percent_improvement(before: float, after: float) -> float:
    """``100 (before - after) / before``: positive when latency went down."""
    if not (math.isfinite(before) and before > 0):
        raise AgentError(f"percent_improvement: 'before' must be a positive latency, got {before!r}")
    if not math.isfinite(after):
        raise AgentError(f"percent_improvement: 'after' must be finite, got {after!r}")
    return 100.0 * (before - after) / before


def _clip(r: float) -> float:
    return max(-REWARD_CLIP, min(REWARD_CLIP, r))


def reward(kind: str, history: Sequence[float], metric: float) -> float:
    """The reward of measuring ``metric`` after the runs in ``history`` (``history[0]`` = reference).

    ``history`` holds the metrics of steps ``0..t-1`` (at least the reference).
    """
    if not history:
        raise AgentError("reward: the history must hold at least the reference run (step 0)")
    ref = history[0]
    if kind == "previous":
        return _clip(percent_improvement(history[-1], metric))
    if kind == "best":
        best = min(history)
        return _clip(max(0.0, percent_improvement(ref, metric) - percent_improvement(ref, best)))
    if kind == "reference":
        return _clip(percent_improvement(ref, metric))
    raise AgentError(f"unknown reward {kind!r}; valid: {list(REWARDS)}")


def true_reward(reference: float, before: float, after: float) -> float:
    """The ``true`` reward: the change of the applied profile's true latency from ``before`` to
    ``after``, in percent of the reference's true latency (negative when the incumbent got worse)."""
    return _clip(percent_improvement(reference, after) - percent_improvement(reference, before))
