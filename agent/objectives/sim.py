"""Objectives over the scenario library: a scenario of ``testbed.scenarios`` on the simulator.

Training and evaluation run each profile through the simulator's fast in-memory ``evaluate``
(no run directory). Within one objective every run uses the same seed, so two runs differ only by
their profile (common random numbers), and results are memoised by profile: the simulator is
deterministic given its seed, so a repeated profile costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.actions import WeightSetting
from agent.errors import AgentError, InputError
from agent.metrics import DEFAULT_TIMEOUT_S, metric_from_summary, run_facts
from agent.objectives.protocol import ObjectiveSampler

if TYPE_CHECKING:
    from testbed.generated import Family

log = logging.getLogger(__name__)


def workload_context(cluster: Any, workload: Any) -> dict[str, float]:
    """The scenario facts of the full-information observation (never used by the limited one)."""
    nodes = list(getattr(cluster, "nodes", ()) or ())
    duration = max(float(workload.duration_s), 1e-9)
    return {
        "nodes": float(len(nodes)),
        "cpu_cores": sum(n.cpu_milli for n in nodes) / 1000.0,
        "memory_gib": sum(n.memory_bytes for n in nodes) / 2**30,
        "requests_per_s": len(workload) / duration,
        "functions": float(len(workload.functions)),
        "duration_s": float(workload.duration_s),
    }


def _scenarios():
    from testbed import scenarios

    return scenarios


def split_names(split: str) -> list[str]:
    """The scenario names of a split (``train`` or ``test``)."""
    mod = _scenarios()
    names = [s.name for s in mod.scenarios(split)]
    if not names:
        raise AgentError(f"split {split!r} has no scenarios")
    return names


def scenario_by_name(name: str) -> Any:
    return _scenarios().get_scenario(name)


@lru_cache(maxsize=32)
def _materialised(name: str) -> tuple[Any, Any, Any]:
    """(scenario, ClusterSpec, Workload), built once per process."""
    from testbed.cluster import load_cluster

    mod = _scenarios()
    scenario = mod.get_scenario(name)
    cluster = load_cluster(scenario.cluster)
    workload = mod.build_workload(scenario)
    return scenario, cluster, workload


def sim_run(cluster: Any, workload: Any, setting: WeightSetting, seed: int, metric: str, *, truth: Any = None,
            config: Any = None) -> tuple[float, dict[str, float]]:
    """One simulator run of ``setting`` with ``seed``: the latency metric (seconds, > 0) and the
    run's facts (agent.metrics.run_facts). ``config`` (testbed.sim.engine.SimConfig) is the known
    deployment (its platform); ``truth`` (testbed.sim.mismatch.Truth) runs the perturbed cluster
    in place of ``cluster``, with the deployment it was drawn for."""
    return measured_run(sim_summary(cluster, workload, setting, seed, truth=truth, config=config), metric)


def measured_run(summary: Mapping[str, Any], metric: str) -> tuple[float, dict[str, float]]:
    """A simulator summary's latency metric (seconds, > 0) and facts (agent.metrics.run_facts)."""
    timeout = float(summary.get("timeout_s") or DEFAULT_TIMEOUT_S)
    return max(metric_from_summary(summary, metric, timeout), 1e-6), run_facts(summary)


def mismatch_truth(mismatch: str, scenario: str, cluster: Any, seed: int, *, config: Any = None) -> Any:
    """The perturbed truth (testbed.sim.mismatch.Truth) of ``scenario``'s task ``seed`` at level
    ``mismatch`` (None for none): drawn from the scenario's name and the seed, so it is fixed
    before any method runs and the same for every method. ``config`` is the known deployment
    (what serves the functions: a fact the user's view has too), which the truth perturbs."""
    if mismatch == "none":
        return None
    import zlib

    from testbed.sim.backend import suite_specs
    from testbed.sim.engine import SimConfig
    from testbed.sim.mismatch import level, perturb

    return perturb(cluster, suite_specs(), level(mismatch), zlib.crc32(scenario.encode()) + int(seed),
                   config=config or SimConfig())


def sim_summary(cluster: Any, workload: Any, setting: WeightSetting, seed: int, *, truth: Any = None,
                config: Any = None, where: bool = False) -> dict[str, Any]:
    """The simulator's summary of one run (with the per-node breakdown when ``where``)."""
    from testbed.sim import evaluate

    if truth is None:
        return evaluate(cluster, workload, setting.to_profile(), seed=int(seed), config=config, where=where)
    return evaluate(truth.cluster, workload, setting.to_profile(), seed=int(seed), functions=truth.functions,
                    config=truth.config, where=where)


