"""How much a tuner can win on each task: default-weights latency against the oracle's.

Why: a learned tuner transfers what its training tasks teach; if they hold little headroom (the
default weights are nearly optimal there), there is little to learn, however long it trains. This
measures it on the simulator for the training split, the generated families (members training
draws and validation members), the held-out split and the lab clusters (with the lab workload),
with the oracle the evaluation uses (a TPE search of ``runs`` runs, :func:`runner.oracle_runs`),
plus the facts that make a cluster heterogeneous (node speeds, image caches, taints).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from agent.actions import ActionCodec
from agent.compute import Compute, run_tasks
from agent.evaluation.runner import oracle_runs

LAB_PREFIX = "lab:"
"""``lab:CLUSTER``: a lab cluster (testbed/clusters) with the lab workload, as the lab table runs it."""

SCHEMA = pa.schema([
    ("group", pa.string()), ("task", pa.string()), ("nodes", pa.int64()), ("speed_ratio", pa.float64()),
    ("image_sets", pa.int64()), ("tainted_nodes", pa.int64()), ("requests_per_s", pa.float64()),
    ("default_s", pa.float64()), ("oracle_s", pa.float64()), ("headroom_pct", pa.float64()),
])


@dataclass(frozen=True)
class _Task:
    group: str
    task: str
    runs: int
    metric: str


def _objective(task: str, metric: str) -> Any:
    from agent.objectives.sim import SimObjective, scenario_objective

    if task.startswith(LAB_PREFIX):
        from testbed.cluster import load_cluster
        from testbed.scenarios import lab_workload

        return SimObjective(load_cluster(task[len(LAB_PREFIX):]), lab_workload(0), 0, metric, name=task)
    return scenario_objective(task, 0, metric)


def _measure(job: _Task) -> dict[str, Any]:
    codec = ActionCodec()
    objective = _objective(job.task, job.metric)
    _, metrics = oracle_runs(objective, codec, job.runs, seed=0)
    default = float(metrics[0])  # index 0 is the reference: the default weights
    best = float(min(metrics))
    nodes = list(objective.cluster.nodes)
    speeds = [n.speed for n in nodes]
    return {
        "group": job.group, "task": job.task, "nodes": len(nodes),
        "speed_ratio": max(speeds) / min(speeds),
        "image_sets": len({n.images for n in nodes}), "tainted_nodes": sum(1 for n in nodes if n.taints),
        "requests_per_s": len(objective.workload) / max(objective.workload.duration_s, 1e-9),
        "default_s": default, "oracle_s": best, "headroom_pct": 100.0 * (default - best) / default,
    }


def default_groups(generated: int = 20, validation: int = 10) -> dict[str, list[str]]:
    """The groups the report covers: what training draws from, and what it is judged on."""
    from agent.evaluation.lab_table import LAB_SCENARIOS
    from agent.objectives.sim import GENERATED_TRAIN_SEEDS, split_names
    from testbed.generated import SMALL_HELD_OUT_SEEDS

    val = range(GENERATED_TRAIN_SEEDS, GENERATED_TRAIN_SEEDS + validation)
    return {
        "train split": split_names("train"),
        "gen (training members)": [f"gen-{k}" for k in range(generated)],
        "gentrace (training members)": [f"gentrace-{k}" for k in range(generated)],
        "gen (validation members)": [f"gen-{k}" for k in val],
        "gentrace (validation members)": [f"gentrace-{k}" for k in val],
        "held-out split": split_names("test"),
        "gensmall (training members)": [f"gensmall-{k}" for k in range(generated)],
        "gensmall (validation members)": [f"gensmall-{k}" for k in val],
        "gensmall (held-out members)": [f"gensmall-{k}" for k in SMALL_HELD_OUT_SEEDS],
        "lab clusters (sim)": [f"{LAB_PREFIX}{c}" for c in LAB_SCENARIOS],
    }


def measure_headroom(groups: dict[str, Sequence[str]], *, runs: int = 300, metric: str = "mean",
                     compute: Compute = Compute()) -> pd.DataFrame:
    """One row per task (in the groups' order): its heterogeneity facts and headroom."""
    jobs = [_Task(g, t, runs, metric) for g, tasks in groups.items() for t in tasks]
    rows = run_tasks(_measure, jobs, compute)
    return pa.Table.from_pylist(rows, schema=SCHEMA).to_pandas()


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per group: tasks, headroom median / min / max, tasks under 5 %, median speed ratio."""
    out = []
    for group, g in frame.groupby("group", sort=False):
        h = g["headroom_pct"].to_numpy()
        out.append({"group": group, "tasks": len(g), "headroom median %": float(np.median(h)),
                    "min %": float(h.min()), "max %": float(h.max()), "tasks under 5 %": int((h < 5).sum()),
                    "speed ratio (median)": float(g["speed_ratio"].median()),
                    "tainted nodes (median)": float(g["tainted_nodes"].median())})
    return pd.DataFrame(out)


__all__ = ["LAB_PREFIX", "default_groups", "measure_headroom", "summary"]
