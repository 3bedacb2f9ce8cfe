"""One tuning experiment in memory, and the oracle's search: the evaluation's two kinds of run.

Both go through :func:`agent.tuners.drive.drive`, the loop the live experiment runs too; here a
measurement is one call of an :class:`~agent.objectives.protocol.Objective`.
"""

from __future__ import annotations

from agent.actions import ActionCodec, WeightSetting
from agent.objectives.protocol import Objective
from agent.tuners.applied import measured
from agent.tuners.drive import Measured, drive, wants_where
from agent.tuners.protocol import Tuner
from agent.tuners.search import OptunaTuner

ORACLE_TOP = 5
"""Profiles of the oracle's search whose truth is computed: the best by one seed need not be the
best on average."""


def run_experiment(tuner: Tuner, objective: Objective, steps: int, codec: ActionCodec
                   ) -> tuple[list[WeightSetting], list[float]]:
    """The reference and ``steps`` suggest/tell rounds on ``objective``: every setting run and its
    metric (index 0: the reference)."""
    settings: list[WeightSetting] = []

    facts = getattr(objective, "facts", None)
    where = getattr(objective, "where", None) if wants_where(tuner) else None
    if callable(where) and hasattr(objective, "collect_where"):
        objective.collect_where = True  # the breakdown from the measured run itself, not a second run

    def measure(step: int, action) -> float | Measured:
        settings.append(codec.decode(action))
        metric = float(objective(settings[-1]))
        if not callable(facts):
            return metric
        return Measured(metric, facts(settings[-1]), where(settings[-1]) if callable(where) else None)

    history = drive(tuner, codec, steps, measure)
    return settings, [metric for _, metric in history]


def oracle_runs(objective: Objective, codec: ActionCodec, runs: int, seed: int
                ) -> tuple[list[WeightSetting], list[float]]:
    """The oracle's search: TPE after a random start of ``runs // 5`` (at least 10), seeded apart
    from every tuner (``10_000 + seed``)."""
    tuner = OptunaTuner("tpe", codec, seed=10_000 + seed, startup=max(10, runs // 5))
    return run_experiment(tuner, objective, runs, codec)


def oracle_top(objective: Objective, codec: ActionCodec, runs: int, seed: int = 0, top: int = ORACLE_TOP
               ) -> list[WeightSetting]:
    """The ``top`` best distinct profiles of the oracle's search, best first."""
    table = measured(*oracle_runs(objective, codec, runs, seed))
    return [s for s, _, _ in sorted(table.values(), key=lambda e: e[1])[:top]]