def sim_metric(cluster: Any, workload: Any, setting: WeightSetting, seed: int, metric: str, *, truth: Any = None,
               config: Any = None) -> float:
    """One simulator run of ``setting`` with ``seed``: the latency metric (seconds, > 0)."""
    return sim_run(cluster, workload, setting, seed, metric, truth=truth, config=config)[0]


class SimObjective:
    """A cluster and a workload on the simulator with one seed; lower is better (seconds)."""

    def __init__(self, cluster: Any, workload: Any, seed: int = 0, metric: str = "mean", *, name: str | None = None,
                 truth: Any = None, config: Any = None) -> None:
        self.cluster = cluster
        """The cluster as its spec says (what a user's view is built from: agent.objectives.view)."""
        self.config = config
        """testbed.sim.engine.SimConfig: the known deployment, what serves the functions (None: Knative's)."""
        self.workload = workload
        self.seed = int(seed)
        self.metric = metric
        self.truth = truth
        """testbed.sim.mismatch.Truth: what runs in place of ``cluster`` (None: the spec as written)."""
        self.name = name or f"{getattr(cluster, 'name', 'cluster')}/{workload.name}@{seed}"
        self._cache: dict[str, tuple[float, dict[str, float]]] = {}
        self._where: dict[str, dict[str, Any]] = {}
        self.collect_where = False
        """Keep each run's per-node breakdown as it runs (the evaluation's runner sets it for a
        tuner that reads it)."""
        self.runs = 0

    def _run(self, setting: WeightSetting) -> tuple[float, dict[str, float]]:
        key = setting.label()
        hit = self._cache.get(key)
        if hit is None:
            if self.collect_where:  # one run gives the metric, the facts and the breakdown
                summary = sim_summary(self.cluster, self.workload, setting, self.seed, truth=self.truth, config=self.config, where=True)
                self._where[key] = summary["where"]
                hit = measured_run(summary, self.metric)
            else:
                hit = sim_run(self.cluster, self.workload, setting, self.seed, self.metric, truth=self.truth,
                              config=self.config)
            self.runs += 1
            self._cache[key] = hit
        return hit

    def where(self, setting: WeightSetting) -> dict[str, Any]:
        """The per-node breakdown of ``setting``'s run (loadgen.where): kept from the run itself with
        ``collect_where`` (set for a tuner that reads it), else the same deterministic run again."""
        key = setting.label()
        if key not in self._where:
            self._where[key] = sim_summary(self.cluster, self.workload, setting, self.seed, truth=self.truth,
                                           config=self.config, where=True)["where"]
        return self._where[key]

    def __call__(self, setting: WeightSetting) -> float:
        return self._run(setting)[0]

    def facts(self, setting: WeightSetting) -> Mapping[str, float]:
        """The facts of ``setting``'s run (agent.metrics.RUN_FACTS), from the same memoised run."""
        return self._run(setting)[1]

    def context(self) -> Mapping[str, float]:
        return workload_context(self.cluster, self.workload)


class ScenarioObjective(SimObjective):
    """A scenario of ``testbed.scenarios`` on the simulator, with one seed."""

    def __init__(self, scenario: str, seed: int = 0, metric: str = "mean") -> None:
        _, cluster, workload = _materialised(scenario)
        super().__init__(cluster, workload, seed, metric, name=f"{scenario}@{seed}")
        self.scenario_name = scenario


USER_SCENARIO_SEPARATOR = "="


@lru_cache(maxsize=32)
def load_user_scenario(spec: str) -> tuple[Any, Any]:
    """``CLUSTER.yaml=WORKLOAD.parquet`` (a user's own cluster spec and workload) as (ClusterSpec,
    Workload), loaded once per process; a bad path or file is one InputError naming the file."""
    from loadgen.workload import read_workload
    from testbed.cluster import load_cluster

    cluster, sep, workload = spec.partition(USER_SCENARIO_SEPARATOR)
    if not sep or not cluster or not workload:
        raise AgentError(f"--scenario {spec!r}: expected CLUSTER.yaml=WORKLOAD.parquet")
    for path, what in ((cluster, "cluster spec"), (workload, "workload")):
        if not Path(path).exists():
            raise InputError(f"no such {what} file (--scenario CLUSTER.yaml=WORKLOAD.parquet)", file=path)
    return load_cluster(cluster), read_workload(workload)


