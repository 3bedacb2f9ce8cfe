"""The evaluation's files: result rows in and out, Markdown tables, plots, the oracle cache.

``results.csv`` holds one row per (scenario, seed, budget, method) experiment, each naming the
platform that served the functions; the reader also takes the files earlier versions wrote
(noise-free ones without a budget or truths, noisy ones without ``truth_seeds``, any without
``platform``: ``combine`` gives those their evaluation.json's), so every committed evaluation can be
rescored (``scoretune combine``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent.errors import AgentError, InputError
from agent.evaluation.scoring import budget_table, complete_rows, summary_table
from agent.formatting import format_ci, md_cell
from agent.loop.report import save_figure_atomic
from agent.tuners.factory import is_baseline
from functions.atomic import write_atomic

REQUIRED_COLUMNS = ("scenario", "seed", "method", "metrics", "oracle_search")


def _pct(r: Any, col: str) -> str:
    return format_ci(r.get(col), r.get(f"{col}_low"), r.get(f"{col}_high"))


def _share(r: Any, col: str) -> str:
    return format_ci(r.get(col), r.get(f"{col}_low"), r.get(f"{col}_high"), digits=0, scale=100.0, signed=False)


def method_markdown(table: pd.DataFrame, best_baseline: str | None, *, exact: bool) -> str:
    """One row per method: improvement, over the best baseline, gap closed, and the last figure
    (steps to 90 % noise-free, the claimed improvement under noise)."""
    first = "improvement over fixed weights (%)" if exact else "true improvement over fixed weights (%)"
    last = "steps to 90 % of gain" if exact else "claimed by its own runs (%)"
    lines = [
        f"| method | {first} | over best baseline"
        + (f" ({md_cell(best_baseline)})" if best_baseline else "")
        + f" (%) | default→oracle gap closed (%) | {last} |",
        "|---|---:|---:|---:|---:|",
    ]
    for _, r in table.iterrows():
        tail = _pct(r, "steps_to_90").lstrip("+") if exact else _pct(r, "claimed_pct")
        lines.append(f"| {md_cell(str(r['method']))} | {_pct(r, 'improvement_pct')} | {_pct(r, 'over_best_baseline_pct')} "
                     f"| {_share(r, 'gap_closed')} | {tail} |")
    return "\n".join(lines) + "\n"


def budget_markdown(budget: pd.DataFrame) -> str:
    """Methods as rows, budgets as columns: the share of the gap closed (%) with its interval."""
    ts = sorted(budget["steps"].unique())
    lines = ["| method | " + " | ".join(f"T = {t}" for t in ts) + " |", "|---|" + "---:|" * len(ts)]
    for method, group in budget.groupby("method", sort=False):
        cells = group.set_index("steps")
        lines.append(f"| {md_cell(str(method))} | " + " | ".join(_share(cells.loc[t], "gap_closed") for t in ts) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(frame: pd.DataFrame, out_dir: Path) -> list[Path]:
    """tuning-curves.png (best-so-far latency relative to the reference vs step, per method) and
    final-improvement.png (final improvement per scenario and method). Noise-free only: under
    noise a best-so-far *measurement* is partly luck."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    groups = list(frame.groupby("method", sort=False))
    colors = plt.cm.tab20(np.linspace(0.0, 1.0, max(2, len(groups))))
    for (method, group), color in zip(groups, colors, strict=False):
        curves = np.stack([np.minimum.accumulate(np.asarray(m)) / m[0] for m in group["metrics"]])
        style = "-" if is_baseline(str(method)) else "--"  # baselines solid, learned policies dashed
        ax.plot(np.arange(curves.shape[1]), curves.mean(axis=0), style, color=color, marker="o", markersize=3,
                label=method)
    cells = frame.groupby(["scenario", "seed"])
    ax.axhline((cells["oracle"].first() / cells["true_reference"].first()).mean(), color="black", linestyle=":",
               label="oracle")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole runs
    ax.set_xlabel("step")
    ax.set_ylabel("best-so-far latency / reference")
    ax.set_title("Tuning curves (mean over scenarios and seeds)")
    paths = [_save_figure(fig, ax, out_dir / "tuning-curves.png")]

    pivot = frame.groupby(["scenario", "method"], sort=False)["improvement_pct"].mean().unstack("method")
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(pivot)), 4), dpi=120)
    pivot.plot.bar(ax=ax, width=0.85, color=plt.cm.tab20(np.linspace(0.0, 1.0, max(2, pivot.shape[1]))))
    ax.set_ylabel("improvement over default weights (%)")
    ax.set_title("Final improvement per scenario")
    paths.append(_save_figure(fig, ax, out_dir / "final-improvement.png"))
    return paths


