"""The ``scoretune`` command line: ``scoretune <group> <command>``.

Each package owns the commands for its job (``testbed/scheduler/cli.py``, ``functions/cli.py``,
``loadgen/cli.py``, ...); this module, at the top of the dependency table, assembles them. Any
:class:`ScoretuneError` raised below becomes one clear ``Error: ...`` line and exit status 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from functions.errors import ScoretuneError

OPTIONAL_MODULES = {"torch": "rl", "stable_baselines3": "rl", "sb3_contrib": "rl", "tensorboard": "rl",
                    "ray": "ray"}
"""Modules only an extra installs (pyproject.toml), and which: the PPO policy needs ``rl``; the
lab (``make testbed-up``), the simulator and the search tuners do not."""


class _ScoretuneGroup(TyperGroup):
    """Turns scoretune's own errors into one ``Error: ...`` line on stderr and exit 1, for every
    command of every group (typer 0.29 vendors its own click, so click's exceptions would not be
    caught by it; ``typer.Exit`` is its public way out)."""

    def invoke(self, ctx: typer.Context):  # type: ignore[override]  # noqa: C901 - one handler per kind of failure
        try:
            return super().invoke(ctx)
        except ScoretuneError as err:
            typer.echo(f"Error: {err}", err=True)
            raise typer.Exit(1) from err
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except BrokenPipeError:
            # the reader went away (``| head``): stop quietly, as command-line tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except ModuleNotFoundError as err:
            extra = OPTIONAL_MODULES.get((err.name or "").split(".")[0])
            if extra is None:
                raise
            typer.echo(f"Error: this needs {err.name}, which scoretune's '{extra}' extra installs: "
                       f"pip install 'scoretune[{extra}]' (make setup-run and make setup install it)", err=True)
            raise typer.Exit(1) from err
        except OSError as err:
            # the operating system's own words name the file (disk full, permission denied, ...)
            where = f"{err.filename}: " if err.filename else ""
            typer.echo(f"Error: {where}{err.strerror or err}", err=True)
            raise typer.Exit(1) from err
        except Exception as err:
            # a last resort: an input no validator caught is still one line, never a traceback,
            # unless --verbose asks for it
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                raise
            typer.echo(f"Error: unexpected {type(err).__name__}: {err} (a scoretune bug: please report it; "
                       "--verbose shows the traceback)", err=True)
            raise typer.Exit(2) from err


app = typer.Typer(
    cls=_ScoretuneGroup,
    help="scoretune: learn kube-scheduler score-plugin weights for a serverless workload.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: a flag reads as a flag (typer's rich panels print `<bool>` beside every
    # flag, as if it took a value) and the option lists fit an 80-column terminal
    rich_markup_mode=None,
)
bench_app = typer.Typer(help="Measure the speed of the inner loops and print JSON.", no_args_is_help=True)


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at DEBUG level.")) -> None:
    from rich.console import Console
    from rich.logging import RichHandler

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)],
        force=True,
    )


# --- command groups, one per package job -------------------------------------------------------
# Each package adds its own lines here: an import of its typer app and one add_typer/command call.
from testbed.sim.cli import app as sim_app  # noqa: E402
from testbed.sim.cli import bench_sim  # noqa: E402

app.add_typer(sim_app, name="sim", help="The discrete-event simulator of Knative on Kubernetes.")
bench_app.command("sim")(bench_sim)

from testbed.local.cli import app as testbed_app  # noqa: E402

app.add_typer(testbed_app, name="testbed", help="The embedded lab: up, status, down.")
from testbed.local.cli import calibrate_cmd, fidelity_cmd  # noqa: E402

app.command("fidelity")(fidelity_cmd)
from agent.cli.confirm import confirm_cmd, with_aa  # noqa: E402

app.command("calibrate")(with_aa(calibrate_cmd))
app.command("confirm")(confirm_cmd)
from testbed.local.cli import bench_lab_cmd  # noqa: E402

bench_app.command("lab")(bench_lab_cmd)

from loadgen.cli import bench_replay, replay_command, workload_app  # noqa: E402

app.add_typer(workload_app, name="workload", help="Workloads: from a trace, synthetic, show.")
from loadgen.traces_cli import app as traces_app  # noqa: E402

app.add_typer(traces_app, name="traces", help="Public traces: list, fetch (pinned sources, SHA-256), verify.")
app.command("replay", help="Replay a workload open loop with Locust and record every request.")(replay_command)
bench_app.command("replay", help="Highest open-loop replay rate with dispatch lag p99 under 20 ms.")(bench_replay)

from testbed.kube.cli import app as kube_app  # noqa: E402

app.add_typer(kube_app, name="kube", help="The real Kubernetes lab: render its objects, apply a scheduler configuration.")

from testbed.scheduler.cli import app as scheduler_app  # noqa: E402
from testbed.scheduler.cli import bench_scheduler  # noqa: E402

app.add_typer(scheduler_app, name="scheduler", help="kube-scheduler scoring, profiles and KubeSchedulerConfiguration.")
bench_app.command("scheduler", help="Scheduling decisions per second, default profile, every node scored.")(bench_scheduler)

from functions.cli import app as functions_app  # noqa: E402
from functions.cli import bench_functions  # noqa: E402

app.add_typer(functions_app, name="functions", help="The function suite: list, invoke, serve, manifest, build, profile.")
bench_app.command("functions", help="Function runtime: time to ready, per-request overhead, pod rendering.")(bench_functions)

from agent.cli.bench import bench_agent, bench_grid  # noqa: E402
from agent.cli.evaluate import combine_command, evaluate_command  # noqa: E402
from agent.cli.lab_table import lab_table_command  # noqa: E402
from agent.cli.reach import reach_command  # noqa: E402
from agent.cli.train import train_command  # noqa: E402
from agent.cli.transfer import transfer_prior_command  # noqa: E402
from agent.cli.tune import tune_command  # noqa: E402

app.command("train", help="Train a tuning policy (SB3 PPO/SAC) on the simulator.")(train_command)
app.command("evaluate", help="Every method on every held-out scenario, or your own: results table and plots.")(evaluate_command)
app.command("transfer-prior", help="The training tasks' relative latency per profile, for the transfer baselines.")(
    transfer_prior_command)
app.command("transfer-reach", help="What a transfer prior could give at the first run, and what a facts-chosen "
            "first pick gets (docs/results/reach).")(reach_command)
from agent.cli.headroom import headroom_command  # noqa: E402

app.command("headroom", help="Default-to-oracle headroom of every training and evaluation task (docs/results/headroom).")(
    headroom_command)
app.command("combine", help="One results table from several `evaluate` outputs, rescored together.")(combine_command)
app.command("tune", help="One live tuning experiment on sim, local or kube (JSONL log, resume, best config).")(tune_command)
app.command("lab-table", help="The paper's table on the embedded lab: live experiments per lab scenario and method.")(
    lab_table_command)
bench_app.command("agent", help="Environment steps/s on the simulator, tuner overhead, policy inference.")(bench_agent)
bench_app.command("grid", help="The evaluation grid's tuner runs per second on the process pool and a local Ray.")(
    bench_grid)

from agent.cli.report import report_command  # noqa: E402
from agent.cli.twin import twin_app  # noqa: E402

app.command("report", help="Where the time went in a run: requests, latency, cold starts, pulls per node.")(report_command)
app.add_typer(twin_app, name="twin", help="The twin of your cluster: fit it from measured runs, export it.")

app.add_typer(bench_app, name="bench")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def terminate_as_interrupt() -> None:
    """A ``kill`` (SIGTERM: a job manager, a CI timeout, ``kill PID``) runs the same cleanup as
    Ctrl-C: every ``finally`` and context manager unwinds -- Locust stopped, a lab the command
    started torn down -- instead of the process vanishing and leaving its Locust to run out its
    time and its lab to its controller's owner check. ``tune`` installs its own handler on top
    (``testbed.backend.restoring``) and puts this one back afterwards."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def main() -> None:
    terminate_as_interrupt()
    app()


if __name__ == "__main__":
    main()
