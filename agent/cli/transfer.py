"""``scoretune transfer-prior``: the training tasks' verdict on profiles, for the transfer baselines."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.options import argv_tail
from agent.cli.render import console
from agent.errors import AgentError
from agent.tuners.transfer import TRANSFER_PRIOR


def transfer_prior_command(
    out: Path = typer.Option(TRANSFER_PRIOR, "--out", "-o", help="The prior file to write."),
    generated: int = typer.Option(10, min=0, max=10_000, help="Members of each generated family (gen-N, gentrace-N, "
                                  "N < this: seeds training draws from) beside the training split."),
    small: int = typer.Option(0, min=0, max=10_000, help="Members of the small heterogeneous family (gensmall-N, "
                              "N < this) beside them."),
    runs: int = typer.Option(60, min=5, max=10_000, help="Runs of each task's TPE search."),
    top: int = typer.Option(5, min=1, max=100, help="Best profiles of each search that become candidates."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes."),
    ray: str | None = typer.Option(None, "--ray", help="Run on Ray: auto or an address (docs/ray.md)."),
) -> None:
    """Search every training task, run every task's best profiles on every task, and write the
    relative latencies the transfer baselines (learned-default, ws-cmaes, gp-warm) use."""
    from agent.compute import Compute
    from agent.evaluation.transfer_prior import build_prior, training_tasks

    if out.is_dir():
        raise AgentError(f"{out}: is a directory (--out names the prior file)")
    tasks = training_tasks(generated, small)
    console.print(f"{len(tasks)} training tasks x {runs}-run searches -> {out}")
    prior = build_prior(tasks, runs=runs, top=top, compute=Compute(jobs=jobs, ray=ray),
                        command="scoretune transfer-prior " + " ".join(argv_tail("transfer-prior")))
    prior.save(out)
    mean = prior.relative.mean(axis=1)
    console.print(f"{len(prior.actions)} candidates; learned default: {mean.min():.3f} x the default weights' latency "
                  f"on average over the training tasks (best single task: {prior.relative.min():.3f})")
