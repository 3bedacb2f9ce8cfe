"""``scoretune report RUN_DIR``: where the time went in one run, per node (any backend's run directory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from agent.cli.render import console
from agent.errors import InputError


def read_where(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run directory's summary and its ``where`` section (computed from the tables for a run
    written before summaries carried it, or carried an older version of it)."""
    from loadgen.results import read_run, run_where

    if not directory.is_dir():
        raise InputError("not a run directory (a folder with requests.parquet, placements.parquet and summary.json)",
                         file=directory)
    run = read_run(directory)
    return run.summary, run_where(run)


def start_lines(summary: dict[str, Any]) -> list[str]:
    """Cold and warm requests apart (SeBS reports them apart: a mean over both moves with the cold
    share as much as with either), and the lab's scale and host probe where the run has them."""
    def s(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f} s"

    out = []
    by = summary.get("by_start")
    if by:
        out += [f"{kind}: {by[kind]['count']} requests, p50 {s(by[kind]['p50_s'])}, p95 {s(by[kind]['p95_s'])}, "
                f"mean {s(by[kind]['mean_s'])}" for kind in ("cold", "warm")]
    scale = summary.get("lab_scale")
    if scale and scale.get("factor", 1.0) < 1.0:
        out.append(f"lab scaled to its host by {scale['factor']:.3f}: {scale['requests_replayed']} of "
                   f"{scale['requests_declared']} requests replayed")
    probe = (summary.get("host") or {}).get("probe")
    if probe:
        out.append(f"host probe: cpu {probe['cpu_ms']:.1f} ms, unpack {probe.get('unpack_ms') or float('nan'):.1f} ms")
    return out


def report_command(run_dir: Path = typer.Argument(..., help="A run directory (sim, local or kube).")) -> None:
    """Where the time went in one run: requests, latency, cold starts and image pulls per node."""
    from loadgen.where import where_table_lines

    summary, where = read_where(run_dir)
    mean = summary.get("latency_mean_s")
    console.print(f"{run_dir}: {summary.get('count', 0)} requests, {summary.get('ok', 0)} ok, mean "
                  f"{'-' if mean is None else f'{mean:.4f} s'} on {summary.get('backend', '?')}"
                  + (" [bold red](failed run)[/]" if summary.get("failed") else ""))
    for line in start_lines(summary):
        console.print(line, markup=False, highlight=False)
    for line in where_table_lines(where):
        console.print(line, markup=False, highlight=False)
