"""A tuner that hands over: one method proposes the first ``k`` runs, GP-BO continues from all runs.

Why: a policy trained on many tasks should be strongest in the first runs on a new cluster, where a
search knows nothing; a Bayesian search is strongest once it has data. ``NAME+gpK`` runs
``NAME`` (a policy, or any method) for ``k`` runs and then Optuna's GP-BO, which is told every run
made so far (the reference and the first method's, entered as completed trials:
agent.tuners.search.OptunaTuner), so it starts from what the policy found instead of from scratch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.tuners.drive import observe, wants_where
from agent.tuners.protocol import Tuner
from agent.tuners.search import OptunaTuner

_HANDOVER = re.compile(r"(?P<base>.+)\+gp(?P<k>\d+)")


def split_handover(method: str) -> tuple[str, int | None]:
    """``policy:sample+gp3`` -> ``("policy:sample", 3)``; a name without the suffix -> ``(name, None)``."""
    match = _HANDOVER.fullmatch(method)
    if match is None:
        return method, None
    k = int(match.group("k"))
    if k < 1:
        raise AgentError(f"method {method!r}: +gpK hands over after K >= 1 runs")
    return match.group("base"), k


class HandOver:
    """``first`` for the first ``k`` suggestions, then GP-BO; both are told every result."""

    def __init__(self, first: Tuner, codec: ActionCodec, k: int, seed: int) -> None:
        self.first = first
        self.k = int(k)
        # GP-BO models as soon as the reference and the first method's k runs are in
        self.then = OptunaTuner("gp", codec, seed, startup=self.k + 1)
        self.codec = codec
        self.name = f"{getattr(first, 'name', 'tuner')}+gp{self.k}"
        self._asked = 0
        if wants_where(first):  # the twin's refits need each run's per-node breakdown
            self.observe_where = first.observe_where  # type: ignore[attr-defined]

    def suggest(self) -> np.ndarray:
        self._asked += 1
        return (self.first if self._asked <= self.k else self.then).suggest()

    def observe(self, facts: Mapping[str, float]) -> None:
        """The facts of the run told next, for a first method that reads them."""
        observe(self.first, facts)

    def tell(self, action: np.ndarray, metric: float) -> None:
        self.first.tell(action, metric)
        self.then.tell(action, metric)


__all__ = ["HandOver", "split_handover"]