def scenario_objective(scenario: str, seed: int, metric: str = "mean") -> SimObjective:
    """A library scenario by name; ``gen-N`` / ``gentrace-N``: member N of the synthetic or the
    trace-window generated family (validation uses N >= :data:`GENERATED_TRAIN_SEEDS`, which
    training never draws); or a user's ``CLUSTER.yaml=WORKLOAD.parquet``."""
    from testbed.generated import PREFIXES

    if USER_SCENARIO_SEPARATOR in scenario:
        cluster, workload = load_user_scenario(scenario)
        return SimObjective(cluster, workload, seed, metric, name=f"{scenario}@{seed}")

    for family, prefix in PREFIXES.items():
        if scenario.startswith(prefix):
            if not scenario[len(prefix):].isdigit():
                raise AgentError(f"scenario {scenario!r}: a generated scenario is {prefix}N with an integer N >= 0")
            return GeneratedObjective(int(scenario[len(prefix):]), seed, metric, family=family)
    return ScenarioObjective(scenario, seed, metric)


class SplitSampler:
    """Draws a training objective: a scenario of the split uniformly, and a seed. Picklable, so
    SubprocVecEnv workers can rebuild it."""

    def __init__(self, split: str, metric: str = "mean", names: Sequence[str] | None = None, seeds: int = 1000) -> None:
        self.split = split
        self.metric = metric
        self.names = list(names) if names else split_names(split)
        self.seeds = seeds

    def __call__(self, rng: np.random.Generator) -> ScenarioObjective:
        name = self.names[int(rng.integers(len(self.names)))]
        return ScenarioObjective(name, seed=int(rng.integers(self.seeds)), metric=self.metric)


#: Generated-scenario seeds used in training are below this; validation draws from above it.
GENERATED_TRAIN_SEEDS = 1_000_000


class GeneratedObjective(SimObjective):
    """A member of ``testbed.generated``'s family on the simulator, with one simulator seed."""

    def __init__(self, family_seed: int, seed: int = 0, metric: str = "mean", *, family: Family = "synth") -> None:
        from testbed.generated import generated_scenario

        g = generated_scenario(family_seed, family)
        super().__init__(g.cluster, g.workload, seed, metric, name=f"{g.name}@{seed}")
        self.scenario_name = g.name


class MixedSampler:
    """A training objective: with probability ``generated`` a fresh member of the generated family
    (``testbed.generated``, seeds below :data:`GENERATED_TRAIN_SEEDS`), otherwise a scenario of the
    split as :class:`SplitSampler` draws it. A generated member is of the small heterogeneous family
    (``gensmall``: the lab's regime of few small nodes) with probability ``small``, otherwise of the
    trace-window family with probability ``traces``, else of the synthetic one. Picklable, like
    :class:`SplitSampler`."""

    def __init__(self, split: str, generated: float, metric: str = "mean", names: Sequence[str] | None = None,
                 seeds: int = 1000, traces: float = 0.0, small: float = 0.0) -> None:
        if not 0.0 <= generated <= 1.0:
            raise AgentError(f"the generated share must be in [0, 1], got {generated}")
        if not 0.0 <= traces <= 1.0:
            raise AgentError(f"the generated-traces share must be in [0, 1], got {traces}")
        if not 0.0 <= small <= 1.0:
            raise AgentError(f"the generated-small share must be in [0, 1], got {small}")
        self.generated = float(generated)
        self.traces = float(traces)
        self.small = float(small)
        self.metric = metric
        self.seeds = seeds
        self.split = SplitSampler(split, metric, names, seeds) if generated < 1.0 else None

    def __call__(self, rng: np.random.Generator) -> SimObjective:
        if self.split is None or rng.random() < self.generated:
            # the family is drawn only when asked for, so a run without traces draws
            # exactly the sequence it drew before the trace family existed (its command reproduces)
            # (and likewise the small family: a run without it draws what it drew before it existed)
            family: Family = "small" if self.small > 0.0 and rng.random() < self.small else "synth"
            if family == "synth" and self.traces > 0.0 and rng.random() < self.traces:
                family = "trace"
            return GeneratedObjective(int(rng.integers(GENERATED_TRAIN_SEEDS)), seed=int(rng.integers(self.seeds)),
                                      metric=self.metric, family=family)
        return self.split(rng)


def split_sampler(split: str, *, metric: str = "mean", names: Sequence[str] | None = None,
                  generated: float = 0.0, traces: float = 0.0, small: float = 0.0) -> ObjectiveSampler:
    """Training objectives from a split, mixed with the generated families when ``generated > 0``
    (``small``: the share of generated members from the small heterogeneous family; ``traces``: the
    share of the others that replay a trace window)."""
    if traces != 0.0 and generated == 0.0:
        raise AgentError("a generated-traces share needs a generated share > 0 (--generated)")
    if small != 0.0 and generated == 0.0:
        raise AgentError("a generated-small share needs a generated share > 0 (--generated)")
    if generated != 0.0:  # MixedSampler refuses a share outside [0, 1]
        return MixedSampler(split, generated, metric, names, traces=traces, small=small)
    return SplitSampler(split, metric, names)
