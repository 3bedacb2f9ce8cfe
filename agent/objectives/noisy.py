"""The noisy protocol: objectives that measure like a real lab, and the truth they are judged by.

A tuner in the noise-free protocol sees one simulator seed per objective and memoised profiles, so
a profile measured once is known exactly. A real lab is not like that: the same profile measures
differently run after run (``scoretune calibrate --noise`` measures how much on the embedded lab,
``testbed.local.studies.noise``, the model in ``testbed.noise_model``). Here every run of a profile

- draws a fresh simulator seed (the simulator's own run-to-run variation: service times, cold
  starts, the autoscaler's timing), from a stream the tuner cannot steer, and
- multiplies the result by a mean-one log-normal measurement error whose coefficient of variation
  ``extra_cv`` tops the simulator's own seed-to-seed spread up to the calibrated lab spread for a
  run of that many requests: ``extra_cv^2 = max(0, cv_lab(N)^2 - cv_seed^2)`` (variances of
  independent parts add), so the total spread a tuner sees is the lab's.

What a user gets from a tuner is the **true** quality of the profile it applies at the end. The
truth of a profile is its mean over :data:`TRUTH_SEEDS` simulator seeds that no measurement ever
draws (a disjoint range), computed by :class:`Truth`, which the evaluation holds apart: a tuner is
only ever handed the :class:`NoisyObjective`, which has no reference to the truth and no way to
compute it (its seeds come from another range, and its values carry the measurement error).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from agent.actions import WeightSetting
from agent.errors import AgentError
from agent.objectives.sim import measured_run, sim_metric, sim_run, sim_summary

TRUTH_SEED_BASE = 3_000_000_000
"""Truth seeds are ``TRUTH_SEED_BASE + k``; measurement seeds are drawn below it."""
MEASUREMENT_SEEDS = TRUTH_SEED_BASE
TRUTH_SEEDS = 10


def extra_cv(lab_cv: float, seed_cv: float) -> float:
    """The measurement error's CV that tops the simulator's own spread up to the lab's."""
    if not (math.isfinite(lab_cv) and lab_cv >= 0 and math.isfinite(seed_cv) and seed_cv >= 0):
        raise AgentError(f"spreads must be finite and >= 0, got lab {lab_cv!r}, seed {seed_cv!r}")
    return math.sqrt(max(0.0, lab_cv**2 - seed_cv**2))


def lognormal_sigma(cv: float) -> float:
    """The log-scale sigma of a log-normal with coefficient of variation ``cv``."""
    return math.sqrt(math.log1p(cv**2))


class NoisyObjective:
    """A scenario measured as a lab would measure it: a fresh seed and a measurement error per run.

    ``rng_seed`` seeds the private stream of simulator seeds and errors, so an experiment repeats
    exactly; nothing is memoised (a profile measured twice gives two values)."""

    def __init__(self, cluster: Any, workload: Any, *, noise_cv: float, rng_seed: int, metric: str = "mean",
                 name: str = "", context: Mapping[str, float] | None = None, truth: Any = None,
                 config: Any = None) -> None:
        if not (math.isfinite(noise_cv) and noise_cv >= 0):
            raise AgentError(f"noise_cv must be finite and >= 0, got {noise_cv!r}")
        self.cluster = cluster
        self.workload = workload
        self.metric = metric
        self.noise_cv = float(noise_cv)
        self._sigma = lognormal_sigma(self.noise_cv)
        self._rng = np.random.default_rng([int(rng_seed), 0x6E6F697A])
        self.name = name or f"{getattr(cluster, 'name', 'cluster')}/{workload.name}~noisy"
        self._context = dict(context or {})
        self.runs = 0
        self.seeds: list[int] = []
        """The simulator seed of every run (for the test that they never touch the truth's)."""
        self._facts: dict[str, dict[str, float]] = {}
        self.truth = truth
        """testbed.sim.mismatch.Truth run in place of ``cluster`` (None: the spec as written)."""
        self.config = config
        """testbed.sim.engine.SimConfig: the known deployment, what serves the functions (None: Knative's)."""
        self.collect_where = False
        """Keep each run's per-node breakdown (set by the evaluation for a tuner that reads it)."""
        self._where: dict[str, dict[str, Any]] = {}

    def __call__(self, setting: WeightSetting) -> float:
        seed = int(self._rng.integers(MEASUREMENT_SEEDS))
        error = math.exp(self._sigma * float(self._rng.standard_normal()) - 0.5 * self._sigma**2)
        self.seeds.append(seed)
        self.runs += 1
        if self.collect_where:  # one run gives the metric, the facts and the breakdown
            summary = sim_summary(self.cluster, self.workload, setting, seed, truth=self.truth, config=self.config,
                                  where=True)
            self._where[setting.label()] = summary["where"]
            value, self._facts[setting.label()] = measured_run(summary, self.metric)
        else:
            value, self._facts[setting.label()] = sim_run(self.cluster, self.workload, setting, seed, self.metric,
                                                          truth=self.truth, config=self.config)
        return value * error

    def where(self, setting: WeightSetting) -> Mapping[str, Any]:
        """The per-node breakdown of ``setting``'s last run (with ``collect_where``), else empty."""
        return self._where.get(setting.label(), {})

    def facts(self, setting: WeightSetting) -> Mapping[str, float]:
        """The facts of ``setting``'s last run (measured, like the metric, with that run's seed);
        empty before its first run (asking never spends a run)."""
        return self._facts.get(setting.label(), {})

    def context(self) -> Mapping[str, float]:
        return self._context


