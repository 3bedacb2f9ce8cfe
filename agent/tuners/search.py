"""The search baselines: fixed weights, random search, Optuna's samplers and a hill climber.

``default`` (the reference weights every time), ``equal`` (every weight 1), ``random`` (uniform in
the box), ``tpe``, ``gp`` and ``cmaes`` (Optuna's TPESampler, GPSampler, CmaEsSampler, with
start-up phases cut to fit a budget of ten runs), and ``hill`` (coordinate descent).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError


class FixedTuner:
    """Always the same setting: the fixed-weights baselines (``default`` and ``equal``)."""

    def __init__(self, name: str, codec: ActionCodec, setting: WeightSetting) -> None:
        self.name = name
        self.codec = codec
        self._action = codec.encode(setting)

    def suggest(self) -> np.ndarray:
        return self._action.copy()

    def tell(self, action: np.ndarray, metric: float) -> None:
        return None


class RandomTuner:
    """Uniform random search over the action box."""

    name = "random"

    def __init__(self, codec: ActionCodec, seed: int = 0) -> None:
        self.codec = codec
        self.rng = np.random.default_rng(seed)

    def suggest(self) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, self.codec.dim).astype(np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        return None


class OptunaTuner:
    """An Optuna sampler driven through ``study.ask`` / ``study.tell``.

    The reference run (and any action the sampler did not ask for) enters the study as a completed
    trial (``study.add_trial``), so model-based samplers start from what was measured.
    """

    def __init__(self, name: str, codec: ActionCodec, seed: int = 0, *, startup: int = 3,
                 deterministic: bool = False) -> None:
        """``deterministic``: GP-BO models the objective as noise-free; False (Optuna's default,
        and what every ``gp`` result so far used) fits a noise term, what a noisy lab needs."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = name
        self.codec = codec
        self.distributions = {n: optuna.distributions.FloatDistribution(-1.0, 1.0) for n in codec.names}
        x0 = dict(zip(codec.names, codec.reference_action().astype(float).tolist(), strict=True))
        # GPSampler and TPE's multivariate mode are "experimental" in Optuna 4 and CmaEsSampler's
        # x0/sigma0 deprecated since 4.9 (removal in 6; pyproject pins <5) with no replacement for
        # starting at a given point, which a tuner that knows the default weights should do.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            if name == "tpe":
                sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
            elif name == "gp":
                sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup,
                                                    deterministic_objective=deterministic)
            elif name == "cmaes":
                # One generation of the default popsize (4 + 3 ln d ~ 10) would be the whole budget:
                # a small population lets CMA-ES adapt within ten runs, starting at the reference.
                sampler = optuna.samplers.CmaEsSampler(x0=x0, sigma0=0.4, seed=seed, popsize=4, n_startup_trials=0)
            else:
                raise AgentError(f"unknown Optuna method {name!r}; valid: tpe, gp, cmaes")
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: Any = None

    def suggest(self) -> np.ndarray:
        trial = self.study.ask(self.distributions)
        self._pending = trial
        return np.asarray([trial.params[n] for n in self.codec.names], dtype=np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        import optuna

        action = np.asarray(action, dtype=np.float64)
        params = {n: float(np.clip(v, -1.0, 1.0)) for n, v in zip(self.codec.names, action, strict=True)}
        trial, self._pending = self._pending, None
        if trial is not None and all(abs(trial.params[n] - params[n]) < 1e-6 for n in self.codec.names):
            self.study.tell(trial, float(metric))
            return
        if trial is not None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.study.add_trial(
            optuna.trial.create_trial(params=params, distributions=self.distributions, value=float(metric))
        )


class HillClimber:
    """Coordinate descent from the reference: step each coordinate up, then down; halve on a full
    cycle without improvement. Deterministic given its seed (the coordinate order)."""

    name = "hill"

    def __init__(self, codec: ActionCodec, seed: int = 0, *, step: float = 0.5, min_step: float = 0.05) -> None:
        self.codec = codec
        self.order = np.random.default_rng(seed).permutation(codec.dim)
        self.delta = step
        self.min_step = min_step
        self.best: np.ndarray | None = None
        self.best_metric = float("inf")
        self.pos = 0
        self.sign = 1.0
        self.improved_in_cycle = False
        self._proposal: np.ndarray | None = None

    def _advance(self) -> None:
        if self.sign > 0:
            self.sign = -1.0
            return
        self.sign = 1.0
        self.pos += 1
        if self.pos >= len(self.order):
            self.pos = 0
            if not self.improved_in_cycle:
                self.delta = max(self.min_step, self.delta / 2.0)
            self.improved_in_cycle = False

    def suggest(self) -> np.ndarray:
        if self.best is None:
            self.best = self.codec.reference_action().astype(np.float64)
        for _ in range(2 * len(self.order) + 1):
            i = self.order[self.pos]
            x = self.best.copy()
            x[i] = np.clip(x[i] + self.sign * self.delta, -1.0, 1.0)
            if self.codec.decode(x) != self.codec.decode(self.best):
                self._proposal = x
                return x.astype(np.float32)
            self._advance()  # at the boundary, or a move too small to change the setting
        self._proposal = self.best.copy()
        return self._proposal.astype(np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        action = np.asarray(action, dtype=np.float64)
        if self.best is None:  # the reference run
            self.best, self.best_metric = action.copy(), float(metric)
            return
        if metric < self.best_metric:
            self.best, self.best_metric = action.copy(), float(metric)
            self.improved_in_cycle = True  # keep going in the same direction
        elif self._proposal is not None and np.allclose(action, self._proposal):
            self._advance()
        self._proposal = None

