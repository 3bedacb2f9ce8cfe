"""``scoretune headroom``: default-to-oracle headroom per task, for the tasks training draws from and
the tasks tuners are judged on (docs/results/headroom/)."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.options import argv_tail
from agent.cli.render import console
from agent.errors import AgentError


def headroom_command(
    out: Path = typer.Option(..., "--out", "-o", help="Directory for headroom.csv and README.md."),
    runs: int = typer.Option(300, min=10, max=100_000, help="Runs of each task's oracle search (TPE)."),
    generated: int = typer.Option(20, min=0, max=10_000, help="Training members of each generated family."),
    validation: int = typer.Option(10, min=0, max=10_000, help="Validation members of each generated family."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes."),
    ray: str | None = typer.Option(None, "--ray", help="Run on Ray: auto or an address (docs/ray.md)."),
) -> None:
    """Measure, on the simulator, how much lower than the default weights' latency the oracle gets
    on every task of training and evaluation, with each cluster's heterogeneity."""
    from agent.compute import Compute
    from agent.evaluation.headroom import default_groups, measure_headroom, summary
    from agent.formatting import md_table
    from functions.atomic import write_atomic

    if out.exists() and not out.is_dir():
        raise AgentError(f"{out}: not a directory (--out names the report directory)")
    groups = default_groups(generated, validation)
    console.print(f"{sum(len(t) for t in groups.values())} tasks x {runs}-run oracle searches -> {out}")
    frame = measure_headroom(groups, runs=runs, compute=Compute(jobs=jobs, ray=ray))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "headroom.csv", frame.to_csv(index=False, float_format="%.6g"))
    table = summary(frame)
    text = md_table(list(table.columns), table.itertuples(index=False))
    command = "scoretune headroom " + " ".join(argv_tail("headroom"))
    write_atomic(out / "summary.md", f"Command: `{command}`\n\n" + text + "\n")
    console.print(text)
