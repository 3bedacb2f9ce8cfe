"""The evaluation's figures, from result rows of either noise setting (agent.evaluation.study).

Per row (scenario, seed, budget, method), with ``t_ref`` the default weights' truth, ``t_app`` the
truth of the applied profile, ``t_bb`` the best baseline's ``t_app`` in the same cell (the baseline,
``+reeval`` variants included, with the highest mean improvement at the headline budget) and
``t_*`` the oracle:

- improvement over fixed weights: ``100 (t_ref - t_app) / t_ref``
- improvement over the best baseline: ``100 (t_bb - t_app) / t_bb``
- gap closed: ``(t_ref - t_app) / (t_ref - t_*)`` (1 when the oracle finds no gain)
- steps to 90 % (noise-free): the first step whose best-so-far reaches 90 % of the final gain
- claimed (noisy): what the tuner's own runs say of the profile it applies; the distance to the
  true improvement is the winner's curse.

Means and 95 % Student-t intervals are over seeds, each seed's value averaged over the scenarios
first, so an interval is over independent repetitions of the whole evaluation. The gap closed of
a seed is the mean of the scenarios' shares when a measurement is exact; under noise it is a ratio
of means, ``mean_s (t_ref - t_app) / t_ref`` over ``mean_s (t_ref - t_*) / t_ref``: a scenario whose
true headroom is a fraction of a percent would otherwise turn the truth's own estimation error
into shares of several hundred percent.

The budget table: under noise each budget is its own experiment (what a tuner applies depends on
its budget); noise-free it is read off the best-so-far curve of the headline experiment, where a
measurement is the truth and the best after ``t`` steps is what was applied then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from agent.stats import mean_ci
from agent.tuners.factory import is_baseline

BUDGETS = (1, 2, 3, 5, 10, 15, 20, 30, 40, 60, 80, 100)
"""Noise-free: the budgets (steps after the reference) the budget table reads off the curve."""


def steps_to_fraction(metrics: Sequence[float], fraction: float = 0.9) -> int:
    """The first step whose best-so-far reaches ``fraction`` of the final gain (0 if no gain)."""
    best = np.minimum.accumulate(np.asarray(metrics, dtype=np.float64))
    gain = best[0] - best[-1]
    if gain <= 0:
        return 0
    return int(np.argmax(best[0] - best >= fraction * gain - 1e-12))


def _closed(ref: np.ndarray, value: np.ndarray, oracle: np.ndarray) -> np.ndarray:
    gap = ref - oracle
    return np.where(gap > 1e-12, (ref - value) / np.where(gap > 1e-12, gap, 1.0), 1.0)


def complete_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that hold only the measurements (noise-free results of earlier versions, hand-made
    rows) completed as the noise-free protocol defines them: the budget is the experiment's length,
    a measurement is the truth (one truth seed), the applied profile is the best measured."""
    frame = frame.copy()
    metrics = frame["metrics"]
    defaults = {"budget": metrics.map(len) - 1, "applied": "", "true_reference": metrics.map(lambda m: m[0]),
                "true_applied": metrics.map(min), "truth_seeds": 1, "noise_cv": 0.0, "lab_cv": 0.0, "seed_cv": 0.0}
    for column, value in defaults.items():
        if column not in frame.columns:
            frame[column] = value
    if "claimed_pct" not in frame.columns:
        frame["claimed_pct"] = 100.0 * (frame["true_reference"] - frame["true_applied"]) / frame["true_reference"]
    return frame


def score(rows: Sequence[dict[str, Any]], headline: int | None = None, *, keep: Sequence[str] | None = None,
          baselines: Sequence[str] | None = None) -> pd.DataFrame:
    """The figures of the module docstring on every row (see :func:`complete_rows` for rows of
    measurements only). ``headline``: the budget the best baseline is chosen at (default: the
    largest). The oracle counts every row; ``keep`` (method names) selects the rows scored after
    it; ``baselines`` overrides which methods count as baselines (default:
    :func:`agent.tuners.factory.is_baseline`)."""
    frame = complete_rows(pd.DataFrame(list(rows)))
    if headline is None:
        headline = int(frame["budget"].max())
    exact = bool((frame["truth_seeds"] == 1).all())
    cell = ["scenario", "seed"] if exact else ["scenario"]
    known = frame["metrics"].map(min) if exact else frame["true_applied"]  # exact: every run is a truth
    bound = known.groupby([frame[c] for c in cell]).transform("min")
    frame["oracle"] = np.minimum(frame["oracle_search"].to_numpy(float), bound.to_numpy(float))
    if keep is not None:
        frame = frame[frame["method"].isin(list(keep))].reset_index(drop=True)
    ref, app, orc = (frame[c].to_numpy(float) for c in ("true_reference", "true_applied", "oracle"))
    frame["improvement_pct"] = 100.0 * (ref - app) / ref
    frame["gap_closed"] = _closed(ref, app, orc)
    if exact:
        frame["steps_to_90"] = frame["metrics"].map(steps_to_fraction)
    chosen = frame["method"].isin(list(baselines)) if baselines is not None else frame["method"].map(is_baseline)
    head = frame[(frame["budget"] == headline) & chosen]
    best = None
    if not head.empty:
        best = str(head.groupby("method")["improvement_pct"].mean().idxmax())
        bb = frame[frame["method"] == best].set_index(["scenario", "seed", "budget"])["true_applied"]
        t_bb = frame.set_index(["scenario", "seed", "budget"]).index.map(bb.to_dict().get).to_numpy(float)
        frame["best_baseline"] = best
        frame["over_best_baseline_pct"] = 100.0 * (t_bb - app) / t_bb
    frame.attrs["best_baseline"] = best
    frame.attrs["exact"] = exact
    return frame


