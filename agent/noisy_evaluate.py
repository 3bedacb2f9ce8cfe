"""``scoretune evaluate --protocol noisy``: every method judged by the true quality of what it applies.

Per scenario, seed, budget ``B`` and method (agent/noisy.py has the noise model):

1. the tuner measures the reference and ``B`` more runs on a :class:`~agent.noisy.NoisyObjective`
   (a fresh simulator seed and a calibrated measurement error per run; every run counts against the
   budget, re-measurements included; the stream of seeds and errors is the same for every method
   at a given seed and budget: common random numbers);
2. it names the profile it would apply (:func:`agent.applied.applied_setting`);
3. the evaluation, apart from the tuner, computes that profile's **true** metric: its mean over the
   truth seeds (:class:`~agent.noisy.Truth`, seeds no measurement draws).

Scores per row, all in true terms: improvement over the default weights
``100 (t_ref - t_applied) / t_ref``; over the best baseline ``100 (t_bb - t_applied) / t_bb`` (the
baseline, ``+reeval`` variants included, with the highest mean true improvement at the headline
budget; paired by scenario, seed and budget); gap closed: the share of the default→oracle gap the
applied profiles close, ``mean_s (t_ref - t_applied) / t_ref`` over ``mean_s (t_ref - t_*) / t_ref``
across the scenarios ``s`` of a seed, with ``t_*`` the true oracle: the best true metric among the
top profiles of a noise-free search (TPE, ``oracle_runs`` runs on simulator seed 0) and every
profile any method applied. A ratio of means, not a mean of per-scenario ratios as in the
noise-free protocol: a scenario whose true headroom is a fraction of a percent (several are) would
otherwise turn the truth's own estimation error into gap shares of several hundred percent. The
*claimed* improvement is what the tuner's own measurements say of the profile it applies
(``100 (mean measured reference - mean measured applied) / mean measured reference``): the gap
between claimed and true is the winner's curse.

Means and 95 % Student-t intervals are over seeds, each seed's value averaged over the scenarios
first, as in the noise-free protocol (agent/evaluate.py).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent.actions import ActionCodec
from agent.applied import Reeval, applied_setting, measured, split_rule
from agent.errors import AgentError
from agent.evaluate import (
    _fmt,
    _make_out_dir,
    method_markdown,
    oracle_runs_logged,
    policy_acting,
    run_logged,
    write_scored,
)
from agent.provenance import provenance
from agent.stats import mean_ci
from agent.tune import write_atomic
from agent.tuners import NOISY_BASELINES, make_tuner

log = logging.getLogger(__name__)

NOISY_BUDGETS = (1, 2, 3, 5, 10, 20)
ORACLE_TOP = 5
"""Profiles of the noise-free oracle search whose truth is computed (the best by seed 0 need not
be the best on average)."""


@dataclass(frozen=True)
class NoisyTask:
    """One scenario of the noisy evaluation (all its seeds, so its truth is computed once)."""

    scenario: str
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    policies: Mapping[str, str]
    budgets: tuple[int, ...]
    metric: str
    noise: Mapping[str, float]
    truth_seeds: int
    oracle_runs: int
    oracle_actions: tuple[tuple[float, ...], ...] | None = None


def noisy_tuner(method: str, policies: Mapping[str, str], seed: int, steps: int, codec: ActionCodec) -> Any:
    """The tuner of a method name (``+reeval[K]`` wraps any of them)."""
    base, rule = split_rule(method)
    if method in policies:
        kind, std_scale = policy_acting(base)
        tuner: Any = make_tuner(kind, codec, seed=seed, policy=Path(policies[method]), steps=steps,
                                std_scale=std_scale)
    else:
        tuner = make_tuner(base, codec, seed=seed)
    if rule is not None:
        tuner = Reeval(tuner, codec, steps, rule)
    return tuner


def oracle_top(objective: Any, codec: ActionCodec, runs: int, seed: int = 0, top: int = ORACLE_TOP) -> list[np.ndarray]:
    """The ``top`` best distinct profiles of the noise-free oracle search (agent.evaluate's)."""
    table = measured(*oracle_runs_logged(objective, codec, runs, seed))
    best = sorted(table.values(), key=lambda e: e[1])[:top]
    return [codec.encode(s) for s, _, _ in best]


def run_noisy_task(task: NoisyTask) -> dict[str, Any]:
    """Every method, seed and budget on one scenario; rows plus the oracle's candidate actions."""
    from agent.noisy import NoisyObjective, Truth, extra_cv
    from agent.scenario_objectives import scenario_objective, workload_context
    from testbed.local.noise import NoiseModel

    codec = ActionCodec()
    base = scenario_objective(task.scenario, 0, task.metric)
    truth = Truth(base.cluster, base.workload, metric=task.metric, seeds=task.truth_seeds)
    reference = codec.reference()
    t_ref = truth(reference)
    seed_cv = truth.seed_cv(reference)
    model = NoiseModel.from_dict(task.noise, metric=task.metric)
    lab_cv = model.cv(float(len(base.workload)), float(base.workload.duration_s))
    noise_cv = extra_cv(lab_cv, seed_cv)
    oracle_actions = ([np.asarray(a, dtype=np.float32) for a in task.oracle_actions] if task.oracle_actions is not None
                      else oracle_top(base, codec, task.oracle_runs))
    t_oracle = min(truth(codec.decode(a)) for a in oracle_actions) if oracle_actions else math.inf
    context = workload_context(base.cluster, base.workload)
    rows = []
    for seed in task.seeds:
        for budget in task.budgets:
            for method in task.methods:
                tuner = noisy_tuner(method, task.policies, seed, budget, codec)
                objective = NoisyObjective(base.cluster, base.workload, noise_cv=noise_cv, rng_seed=seed * 1009 + budget,
                                           metric=task.metric, name=f"{task.scenario}~noisy", context=context)
                settings, values = run_logged(tuner, objective, budget, getattr(tuner, "codec", codec))
                if objective.runs != budget + 1:
                    raise AgentError(f"{method}: {objective.runs} runs for a budget of {budget} + the reference")
                applied = applied_setting(tuner, settings, values)
                table = measured(settings, values)
                rows.append({
                    "scenario": task.scenario, "seed": seed, "budget": budget, "method": method,
                    "metrics": [round(v, 6) for v in values], "applied": applied.label(),
                    "true_reference": t_ref, "true_applied": truth(applied),
                    "claimed_pct": 100.0 * (table[reference.label()][1] - table[applied.label()][1])
                    / table[reference.label()][1],
                    "noise_cv": noise_cv, "lab_cv": lab_cv, "seed_cv": seed_cv, "oracle_search": t_oracle,
                })
    return {"scenario": task.scenario, "rows": rows, "oracle_actions": [a.tolist() for a in oracle_actions]}


def is_baseline(method: str) -> bool:
    return split_rule(method)[0] in NOISY_BASELINES


def score_noisy(rows: Sequence[Mapping[str, Any]], headline: int) -> pd.DataFrame:
    """The scores of the module docstring on every row; the best baseline is chosen at ``headline``."""
    frame = pd.DataFrame(list(rows))
    best_applied = frame.groupby("scenario")["true_applied"].transform("min")
    frame["oracle"] = np.minimum(frame["oracle_search"].to_numpy(float), best_applied.to_numpy(float))
    ref, app, orc = (frame[c].to_numpy(float) for c in ("true_reference", "true_applied", "oracle"))
    frame["improvement_pct"] = 100.0 * (ref - app) / ref
    gap = ref - orc
    frame["gap_closed"] = np.where(gap > 1e-12, (ref - app) / np.where(gap > 1e-12, gap, 1.0), 1.0)
    head = frame[(frame["budget"] == headline) & frame["method"].map(is_baseline)]
    best = None
    if not head.empty:
        best = str(head.groupby("method")["improvement_pct"].mean().idxmax())
        bb = frame[frame["method"] == best].set_index(["scenario", "seed", "budget"])["true_applied"]
        t_bb = frame.set_index(["scenario", "seed", "budget"]).index.map(bb.to_dict().get).to_numpy(float)
        frame["over_best_baseline_pct"] = 100.0 * (t_bb - app) / t_bb
    frame.attrs["best_baseline"] = best
    return frame


def _per_seed(group: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """Means over scenarios per seed; ``gap_closed`` as the ratio of means (module docstring)."""
    per_seed = group.groupby("seed")[[c for c in cols if c != "gap_closed"]].mean()
    if "gap_closed" in cols:
        ref, app, orc = (group[c].to_numpy(float) for c in ("true_reference", "true_applied", "oracle"))
        parts = group.assign(_gain=(ref - app) / ref, _room=(ref - orc) / ref).groupby("seed")[["_gain", "_room"]].mean()
        per_seed["gap_closed"] = np.where(parts["_room"] > 1e-12, parts["_gain"] / parts["_room"].where(parts["_room"] > 1e-12, 1.0), 1.0)
    return per_seed


def noisy_summary(frame: pd.DataFrame, budget: int) -> pd.DataFrame:
    """One row per method at ``budget``: means and 95 % intervals over seeds."""
    cols = [c for c in ("improvement_pct", "over_best_baseline_pct", "gap_closed", "claimed_pct") if c in frame]
    out = []
    for method, group in frame[frame["budget"] == budget].groupby("method", sort=False):
        per_seed = _per_seed(group, cols)
        row: dict[str, Any] = {"method": method, "budget": budget, "scenarios": group["scenario"].nunique(),
                               "seeds": len(per_seed)}
        for c in cols:
            ci = mean_ci(per_seed[c].to_numpy())
            row[c], row[f"{c}_low"], row[f"{c}_high"] = ci.mean, ci.low, ci.high
        out.append(row)
    return pd.DataFrame(out)


def noisy_budget(frame: pd.DataFrame) -> pd.DataFrame:
    """The true gap closed per method and budget (the budget table of the noisy protocol)."""
    out = []
    for (method, budget), group in frame.groupby(["method", "budget"], sort=False):
        ci = mean_ci(_per_seed(group, ["gap_closed"])["gap_closed"].to_numpy())
        out.append({"method": method, "steps": int(budget), "gap_closed": ci.mean, "gap_closed_low": ci.low,
                    "gap_closed_high": ci.high})
    return pd.DataFrame(out)


def noisy_markdown(table: pd.DataFrame, best_baseline: str | None) -> str:
    return method_markdown(
        table, best_baseline, first="true improvement over fixed weights (%)", last="claimed by its own runs (%)",
        last_cell=lambda r: _fmt(r["claimed_pct"], r["claimed_pct_low"], r["claimed_pct_high"], pct=True))


def _read_oracle_cache(path: Path) -> dict[str, list[list[float]]]:
    from agent.errors import InputError

    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a JSON oracle cache ({err}); delete it to recompute", file=path) from None
    ok = isinstance(data, dict) and all(
        isinstance(v, list) and all(isinstance(a, list) and all(isinstance(x, int | float) for x in a) for a in v)
        for v in data.values())
    if not ok:
        raise InputError("not a mapping of 'scenario:runs:metric' to lists of actions; delete it to recompute",
                         file=path)
    return data


def evaluate_noisy(
    scenarios: Sequence[str],
    *,
    seeds: int,
    out_dir: Path,
    noise: Any,
    methods: Sequence[str],
    policies: Mapping[str, str] | None = None,
    steps: int = 10,
    budgets: Sequence[int] = NOISY_BUDGETS,
    truth_seeds: int = 10,
    oracle_runs: int = 500,
    metric: str = "mean",
    jobs: int = 1,
    seed_offset: int = 0,
    config: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Run the noisy protocol and write ``results.csv``, ``table.md/csv`` (at ``steps``),
    ``budget.md/csv`` and ``evaluation.json`` to ``out_dir``; returns the headline table."""
    policies = dict(policies or {})
    all_methods = tuple(methods) + tuple(p for p in policies if p not in methods)
    if not scenarios:
        raise AgentError("evaluate: no scenarios to evaluate")
    if not all_methods:
        raise AgentError("evaluate: no methods to evaluate")
    for m in all_methods:
        base, _ = split_rule(m)
        if m not in policies and base not in NOISY_BASELINES:
            raise AgentError(f"method {m!r}: not a baseline ({', '.join(NOISY_BASELINES)}) nor a policy given with "
                             "--ablation")
    budget_list = sorted(set(int(b) for b in budgets) | {int(steps)})
    if budget_list[0] < 1:
        raise AgentError(f"budgets must be >= 1, got {budget_list[0]}")
    if truth_seeds < 2:
        raise AgentError(f"--truth-seeds must be >= 2, got {truth_seeds}")
    _make_out_dir(out_dir)
    cache_path = out_dir / "oracle-profiles.json"
    cache = _read_oracle_cache(cache_path)
    seed_list = tuple(range(seed_offset, seed_offset + seeds))

    def key(s: str) -> str:
        return f"{s}:{oracle_runs}:{metric}"

    tasks = [NoisyTask(s, seed_list, all_methods, policies, tuple(budget_list), metric, noise.to_dict(), truth_seeds,
                       oracle_runs, tuple(tuple(a) for a in cache[key(s)]) if key(s) in cache else None)
             for s in scenarios]
    results: list[dict[str, Any]] = []
    log.info("noisy protocol: %d scenarios x %d seeds x %d budgets x %d methods, %d worker(s)", len(tasks),
             len(seed_list), len(budget_list), len(all_methods), jobs)

    def done(result: dict[str, Any]) -> None:
        results.append(result)
        log.info("  %s done (%d/%d)", result["scenario"], len(results), len(tasks))

    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for result in pool.map(run_noisy_task, tasks):
                done(result)
    else:
        for task in tasks:
            done(run_noisy_task(task))
    for r in results:
        cache[key(r["scenario"])] = r["oracle_actions"]
    write_atomic(cache_path, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    frame = score_noisy([row for r in results for row in r["rows"]], steps)
    table = write_noisy_tables(frame, out_dir, steps)
    best = frame.attrs.get("best_baseline")
    noise_rows = frame.groupby("scenario")[["lab_cv", "seed_cv", "noise_cv"]].first().reset_index()
    meta = {
        "protocol": "noisy", "scenarios": list(scenarios), "seeds": seeds, "seed_offset": seed_offset,
        "methods": list(all_methods), "policies": policies, "steps": steps, "budgets": budget_list,
        "truth_seeds": truth_seeds, "oracle_runs": oracle_runs, "metric": metric, "best_baseline": best,
        "noise_model": noise.to_dict(), "noise_source": getattr(noise, "source", ""),
        "noise_per_scenario": noise_rows.to_dict("records"),
        "config": dict(config or {}), "provenance": provenance(),
    }
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table


def write_noisy_tables(frame: pd.DataFrame, out_dir: Path, steps: int) -> pd.DataFrame:
    """``results.csv``, ``table.md/csv`` (at ``steps``) and ``budget.md/csv`` of a scored frame."""
    table = noisy_summary(frame, steps)
    write_scored(out_dir, frame, table, noisy_markdown(table, frame.attrs.get("best_baseline")), noisy_budget(frame))
    return table


NOISY_COLUMNS = ("scenario", "seed", "budget", "method", "metrics", "applied", "true_reference", "true_applied",
                 "claimed_pct", "noise_cv", "lab_cv", "seed_cv", "oracle_search")


def combine_noisy(dirs: Sequence[Path], out_dir: Path, steps: int, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One noisy table from several noisy evaluations of the same scenarios and seeds (a method run
    later is compared with the others on the same measurement streams: the streams depend only on
    the seed and the budget), rescored together: the oracle becomes the best of all of them."""
    from agent.errors import InputError

    parts = []
    for d in dirs:
        path = Path(d) / "results.csv"
        if not path.is_file():
            raise AgentError(f"{path}: missing (an output of `scoretune evaluate --protocol noisy --out {d}`)")
        try:
            part = pd.read_csv(path, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
            raise InputError(f"not a noisy results table ({type(err).__name__})", file=path) from None
        missing = [c for c in NOISY_COLUMNS if c not in part.columns]
        if missing:
            raise InputError(f"not a noisy results table (no column {missing[0]!r})", file=path)
        try:
            part["metrics"] = part["metrics"].map(json.loads)
            for c in ("true_reference", "true_applied", "oracle_search", "claimed_pct"):
                part[c] = part[c].astype(float)
        except (ValueError, TypeError) as err:
            raise InputError(f"a value is not a number or a JSON list ({err})", file=path) from None
        parts.append(part[list(NOISY_COLUMNS)])
    if not parts:
        raise AgentError("combine: no evaluation directories given")
    rows = pd.concat(parts, ignore_index=True)
    dup = rows.duplicated(["scenario", "seed", "budget", "method"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise AgentError(f"method {r['method']!r} ran twice on ({r['scenario']}, seed {r['seed']}, budget {r['budget']})")
    rows["oracle_search"] = rows.groupby("scenario")["oracle_search"].transform("min")
    if methods:
        unknown = [m for m in methods if m not in set(rows["method"])]
        if unknown:
            raise AgentError(f"method {unknown[0]!r} is in none of {[str(d) for d in dirs]}")
        rows = rows[rows["method"].isin(list(methods))]
    frame = score_noisy(rows.to_dict("records"), steps)
    _make_out_dir(out_dir)
    table = write_noisy_tables(frame, out_dir, steps)
    meta = {"protocol": "noisy", "combined": [str(d) for d in dirs], "steps": steps,
            "methods": list(dict.fromkeys(frame["method"])), "best_baseline": frame.attrs.get("best_baseline"),
            "provenance": provenance()}
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table
