"""``scoretune transfer-reach``: what a transfer prior could give at the first runs on a new task,
and how much of it a first pick by the reference run's facts gets.

Why: ``task-mixture``'s first profile is the best one of the training tasks whose reference-run
facts look like the new task's. Whether that can ever beat a search's first draw depends on two
things this measures on groups of tasks (a validation set, the held-out sets), noise-free on the
simulator, with the gap closed against the evaluation's oracle:

- what the prior holds: the best of its candidates per task (``pool``; a candidate better than
  the oracle counts as closing the whole gap, as no tuner is credited more), the best profile of the
  training task that in hindsight serves the new one best (``task match``: a perfect similarity
  measure), and fixed lists chosen knowing the group (``hindsight 1/2/3``: the bound of any
  task-blind list);
- what a first pick gets: ``learned-default`` and the mixture's first suggestion for every prior
  and facts width (agent.tuners.mixture itself, told the reference run and its facts).

Over those (prior, width) variants, the rank correlation of the first group's figure with each
other group's says whether choosing a variant on the first group (validation) predicts the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from agent.actions import ActionCodec
from agent.compute import Compute, run_tasks
from agent.errors import AgentError
from agent.evaluation.transfer_prior import ScoreJob, score_candidates
from agent.metrics import RUN_FACTS
from agent.tuners.mixture import TaskMixture
from agent.tuners.transfer import TransferPrior

SCHEMA = pa.schema([("group", pa.string()), ("task", pa.string()), ("prior", pa.string()),
                    ("row", pa.string()), ("gap_closed", pa.float64())])
HINDSIGHT = 3
"""Longest fixed list chosen in hindsight."""


@dataclass(frozen=True)
class Group:
    """Tasks judged together, at one simulator seed."""

    name: str
    seed: int
    tasks: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Group:
        """``NAME@SEED=TASK,TASK,...``."""
        head, sep, tasks = text.partition("=")
        name, at, seed = head.partition("@")
        names = tuple(t for t in tasks.split(",") if t)
        if not (sep and at and name and seed.isdigit() and names):
            raise AgentError(f"--group {text!r}: expected NAME@SEED=TASK,TASK,...")
        return cls(name, int(seed), names)


def _first_pick(prior: TransferPrior, codec: ActionCodec, width: float | None, facts: Sequence[float],
                reference: float) -> np.ndarray:
    tuner = TaskMixture(prior, codec, width=width)
    tuner.observe(dict(zip(RUN_FACTS, facts, strict=True)))
    tuner.tell(codec.reference_action(), reference)
    return tuner.suggest()


def measure_reach(priors: Mapping[str, TransferPrior], groups: Sequence[Group], oracle: Mapping[str, float], *,
                  widths: Sequence[float] = (0.3, 0.5, 1.0, 2.0), metric: str = "mean", oracle_runs: int = 500,
                  compute: Compute = Compute()) -> pd.DataFrame:
    """One row per (group, task, prior, row): the gap closed (0 = the default weights, 1 = the oracle)."""
    codec = ActionCodec()
    missing = [f"{t}@{g.seed}" for g in groups for t in g.tasks if f"{t}@{g.seed}:{oracle_runs}:{metric}" not in oracle]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise AgentError(f"no oracle for {missing[0]}{more} in the --oracle caches; compute it with "
                         "`scoretune evaluate --scenarios TASK --sim-seed SEED --oracle-only`")
    pool: dict[tuple[float, ...], int] = {}
    for prior in priors.values():
        for a in prior.actions:
            pool.setdefault(_key(a), len(pool))
    jobs = [ScoreJob(t, tuple(pool), g.seed, metric) for g in groups for t in g.tasks]
    results = iter(run_tasks(score_candidates, jobs, compute))
    rows: list[dict[str, object]] = []
    hindsight: list[dict[str, object]] = []  # after every group's first picks, as the report lists them
    for g in groups:
        closed_all = []
        for task in g.tasks:
            relative, facts, reference = next(results)
            best = oracle[f"{task}@{g.seed}:{oracle_runs}:{metric}"]
            gap = reference - min(best, reference)
            closed = np.clip((reference - reference * np.asarray(relative)) / gap, 0.0, 1.0) if gap > 0 else \
                np.zeros(len(relative))
            closed_all.append(closed)
            add = [("pool", "", float(closed.max()))]
            for name, prior in priors.items():
                index = [pool[_key(a)] for a in prior.actions]
                each_best = [index[int(i)] for i in np.argmin(prior.relative, axis=0)]
                add.append(("task match", name, float(closed[each_best].max())))
                add.append(("learned-default", name, float(closed[pool[_key(prior.learned_default())]])))
                for width in (None, *widths):
                    pick = _first_pick(prior, codec, width, facts, reference)
                    label = "mixture, no facts" if width is None else f"mixture, facts width {width:g}"
                    add.append((label, name, float(closed[pool[_key(pick)]])))
            rows += [{"group": g.name, "task": task, "prior": p, "row": r, "gap_closed": v} for r, p, v in add]
        for k, best_so_far in enumerate(_hindsight(np.stack(closed_all, axis=1)), start=1):
            hindsight += [{"group": g.name, "task": t, "prior": "", "row": f"hindsight {k}", "gap_closed": float(v)}
                          for t, v in zip(g.tasks, best_so_far, strict=True)]
    return pa.Table.from_pylist(rows + hindsight, schema=SCHEMA).to_pandas()


def _key(action: np.ndarray) -> tuple[float, ...]:
    return tuple(float(x) for x in np.asarray(action, dtype=np.float32).round(6))


def _hindsight(closed: np.ndarray) -> list[np.ndarray]:
    """Per task, the best-so-far gap closed of the greedy fixed lists of 1..HINDSIGHT profiles
    chosen knowing the group (``closed``: candidates x tasks): each next profile raises most the
    group's mean."""
    best = np.zeros(closed.shape[1])
    lists = []
    for _ in range(HINDSIGHT):
        best = np.maximum(best, closed[int(np.argmax(np.maximum(best[None, :], closed).mean(axis=1)))])
        lists.append(best)
    return lists


def summary(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(mean gap closed (%) per row and prior x group, the rank correlation over the first-pick
    variants of the first group's figure with each other group's)."""
    groups = list(dict.fromkeys(frame["group"]))
    table = (frame.groupby(["row", "prior", "group"], sort=False)["gap_closed"].mean().mul(100.0)
             .unstack("group")[groups].reset_index())
    variants = table[table["row"].str.startswith("mixture") | (table["row"] == "learned-default")]
    corr = pd.DataFrame([{"chosen on": groups[0], "judged on": g, "variants": len(variants),
                          "rank correlation": float(variants[groups[0]].rank().corr(variants[g].rank()))}
                         for g in groups[1:]])
    return table, corr


def load_oracles(paths: Sequence[Path]) -> dict[str, float]:
    """The evaluations' noise-free oracle caches (``DIR/oracle.json``), merged."""
    from agent.evaluation.tables import read_oracle_cache

    merged: dict[str, float] = {}
    for path in paths:
        if not Path(path).is_file():
            raise AgentError(f"{path}: no oracle cache here (an evaluation directory's oracle.json)")
        merged.update({k: float(v) for k, v in read_oracle_cache(Path(path)).items() if isinstance(v, int | float)})
    return merged