class Truth:
    """The true metric of a profile: its mean over the truth seeds, memoised by profile. Held by the
    evaluation, never handed to a tuner."""

    def __init__(self, cluster: Any, workload: Any, *, metric: str = "mean", seeds: int = TRUTH_SEEDS,
                 truth: Any = None, config: Any = None) -> None:
        if seeds < 2:
            raise AgentError(f"the truth needs >= 2 seeds, got {seeds}")
        self.cluster = cluster
        self.workload = workload
        self.metric = metric
        self.seeds = [TRUTH_SEED_BASE + k for k in range(int(seeds))]
        self._cache: dict[str, np.ndarray] = {}
        self.truth = truth
        """testbed.sim.mismatch.Truth run in place of ``cluster`` (None: the spec as written)."""
        self.config = config
        """testbed.sim.engine.SimConfig: the known deployment, what serves the functions (None: Knative's)."""

    def samples(self, setting: WeightSetting) -> np.ndarray:
        key = setting.label()
        hit = self._cache.get(key)
        if hit is None:
            hit = np.array([sim_metric(self.cluster, self.workload, setting, s, self.metric, truth=self.truth,
                                       config=self.config) for s in self.seeds])
            self._cache[key] = hit
        return hit

    def __call__(self, setting: WeightSetting) -> float:
        return float(self.samples(setting).mean())

    def seed_cv(self, setting: WeightSetting) -> float:
        """The simulator's own seed-to-seed CV of ``setting`` (``ddof = 1``)."""
        v = self.samples(setting)
        return float(np.std(v, ddof=1) / np.mean(v))


def noisy_objective(objective: Any, model: Any, *, rng_seed: int, seed_cv: float = 0.0) -> NoisyObjective:
    """``objective`` (a :class:`~agent.objectives.sim.SimObjective`: a cluster and a workload)
    measured with the noise ``model`` (a :class:`testbed.noise_model.NoiseModel`) predicts for a
    run of its workload's size, less the simulator's own spread ``seed_cv``."""
    from agent.objectives.sim import workload_context

    cv = extra_cv(model.cv(float(len(objective.workload)), float(objective.workload.duration_s)), seed_cv)
    return NoisyObjective(objective.cluster, objective.workload, noise_cv=cv, rng_seed=rng_seed,
                          metric=objective.metric, name=f"{objective.name}~noisy",
                          context=workload_context(objective.cluster, objective.workload))


class TrainingObjective:
    """A noisy objective with its truth beside it, for a training reward only (the ``true`` reward
    of agent.rl.rewards): the environment reads ``truth`` to pay for what a tuner would really get,
    the policy observes only the measurements. Never built by the evaluation or the live loop."""

    def __init__(self, measured: NoisyObjective, truth: Truth) -> None:
        self.measured = measured
        self.truth = truth
        self.name = measured.name

    def __call__(self, setting: WeightSetting) -> float:
        return self.measured(setting)

    @property
    def runs(self) -> int:
        return self.measured.runs

    def context(self) -> Mapping[str, float]:
        return self.measured.context()


class NoisySampler:
    """Training objectives of ``base`` (an ObjectiveSampler of SimObjectives) measured with noise;
    with ``truth_seeds`` >= 2 each carries its truth over that many seeds (:class:`TrainingObjective`).

    Training does not subtract each objective's own seed spread (that would cost ten extra runs per
    episode on a fresh generated member): its episodes are, if anything, slightly noisier than the
    evaluation's. Picklable, so SubprocVecEnv workers can rebuild it."""

    def __init__(self, base: Any, model: Any, truth_seeds: int = 0) -> None:
        if truth_seeds and truth_seeds < 2:
            raise AgentError(f"--truth-seeds must be 0 (no truth) or >= 2, got {truth_seeds}")
        self.base = base
        self.model = model
        self.truth_seeds = int(truth_seeds)

    def __call__(self, rng: np.random.Generator) -> NoisyObjective | TrainingObjective:
        objective = self.base(rng)
        noisy = noisy_objective(objective, self.model, rng_seed=int(rng.integers(2**31)))
        if not self.truth_seeds:
            return noisy
        truth = Truth(objective.cluster, objective.workload, metric=objective.metric, seeds=self.truth_seeds)
        return TrainingObjective(noisy, truth)
