"""One method against the others, paired by task: the figures issue 34's targets are stated in.

An evaluation's budget table averages over tasks within each seed and puts its interval over seeds.
A claim such as "above GP-BO with the interval above zero" needs the difference *paired by task*:
per task, the mean over seeds of the method's gap closed minus the other's, and a 95 % Student-t
interval over tasks. The normalised regret is ``1 - gap closed``; "50 % less regret than GP-BO" is
``1 - mean regret(method) / mean regret(other) >= 0.5``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from agent.errors import AgentError
from agent.evaluation.scoring import _closed
from agent.stats import mean_ci

BUDGETS = (1, 2, 3, 5, 10)


def gap_by_budget(frame: pd.DataFrame, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """One row per (method, scenario, seed, budget) with the gap closed at that budget: read off
    the run curve when noise-free (the best measured so far is the truth), the row's own when noisy."""
    if "oracle" not in frame.columns:
        raise AgentError("the results have no oracle column (an output of `scoretune evaluate` or `combine`)")
    exact = bool(frame.attrs.get("exact", int(frame["truth_seeds"].max()) == 1))
    out = []
    if exact:
        ref, orc = frame["true_reference"].to_numpy(float), frame["oracle"].to_numpy(float)
        steps = int(frame["metrics"].map(len).min()) - 1
        for t in [b for b in budgets if b <= steps]:
            best = frame["metrics"].map(lambda m, t=t: min(m[: t + 1])).to_numpy(dtype=float)
            out.append(frame[["method", "scenario", "seed"]].assign(budget=t, gap=_closed(ref, best, orc)))
    else:
        rows = frame[frame["budget"].isin(budgets)]
        gap = _closed(rows["true_reference"].to_numpy(float), rows["true_applied"].to_numpy(float),
                      rows["oracle"].to_numpy(float))
        out.append(rows[["method", "scenario", "seed", "budget"]].assign(gap=gap))
    return pd.concat(out, ignore_index=True)


def compare(frame: pd.DataFrame, method: str, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """Per other method and budget: ``method``'s gap closed minus the other's, paired by task (mean
    over seeds per task, 95 % interval over tasks), and the share of regret ``method`` removes."""
    g = gap_by_budget(frame, budgets)
    if method not in set(g["method"]):
        raise AgentError(f"method {method!r} is not in the results; they hold {sorted(set(g['method']))}")
    per_task = g.groupby(["method", "budget", "scenario"])["gap"].mean()
    rows = []
    for other in [m for m in dict.fromkeys(g["method"]) if m != method]:
        for t in sorted(set(g["budget"])):
            a, b = per_task.loc[method, t], per_task.loc[other, t]
            common = a.index.intersection(b.index)
            d = (a[common] - b[common]).to_numpy()
            ci = mean_ci(d)
            regret_a, regret_b = float(np.mean(1 - a[common])), float(np.mean(1 - b[common]))
            rows.append({"other": other, "T": int(t), "tasks": len(common), "gap": float(a[common].mean()),
                         "other_gap": float(b[common].mean()), "difference": ci.mean, "low": ci.low, "high": ci.high,
                         "regret_cut": 1 - regret_a / regret_b if regret_b > 1e-12 else float("nan")})
    return pd.DataFrame(rows)


def by_task(frame: pd.DataFrame, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """Each method alone at each budget: the gap closed and, at the headline budget, the
    improvement over the default weights, each the mean over tasks of the task's mean over seeds
    with a 95 % interval **over tasks** -- what a claim about tasks not seen needs (the evaluation's
    own tables put theirs over tuner seeds, with the tasks averaged inside each seed)."""
    g = gap_by_budget(frame, budgets)
    rows = []
    per_task = g.groupby(["method", "budget", "scenario"])["gap"].mean().sort_index()
    headline = int(frame["budget"].max()) if "budget" in frame.columns else None
    improve = None
    if headline is not None and "improvement_pct" in frame.columns:
        at = frame[frame["budget"] == headline]
        improve = at.groupby(["method", "scenario"])["improvement_pct"].mean().sort_index()
    for method in dict.fromkeys(g["method"]):
        for t in sorted(set(g["budget"])):
            ci = mean_ci(per_task.loc[method, t].to_numpy())
            row = {"method": method, "T": int(t), "tasks": int(len(per_task.loc[method, t])), "gap": ci.mean,
                   "gap_low": ci.low, "gap_high": ci.high, "improvement": float("nan"),
                   "improvement_low": float("nan"), "improvement_high": float("nan")}
            if improve is not None and t == max(set(g["budget"])) and method in improve.index.get_level_values(0):
                ii = mean_ci(improve.loc[method].to_numpy())
                row.update(improvement=ii.mean, improvement_low=ii.low, improvement_high=ii.high)
            rows.append(row)
    return pd.DataFrame(rows)


def against(new: pd.DataFrame, old: pd.DataFrame, method: str, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """``method`` in two evaluations of the same tasks (a change of the method): per budget its gap
    closed in each against one oracle per task (the better of the two), on the (task, seed) pairs
    both ran, and the difference paired by task with a 95 % interval over tasks."""
    keys = ["scenario", "seed"]
    # one oracle per task for both: the better of the two evaluations' (each also saw other runs)
    oracle = pd.concat([new, old]).groupby("scenario")["oracle"].min()
    new, old = (f.assign(oracle=f["scenario"].map(oracle)) for f in (new, old))
    a = new[new["method"] == method].set_index(keys)
    b = old[old["method"] == method].set_index(keys)
    common = a.index.intersection(b.index)
    if not len(common):
        raise AgentError(f"method {method!r}: the two evaluations share no (task, seed)")
    ga = gap_by_budget(a.loc[common].reset_index(), budgets).groupby(["budget", "scenario"])["gap"].mean()
    gb = gap_by_budget(b.loc[common].reset_index(), budgets).groupby(["budget", "scenario"])["gap"].mean()
    rows = []
    for t in sorted(set(ga.index.get_level_values(0))):
        d = (ga.loc[t] - gb.loc[t]).to_numpy()
        ci = mean_ci(d)
        rows.append({"T": int(t), "tasks": len(d), "gap": float(ga.loc[t].mean()), "other_gap": float(gb.loc[t].mean()),
                     "difference": ci.mean, "low": ci.low, "high": ci.high})
    return pd.DataFrame(rows)

