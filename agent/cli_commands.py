"""The agent's commands: ``scoretune train``, ``scoretune evaluate``, ``scoretune tune``.

Registered in agent/cli.py. Library code logs; only this module talks to the terminal (rich).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import typing
from pathlib import Path
from typing import Any

import typer
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

from agent.errors import AgentError

log = logging.getLogger(__name__)
console = Console()

SHIPPED_POLICY = Path(__file__).resolve().parent / "policies" / "scoretune-ppo.zip"


# --- train: the dataclass's fields become the options ---------------------------------------------


def dataclass_command(cls: type, run: typing.Callable[[Any], Any], doc: str) -> typing.Callable[..., None]:
    """A typer command whose options are the fields of dataclass ``cls`` (help from field metadata)."""
    hints = typing.get_type_hints(cls)
    params = []
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        decl = f"{flag}/--no-{flag[2:]}" if hints[f.name] is bool else flag
        option = typer.Option(f.default, decl, help=f.metadata.get("help"))
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=hints[f.name]))

    def command(**kwargs: Any) -> None:
        run(cls(**kwargs))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc
    command.__name__ = cls.__name__.lower()
    return command


def _train(args: Any) -> None:
    from agent.train import train

    path = train(args)
    console.print(f"model: [bold]{path}[/]  config: {path.with_suffix('.json')}")


def _train_command() -> typing.Callable[..., None]:
    from agent.train import Args

    return dataclass_command(
        Args, _train, "Train a tuning policy (SB3 PPO or SAC) on the simulator over the training scenarios."
    )


train_command = _train_command()


# --- evaluate ------------------------------------------------------------------------------------


def checkpoint_policies(items: list[str]) -> dict[str, str]:
    """``--checkpoints`` items (``RUN`` or ``NAME=RUN``) as evaluate's policies: every checkpoint
    twice, ``[NAME/]Nk`` (mean action) and ``[NAME/]Nk:sample``."""
    from agent.tuners import run_checkpoints

    policies: dict[str, str] = {}
    for item in items:
        name, sep, run = item.rpartition("=")
        if sep and not name:
            raise AgentError(f"--checkpoints {item!r}: expected RUN or NAME=RUN")
        prefix = f"{name}/" if sep else ""
        for label, path in run_checkpoints(Path(run)).items():
            if prefix + label in policies:
                raise AgentError(f"--checkpoints: two runs give method {prefix + label!r}; name them NAME=RUN")
            policies[prefix + label] = policies[f"{prefix}{label}:sample"] = str(path)
    return policies


def evaluate_command(
    split: str = typer.Option("test", help="Scenario split to evaluate on."),
    seeds: int = typer.Option(3, help="Seeds per scenario (independent repetitions; intervals are over seeds)."),
    out: Path = typer.Option(Path("docs/results"), help="Directory for table.md, table.csv, results.csv, plots."),
    policy: Path = typer.Option(SHIPPED_POLICY, help="The policy evaluated as method 'policy'."),
    ablation: list[str] = typer.Option([], help="More policies as NAME=FILE (the ablations), repeatable. A NAME ending in "
                                      "':sample' draws from the policy's Gaussian, ':sample-stdX' with X times its std; "
                                      "otherwise it plays its mean action."),
    checkpoints: list[str] = typer.Option([], help="Also every checkpoint of this training run (RUN/checkpoints), as "
                                          "methods Nk (mean action) and Nk:sample: the validation of a run. "
                                          "Repeatable as NAME=RUN: methods NAME/Nk and NAME/Nk:sample."),
    methods: str = typer.Option("default,equal,random,tpe,gp,cmaes,hill", help="Baselines, comma-separated."),
    scenarios: str = typer.Option("", help="Comma-separated scenario names, or gen-N / gentrace-N for member N of the "
                                  "synthetic / trace-window generated family (default: the whole split)."),
    steps: int = typer.Option(10, help="Runs per experiment after the reference (T)."),
    oracle_runs: int = typer.Option(500, help="Runs of the oracle's search per scenario and seed (>= 500)."),
    metric: str = typer.Option("mean", help="Latency metric: mean, p50, p95 or p99."),
    jobs: int = typer.Option(2, help="Worker processes."),
    seed_offset: int = typer.Option(0, help="First seed (a validation run on the training split uses an offset)."),
    oracle_only: bool = typer.Option(False, "--oracle-only", help="Only compute and cache the oracle (DIR/oracle.json)."),
    sim_seed: int = typer.Option(-1, help="Fix the simulator's seed (one objective per scenario; seeds then vary "
                                 "only the tuners). -1: the simulator's seed follows the seed."),
) -> None:
    """Run every method on every held-out scenario and write the results table and plots."""
    from agent.evaluate import evaluate, markdown_table
    from agent.scenario_objectives import split_names

    names = [s for s in scenarios.split(",") if s] or split_names(split)
    policies: dict[str, str] = {}
    if policy and str(policy) not in ("", "none") and not oracle_only:
        if not policy.exists():
            raise AgentError(f"{policy}: policy file does not exist (train one with `scoretune train --ship NAME`)")
        policies["policy"] = str(policy)
    for item in ablation:
        name, sep, file = item.partition("=")
        if not sep or not name or not file:
            raise AgentError(f"--ablation {item!r}: expected NAME=FILE")
        if not Path(file).exists():
            raise AgentError(f"--ablation {item!r}: {file} does not exist")
        policies[name] = file
    policies.update(checkpoint_policies(checkpoints))
    method_list = [m for m in methods.split(",") if m]
    if oracle_only:
        method_list, policies = [], {}
    table = evaluate(
        names, seeds=seeds, out_dir=out, methods=method_list, policies=policies, steps=steps,
        oracle_runs=oracle_runs, metric=metric, jobs=jobs, seed_offset=seed_offset,
        sim_seed=None if sim_seed < 0 else sim_seed,
        config={"split": split, "command": "scoretune evaluate " + " ".join(_argv_tail("evaluate"))},
    )
    if oracle_only:
        console.print(f"oracle cached in {out / 'oracle.json'}")
        return
    best_baseline = json.loads((out / "evaluation.json").read_text()).get("best_baseline")
    console.print(markdown_table(table, best_baseline))
    console.print(f"wrote {out}/table.md, table.csv, results.csv, tuning-curves.png, final-improvement.png")


def combine_command(
    dirs: list[Path] = typer.Argument(..., help="Directories written by `scoretune evaluate --out`."),
    out: Path = typer.Option(..., help="Directory for the combined table.md, table.csv, results.csv, plots."),
    methods: str = typer.Option("", help="Keep only these methods, comma-separated (default: all)."),
) -> None:
    """One results table from several evaluations (a set evaluated in parts, or new policies on
    scenarios the baselines already ran on), rescored together."""
    from agent.evaluate import combine, markdown_table

    table = combine(dirs, out, [m for m in methods.split(",") if m] or None)
    best_baseline = json.loads((out / "evaluation.json").read_text()).get("best_baseline")
    console.print(markdown_table(table, best_baseline))
    console.print(f"wrote {out}/table.md, table.csv, results.csv, tuning-curves.png, final-improvement.png")


def _argv_tail(command: str) -> list[str]:
    import sys

    return sys.argv[sys.argv.index(command) + 1:] if command in sys.argv else []


# --- tune: the live loop -------------------------------------------------------------------------


def tune_command(
    backend: str = typer.Option("sim", help="Where to run: sim, local (embedded lab) or kube."),
    cluster: str = typer.Option("", help="Cluster spec name or path (default: the workload scenario's)."),
    workload: str = typer.Option("lab", help="Workload: a Parquet file, 'lab', or a scenario name."),
    policy: Path = typer.Option(None, help="Tune with this trained policy (zip; its .json beside it), acting as "
                                "its config's `act` says (mean or sample) unless --method policy|policy-sample."),
    method: str = typer.Option("", help="Tune with a baseline instead: default, equal, random, tpe, gp, cmaes, hill "
                               "(or, with --policy, policy-sample: draw from the policy's Gaussian)."),
    steps: int = typer.Option(10, help="Runs after the reference (T)."),
    out: Path = typer.Option(None, help="Experiment directory (log, runs, summary, best config)."),
    resume: Path = typer.Option(None, help="Continue the interrupted experiment in this directory."),
    metric: str = typer.Option("mean", help="Latency metric: mean, p50, p95 or p99."),
    repeats: int = typer.Option(1, help="Runs per profile, each paired with a reference run when > 1."),
    seed: int = typer.Option(0, help="Seed of the workload replay and of the tuner."),
    max_reruns: int = typer.Option(3, help="Reruns of a void run (unhealthy load generator) before giving up."),
    confirm: int = typer.Option(-1, help="Measured backends: rerun the best profile N times paired with the "
                                "reference before applying it (-1: 3 with --embedded-default, else 0)."),
    max_dispatch_lag_s: float = typer.Option(0.5, help="Void a run whose p99 dispatch lag exceeds this (s)."),
    max_late_share: float = typer.Option(0.05, help="Void a run with a larger share of late dispatches."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete a previous experiment in --out first."),
    embedded_default: bool = typer.Option(
        False, "--embedded-default",
        help="make tune: the shipped policy on the embedded lab (lab-small, the lab workload), or the simulator if the lab cannot start.",
    ),
    kubeconfig: str = typer.Option(None, help="kube: kubeconfig file."),
    context: str = typer.Option(None, help="kube: kubeconfig context."),
    namespace: str = typer.Option("default", help="kube: namespace of the functions."),
    ingress_url: str = typer.Option(None, help="kube: Kourier's address, e.g. http://10.0.0.11:31080."),
) -> None:
    """Run one live tuning experiment: each step applies a profile, runs the workload, logs the result."""
    from agent.actions import ActionCodec
    from agent.backends import KubeOptions, embedded_default_backend, make_backend, resolve_workload
    from agent.scenario_objectives import workload_context
    from agent.stats import HealthBounds
    from agent.tune import CONFIG_NAME, Experiment, ExperimentConfig
    from agent.tuners import make_tuner
    from testbed.cluster import load_cluster

    if resume is not None:
        cfg_path = resume / CONFIG_NAME
        if not cfg_path.exists():
            raise AgentError(f"{cfg_path}: no experiment to resume")
        config = ExperimentConfig.from_dict(json.loads(cfg_path.read_text()), file=cfg_path)
        out = resume
    else:
        if out is None:
            raise AgentError("--out DIR is required (or --resume DIR)")
        if overwrite and (out / CONFIG_NAME).exists():
            import shutil

            shutil.rmtree(out)
        if embedded_default:
            policy = policy or SHIPPED_POLICY
            workload = "lab"
            backend = "auto"
        if policy is not None and method in ("policy", "policy-sample"):
            pass  # the policy, deterministic or sampling
        elif (policy is None) == (not method):
            raise AgentError("give exactly one of --policy FILE or --method NAME")
        if policy is not None and not Path(policy).exists():
            raise AgentError(f"{policy}: policy file does not exist")
        if policy is not None and not method:
            from agent.tuners import policy_method

            method = policy_method(Path(policy))  # the policy's own act mode (mean or sample)
        config = ExperimentConfig(
            method=method or "policy", backend=backend, cluster=cluster, workload=workload, steps=steps,
            metric=metric, repeats=repeats, seed=seed, policy=str(policy) if policy else None,
            max_reruns=max_reruns,
            confirm=(3 if embedded_default else 0) if confirm < 0 else confirm,
            health=HealthBounds(max_dispatch_lag_p99_s=max_dispatch_lag_s, max_late_share=max_late_share),
            backend_options=dataclasses.asdict(KubeOptions(kubeconfig, context, namespace, ingress_url))
            if backend == "kube" else {},
        )

    wl, scenario_cluster = resolve_workload(config.workload, seed=config.seed)
    cluster_name = config.cluster or scenario_cluster
    if not cluster_name and config.backend != "kube":
        raise AgentError("--cluster is required for this workload (it names no cluster)")
    spec = load_cluster(cluster_name) if cluster_name else None
    if config.backend == "auto":
        be, chosen = embedded_default_backend(seed=config.seed)
        config = dataclasses.replace(config, backend=chosen, cluster=cluster_name)
    else:
        be = make_backend(config.backend, spec, seed=config.seed, kube=KubeOptions(**config.backend_options)
                          if config.backend_options else None)
        config = dataclasses.replace(config, cluster=cluster_name or "")
    context_facts = workload_context(spec, wl) if spec is not None else {}
    tuner = make_tuner(config.method, ActionCodec(), seed=config.seed,
                       policy=Path(config.policy) if config.policy else None, steps=config.steps,
                       context=context_facts)

    console.print(f"[bold]scoretune tune[/]: {config.method} on [bold]{config.backend}[/], cluster {config.cluster or '(live)'}, "
                  f"workload {wl.name} ({len(wl)} requests, {wl.duration_s:.0f} s), {config.steps} steps -> {out}")
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task("step 0", total=config.steps + 1)

    def on_start(step: int, setting: Any) -> None:
        progress.update(task, description=f"step {step}: {setting.label()}")

    def on_step(record: Any, records: list[Any]) -> None:
        best = min(r.metric for r in records)
        progress.console.print(
            f"step {record.step:>2}  {record.metric:.4f} s  {record.improvement_pct:+6.2f} %  best {best:.4f} s  "
            f"[dim]{record.label}[/]  {record.verdict}"
        )
        progress.update(task, completed=len(records))

    try:
        with progress:
            if resume is not None:
                from agent.tune import read_log

                progress.update(task, completed=len(read_log(out)))
            summary = Experiment(config, be, wl, tuner, out, on_start=on_start, on_step=on_step).run(
                resume=resume is not None)
    finally:
        be.close()
    _print_summary(summary, out)


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    table = Table(title=f"{summary['method']} on {summary['backend']}: {summary['steps']} steps")
    for col in ("", "latency (s)", "step"):
        table.add_column(col)
    table.add_row("default weights (reference)", f"{summary['reference_metric']:.4f}", "0")
    table.add_row("best", f"{summary['best_metric']:.4f}", str(summary["best_step"]))
    console.print(table)
    ci = summary.get("improvement_ci_pct") or [None, None]
    ci_text = f" (95 % CI {ci[0]:+.2f} .. {ci[1]:+.2f} %)" if ci[0] is not None and summary.get("repeats", 1) > 1 else ""
    conf = summary.get("confirmation") or {}
    if conf.get("improvement_pct") is not None and conf.get("ci_low") is not None:
        # paired reruns measured the best profile again: that estimate is the one to report
        console.print(
            f"Best step, unreplicated: {summary['improvement_pct']:+.2f} %; paired confirmation "
            f"({len(conf.get('samples', []))} pairs):"
        )
        headline = f"{conf['improvement_pct']:+.2f} %[/] (95 % CI {conf['ci_low']:+.2f} .. {conf['ci_high']:+.2f} %)"
    else:
        headline = f"{summary['improvement_pct']:+.2f} %[/]{ci_text}"
    console.print(
        f"[bold]Improvement over the default weights: {headline} — {summary['verdict']}; "
        f"applied step {summary['applied_step']}, exported {out / 'best-scheduler-config.yaml'}"
    )
