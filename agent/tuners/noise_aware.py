"""The tuners' noise handling: re-measuring the incumbent, and GP-BO for a noisy objective.

What a tuner applies is part of the method under noise (agent.tuners.applied); two tuners bring
their own rule:

- ``gp-noisy``: Optuna's GPSampler with its noise term (``deterministic_objective=False``), and
  it applies the evaluated profile with the lowest GP *posterior mean* (a Matérn-5/2 GP with a
  white-noise kernel on the log latency, scikit-learn), the standard recommendation of noisy BO;
- ``X+reeval`` (any method X): the last ``R`` runs of the budget re-measure the incumbent (the
  profile with the lowest mean so far) instead of exploring; it applies the lowest mean among the
  profiles measured at least twice, or the reference. ``+reeval`` takes ``R = T // 3``,
  ``+reevalK`` takes ``R = K``. Every re-measurement counts against the budget.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError
from agent.tuners.applied import measured
from agent.tuners.drive import observe, wants_where
from agent.tuners.search import OptunaTuner

_REEVAL = re.compile(r"reeval(?P<k>\d+)?")


@dataclass(frozen=True)
class NoiseRule:
    """The ``+reeval[K]`` suffix of a method name: how many final runs re-measure the incumbent."""

    runs: int | None = None
    """None: ``T // 3``."""

    def remeasures(self, steps: int) -> int:
        r = steps // 3 if self.runs is None else self.runs
        return max(0, min(int(r), steps - 1))


def split_rule(method: str) -> tuple[str, NoiseRule | None]:
    """``gp+reeval`` → ``("gp", NoiseRule())``; a name without ``+`` → ``(name, None)``."""
    base, plus, suffix = method.rpartition("+")
    if not plus:
        return method, None
    match = _REEVAL.fullmatch(suffix)
    if match is None or not base:
        raise AgentError(f"method {method!r}: the part after '+' must be reeval or reevalK (K re-measure runs)")
    k = match.group("k")
    return base, NoiseRule(None if k is None else int(k))


class Reeval:
    """Any tuner with the incumbent re-measured in the last runs of a budget of ``steps`` runs."""

    def __init__(self, inner: Any, codec: ActionCodec, steps: int, rule: NoiseRule) -> None:
        self.inner = inner
        if wants_where(inner):  # the twin's refits need each explored run's per-node breakdown
            self.observe_where = inner.observe_where
        self.codec = getattr(inner, "codec", codec)
        self.name = f"{getattr(inner, 'name', 'tuner')}+reeval"
        self.explore = steps - rule.remeasures(steps)
        self.settings: list[WeightSetting] = []
        self.actions: list[np.ndarray] = []
        self.values: list[float] = []

    def suggest(self) -> np.ndarray:
        if len(self.values) <= self.explore:  # the reference and the first explore-1 runs told
            return self.inner.suggest()
        table = measured(self.settings, self.values)
        label = min(table, key=lambda k: table[k][1])
        return self.actions[[s.label() for s in self.settings].index(label)].copy()

    def observe(self, facts: Mapping[str, float]) -> None:
        """The facts of the run told next, for an inner tuner that reads them."""
        if len(self.values) <= self.explore:
            observe(self.inner, facts)

    def tell(self, action: np.ndarray, metric: float) -> None:
        action = np.asarray(action, dtype=np.float32)
        if len(self.values) <= self.explore:
            self.inner.tell(action, metric)
        self.actions.append(action)
        self.settings.append(self.codec.decode(action))
        self.values.append(float(metric))

    def recommend(self, settings: Sequence[WeightSetting], values: Sequence[float]) -> WeightSetting:
        table = measured(settings, values)
        reference = settings[0].label()
        pool = {k: e for k, e in table.items() if e[2] >= 2 or k == reference}
        return min(pool.values(), key=lambda e: e[1])[0]


def gp_posterior_best(actions: Sequence[np.ndarray], values: Sequence[float], seed: int = 0) -> int:
    """Index of the evaluated action with the lowest GP posterior mean of ``log(value)``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    x = np.asarray(actions, dtype=float)
    y = np.log(np.asarray(values, dtype=float))
    if len(y) < 3 or np.ptp(y) == 0:
        return int(np.argmin(y))
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(length_scale=np.ones(x.shape[1]), length_scale_bounds=(1e-2, 1e2),
                                                       nu=2.5) + WhiteKernel(0.1, (1e-6, 1e1))
    gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp.fit(x, y)
    return int(np.argmin(gp.predict(x)))


class NoisyGP:
    """GP-BO configured for a noisy objective: GPSampler with its noise term, and the posterior-mean
    recommendation (see the module docstring)."""

    name = "gp-noisy"

    def __init__(self, codec: ActionCodec, seed: int = 0) -> None:
        self.inner = OptunaTuner("gp", codec, seed, deterministic=False)  # explicit: the noise term
        self.codec = codec
        self.seed = seed
        self.actions: list[np.ndarray] = []

    def suggest(self) -> np.ndarray:
        return self.inner.suggest()

    def tell(self, action: np.ndarray, metric: float) -> None:
        self.actions.append(np.clip(np.asarray(action, dtype=float), -1.0, 1.0))
        self.inner.tell(action, metric)

    def recommend(self, settings: Sequence[WeightSetting], values: Sequence[float]) -> WeightSetting:
        return settings[gp_posterior_best(self.actions, values, self.seed)]
