"""Every method on every held-out scenario, same budget, one table (``scoretune evaluate``).

For each scenario of the split and each seed ``i``, one objective (the scenario on the simulator
with seed ``i``; within an experiment every run uses that seed, so runs differ only by profile)
is tuned by every method for ``T`` steps after the reference run, through the ask-and-tell loop
:func:`run_tuner`. The *oracle* is the best of a large search on the same objective (TPE with a
long random start, at least 500 runs), and of every run any method made: the bound on what any
tuner could gain.

Per (scenario, seed, method), with ``m_ref`` the default weights' latency, ``m_T`` the best after
``T`` steps, ``m_bb`` the best baseline's ``m_T`` (the baseline with the highest mean improvement
over the split) and ``m_*`` the oracle:

- improvement over fixed weights: ``100 (m_ref - m_T) / m_ref``
- improvement over the best baseline: ``100 (m_bb - m_T) / m_bb``
- gap closed: ``(m_ref - m_T) / (m_ref - m_*)`` (1 when the oracle finds no gain)
- steps to 90 %: the first step whose best-so-far reaches 90 % of the method's final gain

Table entries are means with 95 % Student-t intervals over seeds (each seed's value averaged over
the scenarios first, so the interval is over independent repetitions of the whole evaluation).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent.actions import ActionCodec
from agent.errors import AgentError, InputError
from agent.objective import Objective
from agent.provenance import provenance
from agent.stats import mean_ci
from agent.tune import md_cell, save_figure_atomic, write_atomic
from agent.tuners import BASELINES, MethodSpec, OptunaTuner, Tuner, make_tuner

log = logging.getLogger(__name__)

ORACLE = "oracle"


def run_tuner(tuner: Tuner, objective: Objective, steps: int, codec: ActionCodec) -> list[float]:
    """One tuning experiment in memory: the reference, then ``steps`` suggest/tell rounds.

    Returns the metric of every step (index 0 = reference)."""
    return run_logged(tuner, objective, steps, codec)[1]


def run_logged(tuner: Tuner, objective: Objective, steps: int, codec: ActionCodec) -> tuple[list[Any], list[float]]:
    """:func:`run_tuner` with every setting run (the noisy protocol needs them to say what a tuner
    applies)."""
    ref_action = codec.reference_action()
    settings = [codec.decode(ref_action)]
    values = [float(objective(settings[0]))]
    tuner.tell(ref_action, values[0])
    for _ in range(steps):
        action = np.clip(tuner.suggest(), -1.0, 1.0)
        settings.append(codec.decode(action))
        values.append(float(objective(settings[-1])))
        tuner.tell(action, values[-1])
    return settings, values


def oracle_search(objective: Objective, codec: ActionCodec, runs: int, seed: int) -> float:
    """The best metric of a ``runs``-long search: TPE after a random start of ``runs // 5``."""
    return min(oracle_runs_logged(objective, codec, runs, seed)[1])


