"""The one loop that drives a tuner: the reference, then ``suggest`` → measure → ``tell``, T times.

The live experiment (agent.loop.experiment: a measurement is a logged step on a backend) and the
in-memory evaluation (agent.evaluation.runner: a measurement is an objective call) both run this
loop, so a tuner meets the same sequence of calls wherever it runs. ``told`` replays finished
steps first (a resumed experiment): each replayed step after the reference is one ``suggest``, to
advance the tuner's state (its random stream, its model, a policy's LSTM) exactly as before, and
one ``tell`` with the logged action and metric, never a new measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from agent.actions import ActionCodec
from agent.tuners.protocol import Tuner

Measure = Callable[[int, np.ndarray], float]
"""``measure(step, action)``: run the action's profile as step ``step``; its latency metric (s)."""


def drive(tuner: Tuner, codec: ActionCodec, steps: int, measure: Measure, *,
          told: Sequence[tuple[Sequence[float], float]] = ()) -> list[tuple[np.ndarray, float]]:
    """Steps ``0..steps`` (step 0: the reference profile); returns ``(action, metric)`` per step.

    A suggestion is clipped to the action box before it is measured and told, so what is told is
    what ran."""
    history: list[tuple[np.ndarray, float]] = []
    for step, (logged, metric) in enumerate(told):
        action = np.asarray(logged, dtype=np.float32)
        if step > 0:
            tuner.suggest()
        tuner.tell(action, float(metric))
        history.append((action, float(metric)))
    for step in range(len(history), steps + 1):
        action = codec.reference_action() if step == 0 else np.clip(tuner.suggest(), -1.0, 1.0)
        metric = float(measure(step, action))
        tuner.tell(action, metric)
        history.append((action, metric))
    return history
