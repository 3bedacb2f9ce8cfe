"""Where the twin's trust bounds come from (``scoretune twin trust``; issue 44, item 4).

The twin tuner stops following its twin when the twin cannot explain what it saw: a run whose
change against the reference it predicted badly, or a (function, node) cell that node speed x
function work cannot predict from the other cells (``agent.tuners.twin``). How bad is "badly" is
a bound, and a bound chosen on the tasks it is judged on would be tuned to them: it is chosen here,
on validation tasks (``docs/results/twin/validation-tasks``: seeds no training and no held-out
result used), as the 95th percentile of each signal where the twin's engine is the truth's up to
parameters (``--mismatch default``). The same signals at the structural levels say how often the
rule fires where the twin's engine is not the truth's.

Each run of the study is the twin tuner with the rule off (``twin-notrust``), so the signals are
those of a twin that kept going; noise-free, one sim seed, the truth drawn as ``evaluate`` draws it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agent.actions import ActionCodec
from agent.tuners.twin import change_miss

QUANTILE = 0.95
"""Share of validation runs at ``--mismatch default`` a bound lets through."""


def trust_runs(scenario: str, level: str, steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """One row per run of the twin tuner (rule off) on ``scenario`` at mismatch ``level``: what the
    twin predicted of the run's change against the reference before the run, what it measured, the
    cell check after the refit on it, and the run's improvement over the reference."""
    from agent.evaluation.runner import run_experiment
    from agent.objectives.sim import mismatch_truth, scenario_objective, workload_context
    from agent.objectives.view import objective_view
    from agent.tuners.factory import make_tuner
    from testbed.sim.engine import SimConfig

    codec = ActionCodec()
    objective = scenario_objective(scenario, seed)
    view = objective_view(objective)
    objective.config = SimConfig()
    objective.truth = mismatch_truth(level, scenario, objective.cluster, seed, config=objective.config)
    tuner = make_tuner("twin-notrust", codec, seed=seed, view=view,
                       context=workload_context(objective.cluster, objective.workload))
    _, metrics = run_experiment(tuner, objective, steps, codec)
    predicted = dict((k, (p, m)) for k, p, m in tuner.change_errors())
    rows = []
    fits = list(tuner.fits)
    for k, metric in enumerate(metrics):
        fit = fits[k] if k < len(fits) else {}
        p, m = predicted.get(k, (math.nan, math.nan))
        rows.append({
            "scenario": scenario, "level": level, "seed": seed, "run": k, "metric_s": metric,
            "improvement_pct": 100.0 * (metrics[0] - metric) / metrics[0],
            "predicted_change": p, "measured_change": m, "change_error": change_miss(p, m),
            "cell_error": fit.get("cell_error"), "cell_worst": "|".join(map(str, fit.get("cell_worst") or [])),
            "metric_error": fit.get("metric_error"), "confounded": len(fit.get("confounded") or []),
        })
    return rows


