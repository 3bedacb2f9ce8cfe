"""``scoretune sim ...``: the simulator's commands."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="The discrete-event simulator of Knative on Kubernetes.", no_args_is_help=True)


@app.command("autoscale")
def autoscale(
    spec: Path = typer.Option(..., "--spec", help="Decider spec JSON (+ ready_pods_at_creation)."),
    steps: Path = typer.Option(..., "--steps", help="JSON list of {t_s, ready_pods, observed_stable, observed_panic}."),
) -> None:
    """Run the KPA decider alone, as Knative's decider tests drive it; print one result per step."""
    from testbed.autoscaler.drive import run_files

    typer.echo(json.dumps(run_files(spec, steps), indent=2))
