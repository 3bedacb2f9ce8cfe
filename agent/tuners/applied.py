"""The one rule for which profile a tuner applies at the end (the live experiment and the evaluation).

Noise-free, the profile to apply is the best one measured. Under noise the best *measurement* is
partly luck (the winner's curse), so how a tuner picks what it applies is part of the method:
plain tuners apply the profile with the lowest mean of its measurements (the reference among
them, which wins a tie), what a user reading the log would pick; a tuner with a ``recommend``
method (``gp-noisy``, ``X+reeval``: agent.tuners.noise_aware) applies what it recommends. The live
experiment then applies that profile only when it beats the reference beyond the noise
(agent.loop.experiment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.actions import WeightSetting


def measured(settings: Sequence[WeightSetting], values: Sequence[float]) -> dict[str, tuple[WeightSetting, float, int]]:
    """Per distinct profile (by label): the setting, the mean of its measurements and their count."""
    groups: dict[str, list[float]] = {}
    first: dict[str, WeightSetting] = {}
    for s, v in zip(settings, values, strict=True):
        groups.setdefault(s.label(), []).append(float(v))
        first.setdefault(s.label(), s)
    return {k: (first[k], float(np.mean(v)), len(v)) for k, v in groups.items()}


def best_mean(settings: Sequence[WeightSetting], values: Sequence[float]) -> WeightSetting:
    """The profile with the lowest mean measurement (the first measured wins a tie: the reference)."""
    table = measured(settings, values)
    return min(table.values(), key=lambda e: e[1])[0]


def applied_setting(tuner: Any, settings: Sequence[WeightSetting], values: Sequence[float]) -> WeightSetting:
    """What ``tuner`` applies after measuring ``values`` for ``settings`` (index 0: the reference):
    its own ``recommend`` when it has one, else the lowest mean."""
    recommend = getattr(tuner, "recommend", None)
    if callable(recommend):
        return recommend(settings, values)
    return best_mean(settings, values)
