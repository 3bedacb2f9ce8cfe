"""``scoretune transfer-prior``: what the training tasks say about profiles, for the transfer baselines.

Per training task (the training split's scenarios at simulator seed 0 and members of the generated
families at seeds training draws from, never the held-out split or validation seeds), a TPE search
of ``runs`` runs; the candidates are the default and equal weights and every task's ``top`` best
profiles; every candidate is then run on every task, and its latency divided by the default
weights' on that task is the prior (agent.tuners.transfer.TransferPrior). Tasks run as tasks of
agent.compute (a process pool or Ray).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent.actions import ActionCodec
from agent.compute import Compute, run_tasks
from agent.evaluation.runner import oracle_top
from agent.metrics import RUN_FACTS
from agent.provenance import provenance
from agent.tuners.transfer import TransferPrior


@dataclass(frozen=True)
class _Search:
    task: str
    runs: int
    top: int


@dataclass(frozen=True)
class ScoreJob:
    """Every candidate of ``actions`` on one task at one simulator seed."""

    task: str
    actions: tuple[tuple[float, ...], ...]
    seed: int = 0
    metric: str = "mean"


def _search(job: _Search) -> list[list[float]]:
    """The task's ``top`` best profiles of a TPE search (the oracle's search, tuner seed 20 000)."""
    from agent.objectives.sim import scenario_objective

    codec = ActionCodec()
    best = oracle_top(scenario_objective(job.task, 0), codec, job.runs, seed=10_000, top=job.top)
    return [codec.encode(s).astype(float).round(6).tolist() for s in best]


def score_candidates(job: ScoreJob) -> tuple[list[float], list[float], float]:
    """Every candidate's latency relative to the default weights' on the task, the facts of the
    default weights' run there, and that run's latency (the prior's column; agent.evaluation.reach)."""
    from agent.objectives.sim import scenario_objective

    codec = ActionCodec()
    objective = scenario_objective(job.task, job.seed, job.metric)
    reference = objective(codec.reference())
    facts = objective.facts(codec.reference())
    return ([objective(codec.decode(np.asarray(a, dtype=np.float32))) / reference for a in job.actions],
            [float(facts[k]) for k in RUN_FACTS], reference)


def training_tasks(generated: int, small: int = 0) -> list[str]:
    """The training split, the first ``generated`` members of the gen and gentrace families and the
    first ``small`` of gensmall (members training draws from: never validation or held-out seeds)."""
    from agent.objectives.sim import split_names

    return [*split_names("train"), *(f"gen-{k}" for k in range(generated)),
            *(f"gentrace-{k}" for k in range(generated)), *(f"gensmall-{k}" for k in range(small))]


def build_prior(tasks: Sequence[str], *, runs: int = 60, top: int = 5, compute: Compute = Compute(),
                command: str = "") -> TransferPrior:
    codec = ActionCodec()
    found = run_tasks(_search, [_Search(t, runs, top) for t in tasks], compute)
    pool: dict[tuple[float, ...], None] = {tuple(codec.reference_action().astype(float).round(6)): None,
                                           tuple(codec.encode(codec.equal()).astype(float).round(6)): None}
    for actions in found:
        for a in actions:
            pool.setdefault(tuple(a), None)
    candidates = tuple(pool)
    scored = run_tasks(score_candidates, [ScoreJob(t, candidates) for t in tasks], compute)
    return TransferPrior(np.asarray(candidates, dtype=np.float32),
                         np.asarray([column for column, _, _ in scored], dtype=np.float64).T,
                         list(tasks), {"runs": runs, "top": top, "command": command, **provenance()},
                         np.asarray([facts for _, facts, _ in scored], dtype=np.float64))
