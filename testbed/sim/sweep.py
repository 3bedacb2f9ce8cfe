"""Random weight vectors through the simulator: how much the weights matter on a scenario.

Weights are drawn the way the tuners' action box maps to profiles (``docs/method.md``): each
score plugin is disabled with probability 0.1, else its weight is log-uniform over 1..100; the
NodeResourcesFit strategy is LeastAllocated, MostAllocated, or a RequestedToCapacityRatio blend
``[(0, 10-k), (100, k)]`` for k uniform in 0..10. The objective is the mean latency with failed
requests counted at the client timeout (what the tuners minimise), reported beside the plain
mean and p95 over successful requests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from testbed.sim.backend import evaluate

STRATEGY_LEVELS = 10


def random_profile(rng: np.random.Generator) -> tuple[Any, dict[str, Any]]:
    """A random profile and its description (weights, strategy)."""
    from testbed.scheduler.config import SCORE_PLUGINS, profile_from_weights

    weights: dict[str, int | None] = {}
    for name in SCORE_PLUGINS:
        u = float(rng.random())
        weights[name] = None if u < 0.1 else int(round(100 ** ((u - 0.1) / 0.9)))
        if weights[name] == 0:
            weights[name] = 1
    k = int(rng.integers(0, STRATEGY_LEVELS + 1))
    if k == 0:
        prof = profile_from_weights(weights, strategy="LeastAllocated")
        strategy = "LeastAllocated"
    elif k == STRATEGY_LEVELS:
        prof = profile_from_weights(weights, strategy="MostAllocated")
        strategy = "MostAllocated"
    else:
        prof = profile_from_weights(weights, strategy="RequestedToCapacityRatio", shape=[(0, STRATEGY_LEVELS - k), (100, k)])
        strategy = f"RequestedToCapacityRatio[(0,{STRATEGY_LEVELS - k}),(100,{k})]"
    return prof, {"weights": weights, "strategy": strategy}


def objective(summary: dict[str, Any]) -> float:
    """Mean latency with every failed request at the timeout (seconds)."""
    count = int(summary["count"])
    ok = int(summary["ok"])
    timeout = float(summary["timeout_s"])
    if count == 0:
        return float("nan")
    mean_ok = float(summary["latency_mean_s"] or 0.0)
    return (mean_ok * ok + timeout * (count - ok)) / count


def sweep(
    cluster: Any,
    workload: Any,
    *,
    samples: int,
    seed: int = 0,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Evaluate the default profile and ``samples`` random ones (same simulation seed for all, so
    runs differ only by profile); report spreads and the default's rank (1 = best objective)."""
    from functions.errors import InputError
    from testbed.scheduler.config import default_profile

    if len(workload) == 0:
        raise InputError(f"workload {getattr(workload, 'name', '')!r} has no requests: there is nothing to compare "
                         "the profiles on", field="t_s")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    default = evaluate(cluster, workload, default_profile(), seed=seed)
    rows.append({"label": "default", "objective_s": objective(default), "mean_s": default["latency_mean_s"],
                 "p95_s": default["latency_p95_s"], "failed": default["count"] - default["ok"]})
    for i in range(samples):
        prof, desc = random_profile(rng)
        s = evaluate(cluster, workload, prof, seed=seed)
        row = {"label": f"random-{i}", **desc, "objective_s": objective(s), "mean_s": s["latency_mean_s"],
               "p95_s": s["latency_p95_s"], "failed": s["count"] - s["ok"]}
        rows.append(row)
        if progress is not None:
            progress(i, row)
    obj = np.array([r["objective_s"] for r in rows])
    p95 = np.array([r["p95_s"] if r["p95_s"] is not None else np.nan for r in rows], dtype=float)
    mean = np.array([r["mean_s"] if r["mean_s"] is not None else np.nan for r in rows], dtype=float)
    rank = int(1 + np.sum(obj < obj[0]))
    best = int(np.argmin(obj))
    return {
        "cluster": getattr(cluster, "name", None),
        "workload": getattr(workload, "name", None),
        "requests": len(workload),
        "samples": samples,
        "seed": seed,
        "default": rows[0],
        "default_rank": rank,
        "of": len(rows),
        "objective_s": {"min": float(np.nanmin(obj)), "median": float(np.nanmedian(obj)), "max": float(np.nanmax(obj))},
        "objective_max_over_min": float(np.nanmax(obj) / np.nanmin(obj)),
        "mean_s": {"min": float(np.nanmin(mean)), "median": float(np.nanmedian(mean)), "max": float(np.nanmax(mean))},
        "mean_max_over_min": float(np.nanmax(mean) / np.nanmin(mean)),
        "p95_s": {"min": float(np.nanmin(p95)), "median": float(np.nanmedian(p95)), "max": float(np.nanmax(p95))},
        "best": rows[best],
        "runs": rows,
    }