def _save_figure(fig: Any, ax: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
    return path


def write_tables(frame: pd.DataFrame, out_dir: Path, headline: int) -> pd.DataFrame:
    """``results.csv`` (per experiment, ``metrics`` as JSON), ``table.csv`` / ``table.md`` (per
    method at the headline budget), ``budget.csv`` / ``budget.md``, and noise-free the plots; returns
    the per-method table."""
    exact = frame.attrs.get("exact", True)
    table = summary_table(frame, None if exact else headline)
    budget = budget_table(frame)
    flat = frame.copy()
    flat["metrics"] = flat["metrics"].map(json.dumps)
    write_atomic(out_dir / "results.csv", flat.to_csv(index=False))
    write_atomic(out_dir / "table.csv", table.to_csv(index=False))
    write_atomic(out_dir / "table.md", method_markdown(table, frame.attrs.get("best_baseline"), exact=exact))
    write_atomic(out_dir / "budget.csv", budget.to_csv(index=False))
    write_atomic(out_dir / "budget.md", budget_markdown(budget))
    if exact:
        plot_curves(frame, out_dir)
    return table


def _number(value: Any, path: Path, row: int, field: str, *, positive: bool = True) -> float:
    try:
        x = float(str(value))
    except ValueError:
        raise InputError(f"not a number: {str(value)[:40]!r}", file=path, row=row, field=field) from None
    if math.isnan(x) or (positive and x <= 0):
        raise InputError(f"not a positive number: {value!r}", file=path, row=row, field=field)
    return x


def read_results(directory: Path) -> pd.DataFrame:
    """An evaluation's ``results.csv`` as result rows, every row checked (``metrics`` a JSON list of
    positive finite latencies, ``seed`` an integer, the truths positive numbers): a bad file is one
    error naming the file, the row (as a spreadsheet numbers it, the header being row 1) and the
    column. Older files get the columns they lack: noise-free ones ``budget`` = their length,
    truths = their measurements, ``truth_seeds`` 1; noisy ones ``truth_seeds`` 10."""
    path = directory / "results.csv"
    if directory.exists() and not directory.is_dir():
        raise InputError("not a directory (combine takes directories written by `scoretune evaluate --out`)",
                         file=directory)
    if not path.is_file():
        raise AgentError(f"{path}: missing (an output of `scoretune evaluate --out {directory}`)")
    try:
        frame = pd.read_csv(path, dtype={"scenario": str, "method": str, "metrics": str, "applied": str},
                            keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=path) from None
    except pd.errors.EmptyDataError:
        raise InputError("empty (not an evaluate results table)", file=path) from None
    except (pd.errors.ParserError, ValueError) as err:
        raise InputError(f"not a CSV table: {str(err).strip()}", file=path) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"not an evaluate results table (no column {missing[0]!r})", file=path)
    if frame.empty:
        raise InputError("no rows (not an evaluate results table)", file=path)
    noisy = "true_applied" in frame.columns and "truth_seeds" not in frame.columns
    rows = []
    for i, r in enumerate(frame.to_dict("records"), start=2):
        try:
            m = json.loads(r["metrics"])
        except (TypeError, json.JSONDecodeError):
            raise InputError(f"not a JSON list of latencies: {str(r['metrics'])[:40]!r}", file=path, row=i,
                             field="metrics") from None
        if (not isinstance(m, list) or not m or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                                          and math.isfinite(x) and x > 0 for x in m)):
            raise InputError("not a non-empty list of positive finite latencies", file=path, row=i, field="metrics")
        try:
            seed = int(str(r["seed"]))
        except ValueError:
            raise InputError(f"not an integer: {r['seed']!r}", file=path, row=i, field="seed") from None
        if not r["scenario"] or not r["method"]:
            raise InputError("empty scenario or method", file=path, row=i, field="scenario/method")
        metrics = [float(x) for x in m]
        row = {"scenario": r["scenario"], "seed": seed, "method": r["method"], "metrics": metrics,
               "oracle_search": _number(r["oracle_search"], path, i, "oracle_search")}
        if "true_applied" in r:
            row.update(budget=int(_number(r.get("budget", len(metrics) - 1), path, i, "budget")),
                       applied=str(r.get("applied", "")),
                       true_reference=_number(r["true_reference"], path, i, "true_reference"),
                       true_applied=_number(r["true_applied"], path, i, "true_applied"),
                       claimed_pct=_number(r.get("claimed_pct", 0.0), path, i, "claimed_pct", positive=False),
                       truth_seeds=int(_number(r.get("truth_seeds", 10 if noisy else 1), path, i, "truth_seeds")))
            for c in ("noise_cv", "lab_cv", "seed_cv"):
                row[c] = _number(r.get(c, 0.0), path, i, c, positive=False)
        rows.append(row)
    return complete_rows(pd.DataFrame(rows))


def make_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("not a directory (--out names the directory the tables and plots go to)", file=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


def read_oracle_cache(path: Path) -> dict[str, Any]:
    """An earlier evaluation's oracle cache in the same directory: per key a latency (noise-free)
    or a list of profiles' actions (noisy). A broken one is an error naming it, since silently
    recomputing 500-run searches would hide it."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a JSON oracle cache ({err}); delete it to recompute the oracle", file=path) from None

    def is_number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    def ok(v: Any) -> bool:
        return is_number(v) or (isinstance(v, list) and all(isinstance(a, list) and all(map(is_number, a)) for a in v))

    if not isinstance(data, dict) or not all(ok(v) for v in data.values()):
        raise InputError("not a mapping of scenario keys to latencies or to lists of actions; delete it to "
                         "recompute", file=path)
    return {str(k): (float(v) if is_number(v) else v) for k, v in data.items()}
