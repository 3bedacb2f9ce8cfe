"""Terminal rendering of the agent's commands: the one place that talks to the terminal (rich)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from agent.formatting import format_ci

console = Console()


def progress_bar() -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


def step_lines(record: Any, records: list[Any]) -> str:
    """A finished step in two lines of at most 80 columns: the figures, then the profile in its
    compact form (plugin abbreviations, legend printed at the start), indented."""
    from rich.markup import escape

    from agent.loop.report import compact_label

    best = min(r.corrected() for r in records)
    anchor = f"  (anchor: reference {record.drift:.2f}x step 0)" if record.anchor is not None else ""
    return (f"step {record.step:>3}  {record.metric:.4f} s  {record.improvement_pct:+7.2f} %  best {best:.4f} s  "
            f"{escape(record.verdict)}{anchor}\n    [dim]{escape(compact_label(record.setting))}[/]")


def print_summary(summary: dict[str, Any], out: Path) -> None:
    from agent.loop.report import compact_label

    table = Table(title=f"{summary['method']} on {summary['backend']}: {summary['steps']} steps")
    for col in ("", "latency (s)", "step"):
        table.add_column(col)
    table.add_row("default weights (reference)", f"{summary['reference_metric']:.4f}", "0")
    table.add_row("best", f"{summary['best_metric']:.4f}", str(summary["best_step"]))
    console.print(table)
    best_setting = {"weights": summary["best_weights"], "strategy": summary["best_strategy"],
                    "shape": summary.get("best_shape")}
    console.print(f"best profile: {compact_label(best_setting)}")
    ci = summary.get("improvement_ci_pct") or [None, None]
    conf = summary.get("confirmation") or {}
    if conf.get("stopped_early"):
        pairs = len(conf.get("samples", []))
        console.print(f"Best step, unreplicated: {summary['improvement_pct']:+.1f} %; the paired confirmation stopped "
                      f"after {pairs} pair(s) ({format_ci(conf['improvement_pct'], unit=' %')}): no remaining pair "
                      "could make it an improvement")
        headline = "not confirmed[/]"
    elif conf.get("improvement_pct") is not None and conf.get("ci_low") is not None:
        # paired reruns measured the best profile again: that estimate is the one to report
        console.print(
            f"Best step, unreplicated: {summary['improvement_pct']:+.1f} %; paired confirmation "
            f"({len(conf.get('samples', []))} pairs):"
        )
        headline = format_ci(conf["improvement_pct"], conf["ci_low"], conf["ci_high"], unit=" %") + "[/] (95 % CI)"
    elif ci[0] is not None and summary.get("repeats", 1) > 1:
        headline = format_ci(summary["improvement_pct"], ci[0], ci[1], unit=" %") + "[/] (95 % CI)"
    else:
        headline = f"{summary['improvement_pct']:+.1f} %[/]"
    console.print(
        f"[bold]Improvement over the default weights: {headline} — {summary['verdict']}; "
        f"applied step {summary['applied_step']}, exported {out / 'best-scheduler-config.yaml'}"
    )
    if conf.get("mde_pct") is not None:
        console.print(f"the confirmation's minimum detectable effect: {conf['mde_pct']:.1f} % over {len(conf.get('samples', []))} "
                      f"pairs (paired sd {conf['sd_pct']:.1f} %)")
    if (conf.get("design") or {}).get("kind") == "two-stage":
        console.print(design_line(conf["design"]))
    seconds = summary.get("seconds") or {}
    if seconds:
        console.print("time: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))


def design_line(d: dict[str, Any]) -> str:
    """How a two-stage confirmation chose its pairs, in one line."""
    capped = f", capped at {d['cap']}" if d["pairs_needed"] > d["cap"] else ""
    return (f"pairs chosen from the noise: the first {d['first_stage']} differed by sd {d['first_stage_sd_pct']:.1f} %, "
            f"so a {d['mde_target_pct']:g} % effect needs {d['pairs_needed']} pairs{capped}; ran {d['pairs']}")


def terminal_table(table: Any, best_baseline: str | None, *, exact: bool = True) -> Table:
    """The results table for an 80-column terminal (table.md keeps the wide Markdown form): one
    column per figure, the value over its 95 % interval; method names never wrap or fold."""
    from rich import box
    from rich.markup import escape

    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                caption=f"means over seeds, 95 % CI below; best baseline: {best_baseline or '–'}")
    out.add_column("method", no_wrap=True, overflow="fold")  # a name too long for the line folds, never cut
    last = "steps\nto 90 %" if exact else "claimed\n(%)"
    for header in ("vs fixed\n(%)", "vs best\nbaseline (%)", "gap\nclosed (%)", last):
        out.add_column(header, justify="right", no_wrap=True)  # "[-12.3, 45.6]" kept whole

    def cell(r: Any, col: str, *, pct: bool, digits: int = 1) -> str:
        text = format_ci(r.get(col), r.get(f"{col}_low"), r.get(f"{col}_high"), digits=digits,
                         scale=1.0 if pct else 100.0, signed=pct)
        value, _, interval = text.partition(" [")
        return value + (f"\n[{interval}" if interval else "")

    for _, r in table.iterrows():
        out.add_row(escape(str(r["method"])), escape(cell(r, "improvement_pct", pct=True)),
                    escape(cell(r, "over_best_baseline_pct", pct=True)),
                    escape(cell(r, "gap_closed", pct=False, digits=0)),
                    escape(cell(r, "steps_to_90", pct=True).lstrip("+") if exact else cell(r, "claimed_pct", pct=True)))
    return out



def print_where(out: Path, summary: dict[str, Any]) -> None:
    """Where the time went, per node, in the reference run and in the best step's first run
    (``scoretune report RUN_DIR`` prints it for any run)."""
    from agent.loop.log import read_log, step_where
    from loadgen.where import where_table_lines

    records = {r.step: r for r in read_log(out)}
    for title, step in (("reference", 0), ("best", summary.get("best_step"))):
        record = records.get(step) if step is not None else None
        where = step_where(out, record) if record is not None else None
        if not where or (title == "best" and step == 0):
            continue
        console.print(f"where the time went, {title} (step {step}):")
        for line in where_table_lines(where):
            console.print(line, markup=False, highlight=False)
