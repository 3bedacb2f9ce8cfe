"""The one loop that drives a tuner: the reference, then ``suggest`` → measure → ``tell``, T times.

The live experiment (agent.loop.experiment: a measurement is a logged step on a backend) and the
in-memory evaluation (agent.evaluation.runner: a measurement is an objective call) both run this
loop, so a tuner meets the same sequence of calls wherever it runs. ``told`` replays finished
steps first (a resumed experiment): each replayed step after the reference is one ``suggest``, to
advance the tuner's state (its random stream, its model, a policy's LSTM) exactly as before, and
one ``tell`` with the logged action and metric, never a new measurement.

A measurement may say more than its metric: a :class:`Measured` carries the run's facts
(agent.metrics.RUN_FACTS: cold starts, failures, the tail's shape). A tuner that reads them has an
``observe(facts)`` method, called just before the ``tell`` of that run; every other tuner sees only
the metric. Replayed steps carry their logged facts the same way. A measurement may also carry the
run's per-node breakdown (``where``, loadgen.where) for a tuner with ``observe_where`` (the twin).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.actions import ActionCodec
from agent.tuners.protocol import Tuner


@dataclass(frozen=True)
class Measured:
    """A run's latency metric (s) and its facts (agent.metrics.run_facts; empty when unknown)."""

    metric: float
    facts: Mapping[str, float] = field(default_factory=dict)
    where: Mapping[str, Any] | None = None
    """The run's per-node breakdown (``loadgen.where``), for a tuner with ``observe_where``."""


Measure = Callable[[int, np.ndarray], "float | Measured"]
"""``measure(step, action)``: run the action's profile as step ``step``; its latency metric (s),
or a :class:`Measured` with the run's facts."""


def observe(tuner: object, facts: Mapping[str, float] | None) -> None:
    """Hand ``facts`` to ``tuner`` if it reads them (has ``observe``); the one place that asks, so
    the wrappers (agent.tuners.handover, agent.tuners.noise_aware) pass them on the same way."""
    method = getattr(tuner, "observe", None)
    if facts and callable(method):
        method(facts)


def wants_where(tuner: object) -> bool:
    """Whether ``tuner`` reads a run's per-node breakdown (a measurement may skip computing it)."""
    return callable(getattr(tuner, "observe_where", None))


def _tell(tuner: Tuner, action: np.ndarray, result: float | Measured) -> float:
    metric, facts = (result.metric, result.facts) if isinstance(result, Measured) else (result, None)
    observe(tuner, facts)
    where = result.where if isinstance(result, Measured) else None
    if where and wants_where(tuner):
        tuner.observe_where(where)  # type: ignore[attr-defined]
    tuner.tell(action, float(metric))
    return float(metric)


def drive(tuner: Tuner, codec: ActionCodec, steps: int, measure: Measure, *,
          told: Sequence[tuple[Sequence[float], float | Measured]] = ()) -> list[tuple[np.ndarray, float]]:
    """Steps ``0..steps`` (step 0: the reference profile); returns ``(action, metric)`` per step.

    A suggestion is clipped to the action box before it is measured and told, so what is told is
    what ran."""
    history: list[tuple[np.ndarray, float]] = []
    for step, (logged, result) in enumerate(told):
        action = np.asarray(logged, dtype=np.float32)
        if step > 0:
            tuner.suggest()
        history.append((action, _tell(tuner, action, result)))
    for step in range(len(history), steps + 1):
        action = codec.reference_action() if step == 0 else np.clip(tuner.suggest(), -1.0, 1.0)
        history.append((action, _tell(tuner, action, measure(step, action))))
    return history