def oracle_runs_logged(objective: Objective, codec: ActionCodec, runs: int, seed: int) -> tuple[list[Any], list[float]]:
    """The oracle's search (:func:`oracle_search`), every setting it ran and its metric."""
    tuner = OptunaTuner("tpe", codec, seed=10_000 + seed, startup=max(10, runs // 5))
    return run_logged(tuner, objective, runs, codec)


@dataclass(frozen=True)
class Task:
    """One (scenario, seed) cell of the evaluation, shippable to a worker process."""

    scenario: str
    seed: int
    methods: tuple[str, ...]
    policies: Mapping[str, str]
    steps: int
    oracle_runs: int
    metric: str
    oracle_known: float | None = None
    """The oracle search's result from an earlier evaluation (``oracle.json``), if any."""
    sim_seed: int | None = None
    """The simulator's seed; None: the task's seed (then seeds vary the simulator and the tuners)."""

    @property
    def objective_seed(self) -> int:
        return self.seed if self.sim_seed is None else self.sim_seed


def policy_acting(method: str) -> tuple[str, float | None]:
    """How a policy method name acts (the grammar of :class:`~agent.tuners.MethodSpec`): the
    tuner kind and the std scale, None for the policy's own."""
    spec = MethodSpec.parse(method)
    return spec.kind, spec.std_scale


def _method_tuner(method: str, task: Task, codec: ActionCodec) -> Tuner:
    if method in task.policies:
        kind, std_scale = policy_acting(method)
        return make_tuner(kind, codec, seed=task.seed, policy=Path(task.policies[method]), steps=task.steps,
                          std_scale=std_scale)
    return make_tuner(method, codec, seed=task.seed)


def run_task(task: Task, objective_factory: Callable[[str, int, str], Objective] | None = None) -> list[dict[str, Any]]:
    """Every method and the oracle on one (scenario, seed); returns one row per method."""
    if objective_factory is None:
        from agent.scenario_objectives import scenario_objective

        objective_factory = scenario_objective
    objective = objective_factory(task.scenario, task.objective_seed, task.metric)
    codec = ActionCodec()
    rows = []
    for method in task.methods:
        tuner = _method_tuner(method, task, codec)
        tuner_codec = getattr(tuner, "codec", codec)
        metrics = run_tuner(tuner, objective, task.steps, tuner_codec)
        rows.append({"scenario": task.scenario, "seed": task.seed, "method": method, "metrics": metrics})
    if task.oracle_known is not None:
        oracle = task.oracle_known
    else:
        oracle = oracle_search(objective, codec, task.oracle_runs, task.objective_seed) if task.oracle_runs > 0 else math.inf
    if not rows:  # oracle only (precomputing oracle.json)
        return [{"scenario": task.scenario, "seed": task.seed, "method": ORACLE, "metrics": [], "oracle_search": oracle}]
    best_seen = min(min(r["metrics"]) for r in rows)
    for r in rows:
        r["oracle_search"] = oracle
        r["oracle"] = min(oracle, best_seen)
    log.info("evaluated %s seed %d", task.scenario, task.seed)
    return rows


def steps_to_fraction(metrics: Sequence[float], fraction: float = 0.9) -> int:
    """The first step whose best-so-far reaches ``fraction`` of the final gain (0 if no gain)."""
    best = np.minimum.accumulate(np.asarray(metrics, dtype=np.float64))
    gain = best[0] - best[-1]
    if gain <= 0:
        return 0
    return int(np.argmax(best[0] - best >= fraction * gain - 1e-12))


def score_rows(rows: list[dict[str, Any]], baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """The per-(scenario, seed, method) figures of the module docstring."""
    frame = pd.DataFrame(rows)
    frame["reference"] = frame["metrics"].map(lambda m: m[0])
    frame["best"] = frame["metrics"].map(min)
    frame["improvement_pct"] = 100.0 * (frame["reference"] - frame["best"]) / frame["reference"]
    gap = frame["reference"] - frame["oracle"]
    frame["gap_closed"] = np.where(gap > 1e-12, (frame["reference"] - frame["best"]) / gap.where(gap > 1e-12, 1.0), 1.0)
    frame["steps_to_90"] = frame["metrics"].map(steps_to_fraction)
    present = [b for b in baselines if b in set(frame["method"])]
    best_baseline = None
    if present:
        means = frame[frame["method"].isin(present)].groupby("method")["improvement_pct"].mean()
        best_baseline = str(means.idxmax())
        bb = frame[frame["method"] == best_baseline].set_index(["scenario", "seed"])["best"]
        m_bb = frame.set_index(["scenario", "seed"]).index.map(bb.to_dict().get)
        frame["best_baseline"] = best_baseline
        frame["over_best_baseline_pct"] = 100.0 * (np.asarray(m_bb, dtype=float) - frame["best"]) / np.asarray(m_bb, dtype=float)
    frame.attrs["best_baseline"] = best_baseline
    return frame


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per method: means and 95 % intervals over seeds (scenarios averaged per seed)."""
    cols = ["improvement_pct", "over_best_baseline_pct", "gap_closed", "steps_to_90"]
    cols = [c for c in cols if c in frame.columns]
    out = []
    for method, group in frame.groupby("method", sort=False):
        per_seed = group.groupby("seed")[cols].mean()
        row: dict[str, Any] = {"method": method, "scenarios": group["scenario"].nunique(), "seeds": len(per_seed)}
        for c in cols:
            ci = mean_ci(per_seed[c].to_numpy())
            row[c] = ci.mean
            row[f"{c}_low"] = ci.low
            row[f"{c}_high"] = ci.high
        row["beats_best_baseline_share"] = float((group.get("over_best_baseline_pct", pd.Series([0.0])) > 0).mean())
        out.append(row)
    return pd.DataFrame(out)


BUDGETS = (1, 2, 3, 5, 10, 15, 20, 30, 40, 60, 80, 100)
"""The budgets (steps after the reference) at which :func:`budget_table` reports the gap closed."""


def budget_table(frame: pd.DataFrame, budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """The default→oracle gap closed after ``t`` steps, per method, for every ``t`` in ``budgets``
    that the experiments reached: how far the gap is from closing at T = 10 and how many runs a
    tuner would need. One oracle per (scenario, seed) for every budget (the frame's), so the
    columns are comparable; the last budget equals :func:`summary_table`'s ``gap_closed`` when it
    is the experiments' T. Means with 95 % intervals over seeds, scenarios averaged per seed."""
    steps = int(frame["metrics"].map(len).min()) - 1
    ts = [t for t in budgets if t <= steps]
    if steps not in ts:
        ts.append(steps)
    gap = (frame["reference"] - frame["oracle"]).to_numpy(dtype=float)
    out = []
    for t in ts:
        best_t = frame["metrics"].map(lambda m, t=t: min(m[: t + 1])).to_numpy(dtype=float)
        closed = np.where(gap > 1e-12, (frame["reference"].to_numpy(dtype=float) - best_t) / np.where(gap > 1e-12, gap, 1.0), 1.0)
        per_seed = frame.assign(closed=closed).groupby(["method", "seed"], sort=False)["closed"].mean()
        for method, values in per_seed.groupby(level="method", sort=False):
            ci = mean_ci(values.to_numpy())
            out.append({"method": method, "steps": t, "gap_closed": ci.mean, "gap_closed_low": ci.low,
                        "gap_closed_high": ci.high})
    return pd.DataFrame(out)


def budget_markdown(budget: pd.DataFrame) -> str:
    """Methods as rows, budgets as columns: the share of the gap closed (%) with its interval."""
    ts = sorted(budget["steps"].unique())
    lines = ["| method | " + " | ".join(f"T = {t}" for t in ts) + " |", "|---|" + "---:|" * len(ts)]
    for method, group in budget.groupby("method", sort=False):
        cells = group.set_index("steps")
        lines.append(f"| {md_cell(str(method))} | " + " | ".join(
            _fmt(cells.loc[t, "gap_closed"], cells.loc[t, "gap_closed_low"], cells.loc[t, "gap_closed_high"],
                 pct=False, digits=0) for t in ts) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, low: float | None, high: float | None, *, pct: bool, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    scale = 100.0 if not pct else 1.0
    s = f"{value * scale:+.{digits}f}" if pct else f"{value * scale:.{digits}f}"
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        s += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
    return s


def markdown_table(table: pd.DataFrame, best_baseline: str | None) -> str:
    return method_markdown(
        table, best_baseline, first="improvement over fixed weights (%)", last="steps to 90 % of gain",
        last_cell=lambda r: _fmt(r["steps_to_90"], r["steps_to_90_low"], r["steps_to_90_high"], pct=True,
                                 digits=1).lstrip("+"))


def method_markdown(table: pd.DataFrame, best_baseline: str | None, *, first: str, last: str,
                    last_cell: Callable[[Any], str]) -> str:
    """One row per method: improvement, over the best baseline, gap closed, and ``last``."""
    lines = [
        f"| method | {first} | over best baseline"
        + (f" ({md_cell(best_baseline)})" if best_baseline else "")
        + f" (%) | default→oracle gap closed (%) | {last} |",
        "|---|---:|---:|---:|---:|",
    ]
    for _, r in table.iterrows():
        lines.append(
            f"| {md_cell(str(r['method']))} | {_fmt(r['improvement_pct'], r['improvement_pct_low'], r['improvement_pct_high'], pct=True)} "
            f"| {_fmt(r.get('over_best_baseline_pct'), r.get('over_best_baseline_pct_low'), r.get('over_best_baseline_pct_high'), pct=True)} "
            f"| {_fmt(r['gap_closed'], r['gap_closed_low'], r['gap_closed_high'], pct=False, digits=0)} "
            f"| {last_cell(r)} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """tuning-curves.png (best-so-far latency relative to the reference vs step, per method) and
    final-improvement.png (final improvement per scenario and method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    groups = list(frame.groupby("method", sort=False))
    colors = plt.cm.tab20(np.linspace(0.0, 1.0, max(2, len(groups))))
    for (method, group), color in zip(groups, colors, strict=False):
        curves = np.stack([np.minimum.accumulate(np.asarray(m)) / m[0] for m in group["metrics"]])
        mean = curves.mean(axis=0)
        style = "-" if method in BASELINES else "--"  # baselines solid, learned policies dashed
        ax.plot(np.arange(len(mean)), mean, style, color=color, marker="o", markersize=3, label=method)
    oracle = (frame.groupby(["scenario", "seed"])["oracle"].first() / frame.groupby(["scenario", "seed"])["reference"].first()).mean()
    ax.axhline(oracle, color="black", linestyle=":", label="oracle")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole runs
    ax.set_xlabel("step")
    ax.set_ylabel("best-so-far latency / reference")
    ax.set_title("Tuning curves (mean over held-out scenarios and seeds)")
    paths.append(_save_figure(fig, ax, out_dir / "tuning-curves.png"))

    pivot = frame.groupby(["scenario", "method"], sort=False)["improvement_pct"].mean().unstack("method")
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(pivot)), 4), dpi=120)
    pivot.plot.bar(ax=ax, width=0.85, color=plt.cm.tab20(np.linspace(0.0, 1.0, max(2, pivot.shape[1]))))
    ax.set_ylabel("improvement over default weights (%)")
    ax.set_title("Final improvement per held-out scenario")
    paths.append(_save_figure(fig, ax, out_dir / "final-improvement.png"))
    return paths


def _save_figure(fig: Any, ax: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
    return path


def write_tables(frame: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    """``results.csv`` (per run), ``table.csv`` / ``table.md`` (per method), ``budget.csv`` /
    ``budget.md`` (gap closed by budget) and the plots of a scored frame; returns the per-method
    table."""
    table = summary_table(frame)
    write_scored(out_dir, frame, table, markdown_table(table, frame.attrs.get("best_baseline")), budget_table(frame))
    plot_curves(frame, out_dir)
    return table


def write_scored(out_dir: Path, frame: pd.DataFrame, table: pd.DataFrame, table_md: str, budget: pd.DataFrame) -> None:
    """The files of a scored evaluation in either protocol: ``results.csv`` (per run, ``metrics`` as
    JSON), ``table.csv`` / ``table.md`` (per method) and ``budget.csv`` / ``budget.md``."""
    flat = frame.copy()
    flat["metrics"] = flat["metrics"].map(json.dumps)
    write_atomic(out_dir / "results.csv", flat.to_csv(index=False))
    write_atomic(out_dir / "table.csv", table.to_csv(index=False))
    write_atomic(out_dir / "table.md", table_md)
    write_atomic(out_dir / "budget.csv", budget.to_csv(index=False))
    write_atomic(out_dir / "budget.md", budget_markdown(budget))


def evaluate(
    scenarios: Sequence[str],
    *,
    seeds: int,
    out_dir: Path,
    methods: Sequence[str] = BASELINES,
    policies: Mapping[str, str] | None = None,
    steps: int = 10,
    oracle_runs: int = 500,
    metric: str = "mean",
    jobs: int = 1,
    seed_offset: int = 0,
    sim_seed: int | None = None,
    objective_factory: Callable[[str, int, str], Objective] | None = None,
    config: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Run the whole comparison and write ``results.csv`` (per run), ``table.md``/``table.csv``
    (per method) and the plots to ``out_dir``. ``policies`` maps a method name to a policy zip."""
    policies = dict(policies or {})
    all_methods = tuple(methods) + tuple(p for p in policies if p not in methods)
    if not scenarios:
        raise AgentError("evaluate: no scenarios to evaluate")
    if oracle_runs and oracle_runs < 500:
        log.warning("oracle_runs=%d: the issue asks for at least 500 runs per scenario", oracle_runs)
    if seeds < 1:
        raise AgentError(f"evaluate: seeds must be >= 1, got {seeds}")
    if steps < 1:
        raise AgentError(f"evaluate: steps must be >= 1, got {steps}")
    if oracle_runs < 0:
        raise AgentError(f"evaluate: oracle_runs must be >= 0, got {oracle_runs}")
    from agent.metrics import METRICS

    if metric not in METRICS:
        raise AgentError(f"unknown metric {metric!r}; valid: {list(METRICS)}")
    _make_out_dir(out_dir)
    cache_path = out_dir / "oracle.json"
    cache = _read_oracle_cache(cache_path)

    def key(scenario: str, seed: int) -> str:
        return f"{scenario}@{seed}:{oracle_runs}:{metric}"

    def run_all(tasks: list[Task]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if jobs > 1 and objective_factory is None and len(tasks) > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                for result in pool.map(run_task, tasks):
                    out += result
        else:
            for task in tasks:
                out += run_task(task, objective_factory)
        if oracle_runs > 0:
            for r in out:
                seed = r["seed"] if sim_seed is None else sim_seed
                cache[key(r["scenario"], seed)] = r["oracle_search"]
            write_atomic(cache_path, json.dumps(cache, indent=2, sort_keys=True) + "\n")
        return out

    seed_list = list(range(seed_offset, seed_offset + seeds))
    if sim_seed is not None and oracle_runs > 0:
        # one objective per scenario: search for its oracle once, before the methods
        missing = [s for s in scenarios if key(s, sim_seed) not in cache]
        run_all([Task(s, sim_seed, (), {}, steps, oracle_runs, metric, None, sim_seed) for s in missing])
    if not all_methods and sim_seed is not None:
        return pd.DataFrame()
    tasks = [
        Task(s, seed, all_methods, policies, steps, oracle_runs, metric,
             cache.get(key(s, seed if sim_seed is None else sim_seed)), sim_seed)
        for s in scenarios
        for seed in seed_list
    ]
    rows = run_all(tasks)
    if not all_methods:
        log.info("oracle only: %d values cached in %s", len(rows), cache_path)
        return pd.DataFrame()
    frame = score_rows(rows)
    table = write_tables(frame, out_dir)
    meta = {
        "scenarios": list(scenarios),
        "seeds": seeds,
        "seed_offset": seed_offset,
        "sim_seed": sim_seed,
        "methods": list(all_methods),
        "policies": policies,
        "steps": steps,
        "oracle_runs": oracle_runs,
        "metric": metric,
        "best_baseline": frame.attrs.get("best_baseline"),
        "config": dict(config or {}),
        "provenance": provenance(),
    }
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table


def combine(dirs: Sequence[Path], out_dir: Path, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """One table from several evaluations' ``results.csv`` (e.g. a validation set evaluated in
    parts, or new policies on scenarios the baselines already ran on), rescored together: the
    oracle of a (scenario, seed) becomes the best of its search and of every run in any of them,
    and the best baseline is chosen over the union. ``methods`` keeps only those (the oracle still
    counts every run). A kept method must cover the same (scenario, seed) cells as the others, or
    its average would be over different tasks."""
    keep = ["scenario", "seed", "method", "metrics", "oracle_search"]
    parts = []
    for d in dirs:
        parts.append(read_results(Path(d))[keep])
    if not parts:
        raise AgentError("combine: no evaluation directories given")
    rows = pd.concat(parts, ignore_index=True)
    dup = rows.duplicated(["scenario", "seed", "method"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise AgentError(f"method {r['method']!r} ran twice on ({r['scenario']}, seed {r['seed']}); combine disjoint runs")
    best = rows.assign(best=rows["metrics"].map(min)).groupby(["scenario", "seed"])["best"].transform("min")
    rows["oracle"] = np.minimum(rows["oracle_search"].to_numpy(dtype=float), best.to_numpy(dtype=float))
    if methods:
        unknown = [m for m in methods if m not in set(rows["method"])]
        if unknown:
            raise AgentError(f"method {unknown[0]!r} is in none of {[str(d) for d in dirs]}")
        rows = rows[rows["method"].isin(list(methods))]
    cells = {m: set(zip(g["scenario"], g["seed"], strict=True)) for m, g in rows.groupby("method")}
    union = set().union(*cells.values())
    partial = sorted(m for m, c in cells.items() if c != union)
    if partial:
        raise AgentError(f"method {partial[0]!r} lacks {len(union - cells[partial[0]])} of the {len(union)} "
                         "(scenario, seed) cells the others cover (select methods with --methods)")
    frame = score_rows(rows.to_dict("records"))
    _make_out_dir(out_dir)
    table = write_tables(frame, out_dir)
    meta = {"combined": [str(d) for d in dirs], "scenarios": sorted(frame["scenario"].unique().tolist()),
            "methods": list(dict.fromkeys(frame["method"])), "best_baseline": frame.attrs.get("best_baseline"),
            "provenance": provenance()}
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table


RESULTS_COLUMNS = ("scenario", "seed", "method", "metrics", "oracle_search")


def read_results(directory: Path) -> pd.DataFrame:
    """An evaluation's ``results.csv``, every row checked (``metrics`` a JSON list of finite
    latencies, ``seed`` an integer, ``oracle_search`` a number): a bad file is one error naming
    the file, the row (as a spreadsheet numbers it, the header being row 1) and the column."""
    path = directory / "results.csv"
    if directory.exists() and not directory.is_dir():
        raise InputError("not a directory (combine takes directories written by `scoretune evaluate --out`)",
                         file=directory)
    if not path.is_file():
        raise AgentError(f"{path}: missing (an output of `scoretune evaluate --out {directory}`)")
    try:
        frame = pd.read_csv(path, dtype={"scenario": str, "method": str, "metrics": str}, keep_default_na=False,
                            encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=path) from None
    except pd.errors.EmptyDataError:
        raise InputError("empty (not an evaluate results table)", file=path) from None
    except (pd.errors.ParserError, ValueError) as err:
        raise InputError(f"not a CSV table: {str(err).strip()}", file=path) from None
    missing = [c for c in RESULTS_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"not an evaluate results table (no column {missing[0]!r})", file=path)
    if frame.empty:
        raise InputError("no rows (not an evaluate results table)", file=path)
    metrics, seeds, oracles = [], [], []
    for i, r in enumerate(frame.itertuples(index=False), start=2):
        try:
            m = json.loads(r.metrics)
        except (TypeError, json.JSONDecodeError):
            raise InputError(f"not a JSON list of latencies: {str(r.metrics)[:40]!r}", file=path, row=i,
                             field="metrics") from None
        if (not isinstance(m, list) or not m or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                                          and math.isfinite(x) and x > 0 for x in m)):
            raise InputError("not a non-empty list of positive finite latencies", file=path, row=i, field="metrics")
        metrics.append([float(x) for x in m])
        try:
            seed = int(str(r.seed))
            oracle = float(str(r.oracle_search))
        except ValueError:
            raise InputError("seed must be an integer and oracle_search a number", file=path, row=i,
                             field="seed/oracle_search") from None
        if math.isnan(oracle) or oracle <= 0:
            raise InputError(f"not a positive latency: {r.oracle_search!r}", file=path, row=i, field="oracle_search")
        if not r.scenario or not r.method:
            raise InputError("empty scenario or method", file=path, row=i, field="scenario/method")
        seeds.append(seed)
        oracles.append(oracle)
    frame["metrics"], frame["seed"], frame["oracle_search"] = metrics, seeds, oracles
    return frame


def _make_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("not a directory (--out names the directory the tables and plots go to)", file=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


def _read_oracle_cache(path: Path) -> dict[str, float]:
    """``oracle.json`` of an earlier evaluation into the same directory (a cache: a broken one is an
    error naming it, since silently recomputing 500-run searches would hide it)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a JSON oracle cache ({err}); delete it to recompute the oracle", file=path) from None
    if not isinstance(data, dict) or not all(isinstance(v, int | float) for v in data.values()):
        raise InputError("not a mapping of 'scenario@seed:runs:metric' to latencies; delete it to recompute",
                         file=path)
    return {str(k): float(v) for k, v in data.items()}