def _per_seed(group: pd.DataFrame, cols: Sequence[str], exact: bool) -> pd.DataFrame:
    """Means over scenarios per seed; under noise ``gap_closed`` as the ratio of means."""
    plain = [c for c in cols if exact or c != "gap_closed"]
    per_seed = group.groupby("seed")[plain].mean()
    if not exact and "gap_closed" in cols:
        ref, app, orc = (group[c].to_numpy(float) for c in ("true_reference", "true_applied", "oracle"))
        parts = group.assign(_gain=(ref - app) / ref, _room=(ref - orc) / ref).groupby("seed")[["_gain", "_room"]].mean()
        room = parts["_room"]
        per_seed["gap_closed"] = np.where(room > 1e-12, parts["_gain"] / room.where(room > 1e-12, 1.0), 1.0)
    return per_seed


def summary_table(frame: pd.DataFrame, budget: int | None = None) -> pd.DataFrame:
    """One row per method at ``budget`` (default: every row): means and 95 % intervals over seeds."""
    exact = frame.attrs.get("exact", True)
    last = "steps_to_90" if exact else "claimed_pct"
    cols = [c for c in ("improvement_pct", "over_best_baseline_pct", "gap_closed", last) if c in frame.columns]
    rows = frame if budget is None else frame[frame["budget"] == budget]
    out = []
    for method, group in rows.groupby("method", sort=False):
        per_seed = _per_seed(group, cols, exact)
        row: dict[str, Any] = {"method": method, **({} if exact else {"budget": budget}),
                               "scenarios": group["scenario"].nunique(), "seeds": len(per_seed)}
        for c in cols:
            ci = mean_ci(per_seed[c].to_numpy())
            row[c], row[f"{c}_low"], row[f"{c}_high"] = ci.mean, ci.low, ci.high
        if exact:
            row["beats_best_baseline_share"] = float((group.get("over_best_baseline_pct", pd.Series([0.0])) > 0).mean())
        out.append(row)
    return pd.DataFrame(out)


def per_scenario(frame: pd.DataFrame, budget: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per method and scenario at ``budget``: the mean improvement (%) and gap closed (0..1) over seeds."""
    exact = frame.attrs.get("exact", True)
    out: dict[str, dict[str, dict[str, float]]] = {}
    at = frame[frame["budget"] == budget]
    for (method, scenario), group in at.groupby(["method", "scenario"], sort=False):
        gap = float(_per_seed(group.assign(seed=0), ["gap_closed"], exact)["gap_closed"].iloc[0]) if not exact \
            else float(group["gap_closed"].mean())
        out.setdefault(str(method), {})[str(scenario)] = {
            "improvement_pct": float(group["improvement_pct"].mean()), "gap_closed": gap, "seeds": int(len(group))}
    return out


def budget_table(frame: pd.DataFrame, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """The default→oracle gap closed per method and budget (module docstring): means with 95 %
    intervals over seeds, scenarios averaged per seed; one oracle per cell for every budget, so
    the columns are comparable."""
    exact = frame.attrs.get("exact", True)
    out = []
    if not exact:
        for (method, budget), group in frame.groupby(["method", "budget"], sort=False):
            ci = mean_ci(_per_seed(group, ["gap_closed"], exact)["gap_closed"].to_numpy())
            out.append({"method": method, "steps": int(budget), "gap_closed": ci.mean, "gap_closed_low": ci.low,
                        "gap_closed_high": ci.high})
        return pd.DataFrame(out)
    steps = int(frame["metrics"].map(len).min()) - 1
    ts = [t for t in budgets if t <= steps]
    if steps not in ts:
        ts.append(steps)
    ref, orc = frame["true_reference"].to_numpy(float), frame["oracle"].to_numpy(float)
    for t in ts:
        best_t = frame["metrics"].map(lambda m, t=t: min(m[: t + 1])).to_numpy(dtype=float)
        per_seed = frame.assign(closed=_closed(ref, best_t, orc)).groupby(["method", "seed"], sort=False)["closed"].mean()
        for method, values in per_seed.groupby(level="method", sort=False):
            ci = mean_ci(values.to_numpy())
            out.append({"method": method, "steps": t, "gap_closed": ci.mean, "gap_closed_low": ci.low,
                        "gap_closed_high": ci.high})
    return pd.DataFrame(out)
