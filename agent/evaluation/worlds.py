"""What one task's experiments measure and are judged by (agent.evaluation.study): the
noise-free world (each seed its own objective, a measurement is the truth) and the noisy one (fresh
seeds and a calibrated error, the truth a mean over seeds no measurement draws). With a mismatch
level, both run the scenario perturbed as no twin is, and a tuner sees only the view of the
scenario as written (agent.objectives.view).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.evaluation.runner import oracle_runs, oracle_top
from agent.objectives.protocol import Objective
from agent.objectives.sim import mismatch_truth

Protocol = Task = Any  # agent.evaluation.study's, which imports this module (no cycle)

ObjectiveFactory = Callable[[str, int, str], Objective]


@dataclass
class World:
    """What one task's experiments measure and are judged by."""

    measurement: Callable[[int, int], Objective]
    """``(seed, budget)`` → the objective a tuner measures."""
    truth: Callable[[WeightSetting], float]
    oracle: float
    oracle_cache: Any
    context: Mapping[str, float] = field(default_factory=dict)
    noise: Mapping[str, float] = field(default_factory=lambda: {"noise_cv": 0.0, "lab_cv": 0.0, "seed_cv": 0.0})
    view: Any = None
    """What a tuner may know before its first run (agent.objectives.view.UserView); built from the
    scenario as written, never from its perturbed truth."""


def deployment(p: Protocol) -> Any:
    """The simulator's deployment of every run of the protocol: what serves the functions (a fact
    the user knows, in their view too), apart from the mismatch truth (what no API shows)."""
    from testbed.sim.engine import SimConfig

    return SimConfig(platform=p.platform)


def _objective_seed(p: Protocol, seed: int) -> int:
    """The simulator seed of seed ``seed``'s objective (noise-free): the seed, or ``--sim-seed``."""
    return seed if p.sim_seed is None else p.sim_seed


def _exact_world(task: Task, seed: int, factory: ObjectiveFactory, codec: ActionCodec) -> World:
    from agent.objectives.view import objective_view

    p = task.protocol
    objective = factory(task.scenario, _objective_seed(task.protocol, seed), p.metric)
    view = objective_view(objective, platform=p.platform)
    if view is not None and getattr(p, "view", "own") == "next":
        view = wrong_view(task.scenario, objective, factory, p)
    if view is not None:  # a simulator objective (a test's analytic function has no cluster to run)
        objective.config = deployment(p)
        objective.truth = mismatch_truth(p.mismatch, task.scenario, objective.cluster, _objective_seed(p, seed),
                                         config=objective.config)
    if task.oracle_known is not None:
        oracle = float(task.oracle_known)
    elif p.oracle_runs > 0:
        oracle = min(oracle_runs(objective, codec, p.oracle_runs, _objective_seed(task.protocol, seed))[1])
    else:
        oracle = math.inf
    return World(lambda s, b: objective, objective, oracle, oracle, dict(objective.context()), view=view)


def next_member(scenario: str) -> str:
    """``gensmall-41`` -> ``gensmall-42``: the next member of a generated family."""
    from testbed.generated import PREFIXES

    for prefix in PREFIXES.values():
        if scenario.startswith(prefix) and scenario[len(prefix):].isdigit():
            return f"{prefix}{int(scenario[len(prefix):]) + 1}"
    from agent.errors import AgentError

    raise AgentError(f"--view next: {scenario!r} is not a member of a generated family (gen-N, gensmall-N, gentrace-N)")


def wrong_view(scenario: str, objective: Objective, factory: ObjectiveFactory, p: Protocol) -> Any:
    """The view a tuner gets under ``--view next``: the task's workload on the next family member's
    cluster as the API shows it (another cluster, wrongly given)."""
    from agent.objectives.view import user_view

    other = factory(next_member(scenario), 0, p.metric)
    return user_view(other.cluster, objective.workload, p.metric, platform=p.platform)


def _noisy_world(task: Task, factory: ObjectiveFactory, codec: ActionCodec) -> World:
    from agent.objectives.noisy import NoisyObjective, Truth, extra_cv
    from agent.objectives.sim import workload_context
    from agent.objectives.view import objective_view
    from testbed.noise_model import NoiseModel

    p = task.protocol
    base = factory(task.scenario, 0, p.metric)
    base.config = deployment(p)
    perturbed = mismatch_truth(p.mismatch, task.scenario, base.cluster, 0, config=base.config)
    if perturbed is not None:
        base.truth = perturbed
    truth = Truth(base.cluster, base.workload, metric=p.metric, seeds=p.truth_seeds, truth=perturbed, config=base.config)
    seed_cv = truth.seed_cv(codec.reference())
    lab_cv = NoiseModel.from_dict(p.noise, metric=p.metric).cv(float(len(base.workload)), float(base.workload.duration_s))
    noise_cv = extra_cv(lab_cv, seed_cv)
    if task.oracle_known is not None:
        top = [codec.decode(np.asarray(a, dtype=np.float32)) for a in task.oracle_known]
    else:
        top = oracle_top(base, codec, p.oracle_runs) if p.oracle_runs > 0 else []
    oracle = min((truth(s) for s in top), default=math.inf)
    context = workload_context(base.cluster, base.workload)

    def measurement(seed: int, budget: int) -> Objective:
        return NoisyObjective(base.cluster, base.workload, noise_cv=noise_cv, rng_seed=seed * 1009 + budget,
                              metric=p.metric, name=f"{task.scenario}~noisy", context=context, truth=perturbed,
                              config=base.config)

    return World(measurement, truth, oracle, [codec.encode(s).tolist() for s in top], context,
                 {"noise_cv": noise_cv, "lab_cv": lab_cv, "seed_cv": seed_cv},
                 view=objective_view(base, platform=p.platform))


def _worlds(task: Task, factory: ObjectiveFactory, codec: ActionCodec) -> Iterator[tuple[tuple[int, ...], World]]:
    if task.protocol.exact:
        for seed in task.seeds:
            yield (seed,), _exact_world(task, seed, factory, codec)
    else:
        yield task.seeds, _noisy_world(task, factory, codec)
