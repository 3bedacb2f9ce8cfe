"""``scoretune lab-table``: the paper's table on the embedded lab (agent.evaluation.lab_table)."""

from __future__ import annotations

from pathlib import Path

import typer

from agent.cli.options import argv_tail, finite
from agent.cli.render import console, step_lines
from agent.errors import AgentError
from agent.rl.artefacts import SHIPPED_POLICY
from testbed.platforms import DEFAULT_PLATFORM, Platform


def lab_table_command(
    out: Path = typer.Option(Path("runs/lab-table"), "--out", "-o", help="Directory for the experiments, table.md, "
                             "results.csv."),
    scenarios: str = typer.Option(",".join(("lab-small", "lab-taints", "lab-packing")), help="Lab clusters, "
                                  "comma-separated (shipped names or paths)."),
    methods: str = typer.Option("gp,policy", help="Methods, comma-separated: baselines, 'policy' (the shipped policy, "
                                "acting as its config says) or NAME=POLICY_FILE. 'default' needs no experiment: it is "
                                "every experiment's reference."),
    seeds: int = typer.Option(2, min=1, max=100, help="Seeds per scenario and method (the workload's and the tuner's)."),
    first_seed: int = typer.Option(0, min=0, max=10_000, help="The first seed: seeds FIRST..FIRST+SEEDS-1 (more "
                                   "seeds for a finished table, or a row of one seed beside it)."),
    steps: int = typer.Option(10, min=1, max=1000, help="Runs per experiment after the reference (T)."),
    confirm: int = typer.Option(3, min=1, max=100, help="Paired reruns confirming each experiment's best profile "
                                "(with --confirm-mde, at most this many)."),
    confirm_mde: float = typer.Option(0.0, "--confirm-mde", callback=finite(0.0, 1000.0), help="Size each "
                                      "confirmation to the measured noise so a gain of this many percent is seen "
                                      "(Stein's two stages, as `tune --confirm-mde`); 0: exactly --confirm pairs."),
    anchor_every: int = typer.Option(0, "--anchor-every", min=0, max=1000, help="local: every K steps also run the "
                                     "default profile and correct for how far it moved (as `tune --anchor-every`)."),
    duration: float = typer.Option(20.0, min=5.0, max=3600.0, help="Seconds of the lab workload (6 requests/s)."),
    shipped: str = typer.Option("policy", help="The method compared with GP-BO in the last column."),
    backend: str = typer.Option("local", help="local: the embedded lab; sim: a rehearsal of the same table on the "
                                "simulator (minutes, not hours)."),
    platform: Platform = typer.Option(DEFAULT_PLATFORM, help="What serves the functions in every experiment: "
                                      "Knative (activator, KPA) or OpenWhisk (controller, invokers)."),
    runtime: str = typer.Option("process", help="How the embedded lab's nodes run pods: process, containers (real "
                                "images, runc, shaped links) or auto."),
    report_only: bool = typer.Option(False, "--report-only", metavar="", help="Only build the table from finished "
                                     "experiments."),
) -> None:
    """The paper's table on the embedded lab: one live tuning experiment per lab scenario, method
    and seed, each best profile confirmed by paired reruns (agent/evaluation/lab_table.py)."""
    from agent.evaluation.lab_table import LabMethod, collect, run_experiments, write_report

    if backend not in ("local", "sim"):
        raise AgentError(f"--backend {backend!r}: the lab table runs on local (the embedded lab) or sim")
    names = [s for s in scenarios.split(",") if s]
    specs = [LabMethod.parse(m, SHIPPED_POLICY) for m in methods.split(",") if m and m != "default"]
    if not names or not specs:
        raise AgentError("lab-table: give at least one scenario and one method besides default")
    if shipped not in [m.name for m in specs]:
        raise AgentError(f"--shipped {shipped!r} is not one of --methods")
    if anchor_every and backend != "local":
        raise AgentError(f"--anchor-every: the {backend} backend is deterministic, its reference never drifts")
    seed_list = list(range(first_seed, first_seed + seeds))
    if not report_only:
        run_experiments(out, names, specs, seed_list, steps=steps, confirm=confirm, confirm_mde=confirm_mde,
                        anchor_every=anchor_every, duration_s=duration,
                        backend=backend, platform=platform, runtime=runtime,
                        on_step=lambda record, records: console.print(step_lines(record, records)))
    frame = collect(out, names, [m.name for m in specs], seed_list)
    config = {"scenarios": names, "methods": [m.__dict__ for m in specs], "seeds": seed_list, "steps": steps,
              "confirm": confirm, "confirm_mde": confirm_mde, "anchor_every": anchor_every, "duration_s": duration, "platform": platform.value, "runtime": runtime,
              "command": "scoretune lab-table " + " ".join(argv_tail("lab-table"))}
    path = write_report(out, frame, shipped, config)
    console.print(path.read_text())
    console.print(f"wrote {path}, {out / 'results.csv'}")

