"""``scoretune transfer-reach``: what a transfer prior could give at the first run, and what a first
pick by the reference run's facts gets of it (docs/results/reach)."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.options import argv_tail
from agent.cli.render import console
from agent.errors import AgentError
from agent.tuners.transfer import TRANSFER_PRIOR


def reach_command(
    out: Path = typer.Option(..., "--out", "-o", help="Directory for reach.csv and summary.md."),
    group: list[str] = typer.Option(..., "--group", help="NAME@SEED=TASK,TASK,...: tasks judged together at that "
                                    "simulator seed, repeatable; the first is the one a variant is chosen on."),
    oracle: list[Path] = typer.Option(..., "--oracle", help="An evaluation's noise-free oracle cache (DIR/oracle.json), "
                                      "repeatable: every task needs its oracle there."),
    prior: list[Path] = typer.Option([TRANSFER_PRIOR], "--prior", help="A transfer prior, repeatable (default: the "
                                     "shipped one)."),
    widths: str = typer.Option("0.3,0.5,1,2", help="The mixture's facts widths, comma-separated."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes."),
    ray: str | None = typer.Option(None, "--ray", help="Run on Ray: auto or an address (docs/ray.md)."),
) -> None:
    """Run every prior's candidates on every task of the groups and report the gap closed at the
    first run: the prior's reach (best candidate, perfect task match, lists chosen in hindsight)
    against what learned-default and the mixture's facts-chosen first profile get."""
    from agent.compute import Compute
    from agent.evaluation.reach import Group, load_oracles, measure_reach, summary
    from agent.formatting import md_table
    from agent.tuners.transfer import TransferPrior
    from functions.atomic import write_atomic

    if out.exists() and not out.is_dir():
        raise AgentError(f"{out}: not a directory (--out names the report directory)")
    try:
        width_list = [float(w) for w in widths.split(",") if w]
    except ValueError:
        raise AgentError(f"--widths {widths!r}: expected numbers, comma-separated") from None
    if not width_list or not all(w > 0 for w in width_list):
        raise AgentError(f"--widths {widths!r}: expected positive numbers, comma-separated")
    groups = [Group.parse(g) for g in group]
    priors = {str(p): TransferPrior.load(p) for p in prior}
    frame = measure_reach(priors, groups, load_oracles(oracle), widths=width_list, compute=Compute(jobs=jobs, ray=ray))
    table, corr = summary(frame)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "reach.csv", frame.to_csv(index=False, float_format="%.6g"))
    gaps = md_table(list(table.columns), table.itertuples(index=False), "{:.0f}")
    ranks = md_table(list(corr.columns), corr.itertuples(index=False), "{:.2f}")
    text = (f"Command: `scoretune transfer-reach {' '.join(argv_tail('transfer-reach'))}`\n\n"
            f"Gap closed at the first run (%), the mean over each group's tasks:\n\n{gaps}\n\n"
            "Over the first-pick variants (learned-default and the mixture's first profile for each prior and "
            f"facts width), the rank correlation of the first group's figure with each other group's:\n\n{ranks}\n")
    write_atomic(out / "summary.md", text)
    console.print(text)

