"""The ask-and-tell interface every tuner implements (like Optuna's ``study.ask`` / ``study.tell``).

A tuner is told the reference run first (step 0: kube-scheduler's default weights), then asked
``suggest()`` for the next action and ``tell(action, metric)`` its result, ``T`` times
(agent.tuners.drive). All tuners search the same action box (agent.actions), so one loop compares
them and the live experiment runs any of them. A tuner may also ``recommend(settings, values)``
the profile to apply (agent.tuners.applied).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Tuner(Protocol):
    name: str

    def suggest(self) -> np.ndarray:
        """The next action to run (in the codec's box)."""

    def tell(self, action: np.ndarray, metric: float) -> None:
        """The metric (seconds, lower is better) measured for ``action``; the first tell is the reference."""