def trust_table(scenarios: Sequence[str], levels: Sequence[str], steps: int, seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame([row for scenario in scenarios for level in levels
                         for row in trust_runs(scenario, level, steps, seed)])


def rescore(frame: pd.DataFrame) -> pd.DataFrame:
    """The study's rows with ``change_error`` recomputed from the predicted and measured changes by
    today's :func:`agent.tuners.twin.change_miss` (the runs themselves do not depend on it)."""
    out = frame.copy()
    out["change_error"] = [change_miss(p, m) if p == p and m == m else math.nan
                           for p, m in zip(out["predicted_change"], out["measured_change"], strict=True)]
    return out


def bounds(frame: pd.DataFrame, level: str = "default", q: float = QUANTILE) -> dict[str, float]:
    """The bounds the tuner uses: the ``q`` quantile of each signal over the runs at ``level``."""
    at = frame[frame["level"] == level]
    change = pd.to_numeric(at["change_error"], errors="coerce").dropna()
    cells = pd.to_numeric(at["cell_error"], errors="coerce").dropna()
    return {"change": float(np.quantile(change, q)) if len(change) else math.nan,
            "cell": float(np.quantile(cells, q)) if len(cells) else math.nan}


def summary(frame: pd.DataFrame, bound: dict[str, float]) -> pd.DataFrame:
    """Per level: runs, the signals' medians and 95th percentiles, and how often each bound is
    exceeded (over runs that have the signal), and the share of tasks whose first proposal (run 1)
    or reference fit (run 0) the rule would have refused."""
    out = []
    for level, g in frame.groupby("level", sort=False):
        change = pd.to_numeric(g["change_error"], errors="coerce")
        cells = pd.to_numeric(g["cell_error"], errors="coerce")
        first = g[g["run"] == 1]
        ref = g[g["run"] == 0]
        out.append({
            "level": level, "tasks": g["scenario"].nunique(), "runs": len(g),
            "change_error_median": change.median(), "change_error_p95": change.quantile(0.95),
            "change_over_bound": float((change.dropna() > bound["change"]).mean()) if change.notna().any() else math.nan,
            "cell_checked": float(cells.notna().mean()),
            "cell_error_median": cells.median(), "cell_error_p95": cells.quantile(0.95),
            "cell_over_bound": float((cells.dropna() > bound["cell"]).mean()) if cells.notna().any() else math.nan,
            "refused_at_reference": float((pd.to_numeric(ref["cell_error"], errors="coerce") > bound["cell"]).mean()),
            "refused_after_run_1": float(((pd.to_numeric(first["change_error"], errors="coerce") > bound["change"])
                                          | (pd.to_numeric(first["cell_error"], errors="coerce") > bound["cell"])).mean()),
        })
    return pd.DataFrame(out)


def replay_verdicts(directory: Any) -> list[dict[str, Any]]:
    """What the trust rule says of a live experiment already run (``tune`` output directory): the
    twin tuner with the rule off (so it proposes what the logged twin proposed) is driven through
    the logged runs as a resume drives it, and each run's verdict -- the reasons the rule would have
    refused the twin for -- is returned, one row per run. For an experiment of another method the
    twin's predictions do not match the runs and only the cell check speaks."""
    from pathlib import Path

    from agent.loop.backends import resolve_workload
    from agent.loop.config import ExperimentConfig
    from agent.loop.log import read_log, step_where
    from agent.objectives.view import user_view
    from agent.tuners.drive import Measured, drive
    from agent.tuners.factory import make_tuner
    from testbed.cluster import load_cluster

    d = Path(directory)
    config = ExperimentConfig.load(d)
    wl_path = Path(config.workload)
    kept = d.parent.parent / "workloads" / wl_path.name  # a lab table keeps its workloads beside its runs
    if not wl_path.exists() and kept.exists():
        config = dataclasses.replace(config, workload=str(kept))
    workload, scenario_cluster = resolve_workload(config.workload, seed=config.seed)
    cluster = load_cluster(config.cluster or scenario_cluster)
    codec = ActionCodec()
    tuner = make_tuner("twin-notrust", codec, seed=config.seed,
                       view=user_view(cluster, workload, config.metric, platform=config.platform))
    records = read_log(d)
    drive(tuner, codec, len(records) - 1, lambda step, action: math.nan,
          told=[(rec.action, Measured(rec.metric, rec.facts, step_where(d, rec))) for rec in records])
    changes = {k: (p, m) for k, p, m in tuner.change_errors()}
    return [{"experiment": d.name, "run": v["run"], "refused": bool(v["reasons"]),
             "reason": "; ".join(v["reasons"]), "predicted_change": changes.get(v["run"], (math.nan,))[0],
             "measured_change": changes.get(v["run"], (math.nan, math.nan))[1],
             "improvement_pct": 100.0 * (records[0].metric - records[v["run"]].metric) / records[0].metric}
            for v in tuner.trust_log]


__all__ = ["QUANTILE", "bounds", "replay_verdicts", "rescore", "summary", "trust_runs", "trust_table"]
