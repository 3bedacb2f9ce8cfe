"""The agent's commands: ``scoretune train``, ``scoretune evaluate``, ``scoretune tune``.

Registered in agent/cli.py. Library code logs; only this module talks to the terminal (rich).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import logging
import math
import typing
from enum import StrEnum
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

from agent.backends import Backend
from agent.errors import AgentError
from agent.metrics import Metric
from agent.tuners import Method, MethodSpec

log = logging.getLogger(__name__)
console = Console()

SHIPPED_POLICY = Path(__file__).resolve().parent / "policies" / "scoretune-ppo.zip"
NOISE_CALIBRATION = Path(__file__).resolve().parent.parent / "docs" / "results" / "noise" / "lab-small.yaml"
"""The embedded lab's measured noise (`scoretune calibrate --noise`), the noisy protocol's default."""


class Protocol(StrEnum):
    """``scoretune evaluate --protocol``."""

    NOISE_FREE = "noise-free"
    NOISY = "noisy"




# --- train: the dataclass's fields become the options ---------------------------------------------


def dataclass_command(
    cls: type, run: typing.Callable[..., Any], doc: str, *, context: bool = False
) -> typing.Callable[..., None]:
    """A typer command whose options are the fields of dataclass ``cls``.

    Field metadata: ``help`` (the ``--help`` line), ``short`` (a one-letter alias such as ``-o``)
    and ``option`` (more ``typer.Option`` arguments: ``min``, ``max``, ``callback``). A bool field
    is a ``--x/--no-x`` flag; an Enum-typed field lists its choices. Enum values reach ``cls`` as
    plain strings, so configs and logs written from it hold no enum types. With ``context``,
    ``run`` also gets the click context (to tell typed options from defaults)."""
    hints = typing.get_type_hints(cls)
    params = []
    if context:
        params.append(inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        is_flag = hints[f.name] is bool
        decls = [f"{flag}/--no-{flag[2:]}" if is_flag else flag]
        if f.metadata.get("short"):
            decls.append(f.metadata["short"])
        # metavar "": a flag takes no value, so --help shows no <bool> type beside it
        option = typer.Option(f.default, *decls, help=f.metadata.get("help"), **({"metavar": ""} if is_flag else {}),
                              **f.metadata.get("option", {}))
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=hints[f.name]))

    def command(ctx: typer.Context | None = None, **kwargs: Any) -> None:
        args = cls(**{k: v.value if isinstance(v, enum.Enum) else v for k, v in kwargs.items()})
        run(args, ctx) if context else run(args)

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
            mean, sample = MethodSpec(prefix + label), MethodSpec(prefix + label, sample=True)
            policies[str(mean)] = policies[str(sample)] = str(path)
    return policies


def evaluate_command(
    split: str = typer.Option("test", help="Scenario split to evaluate on."),
    seeds: int = typer.Option(3, min=1, max=1000, help="Seeds per scenario (independent repetitions; intervals are over seeds)."),
    out: Path = typer.Option(Path("runs/evaluate"), "--out", "-o",
                             help="Directory for table.md, table.csv, results.csv, plots."),
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
    steps: int = typer.Option(10, min=1, max=10_000, help="Runs per experiment after the reference (T)."),
    oracle_runs: int = typer.Option(500, min=0, max=1_000_000, help="Runs of the oracle's search per scenario and seed (>= 500)."),
    metric: Metric = typer.Option(Metric.MEAN, help="Latency metric."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes."),
    seed_offset: int = typer.Option(0, min=0, max=2**31 - 1, help="First seed (a validation run on the training split uses an offset)."),
    oracle_only: bool = typer.Option(False, "--oracle-only", metavar="", help="Only compute and cache the oracle (DIR/oracle.json)."),
    sim_seed: int = typer.Option(-1, min=-1, max=2**32 - 1, help="Fix the simulator's seed (one objective per scenario; seeds then vary "
                                 "only the tuners). -1: the simulator's seed follows the seed."),
    protocol: Protocol = typer.Option(Protocol.NOISE_FREE, help="noise-free: one simulator seed per objective, "
                                      "profiles memoised; noisy: every run a fresh seed and a calibrated "
                                      "measurement error, methods scored by the true quality of the profile "
                                      "they apply (agent/noisy_evaluate.py)."),
    noise: Path = typer.Option(NOISE_CALIBRATION, help="noisy: the noise calibration (`scoretune calibrate --noise`)."),
    budgets: str = typer.Option("1,2,3,5,10,20", help="noisy: the budgets (runs after the reference) of the budget "
                                "table, comma-separated; each is its own experiment."),
    truth_seeds: int = typer.Option(10, min=2, max=10_000, help="noisy: simulator seeds a profile's true value is "
                                    "the mean over (never drawn by a measurement)."),
    noise_scale: float = typer.Option(1.0, min=0.0, max=100.0, help="noisy: multiply the calibrated spread by this "
                                      "(a sensitivity analysis: 0.5 = a lab half as noisy)."),
) -> None:
    """Run every method on every held-out scenario and write the results table and plots."""
    from agent.evaluate import evaluate
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
    if protocol == Protocol.NOISY:
        _evaluate_noisy(names, policies, method_list, seeds=seeds, out=out, noise=noise, steps=steps, budgets=budgets,
                        truth_seeds=truth_seeds, oracle_runs=oracle_runs, metric=metric.value, jobs=jobs,
                        seed_offset=seed_offset, split=split, oracle_only=oracle_only, sim_seed=sim_seed,
                        noise_scale=noise_scale)
        return
    if oracle_only:
        method_list, policies = [], {}
    table = evaluate(
        names, seeds=seeds, out_dir=out, methods=method_list, policies=policies, steps=steps,
        oracle_runs=oracle_runs, metric=metric.value, jobs=jobs, seed_offset=seed_offset,
        sim_seed=None if sim_seed < 0 else sim_seed,
        config={"split": split, "command": "scoretune evaluate " + " ".join(_argv_tail("evaluate"))},
    )
    if oracle_only:
        console.print(f"oracle cached in {out / 'oracle.json'}")
        return
    best_baseline = json.loads((out / "evaluation.json").read_text()).get("best_baseline")
    console.print(terminal_table(table, best_baseline))
    console.print(f"wrote {out}/table.md, table.csv, results.csv, tuning-curves.png, final-improvement.png")


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise AgentError(f"{option} {text!r}: expected comma-separated integers") from None
    if not values or min(values) < 1 or max(values) > 10_000:
        raise AgentError(f"{option} {text!r}: expected integers in 1..10000")
    return values


def _evaluate_noisy(names: list[str], policies: dict[str, str], method_list: list[str], *, seeds: int, out: Path,
                    noise: Path, steps: int, budgets: str, truth_seeds: int, oracle_runs: int, metric: str, jobs: int,
                    seed_offset: int, split: str, oracle_only: bool, sim_seed: int, noise_scale: float) -> None:
    from agent.noisy_evaluate import evaluate_noisy
    from testbed.local.noise import load_noise_model

    if oracle_only:
        raise AgentError("--oracle-only is for the noise-free protocol (the noisy one caches its oracle profiles "
                         "in DIR/oracle-profiles.json as it runs)")
    if sim_seed >= 0:
        raise AgentError("--sim-seed fixes the simulator's seed, which the noisy protocol draws afresh for every run")
    model = load_noise_model(noise, metric)
    if noise_scale != 1.0:
        import dataclasses

        model = dataclasses.replace(model, c0=model.c0 * noise_scale)
    evaluate_noisy(
        names, seeds=seeds, out_dir=out, noise=model, methods=method_list, policies=policies, steps=steps,
        budgets=_int_list(budgets, "--budgets"), truth_seeds=truth_seeds, oracle_runs=oracle_runs, metric=metric,
        jobs=jobs, seed_offset=seed_offset,
        config={"split": split, "command": "scoretune evaluate " + " ".join(_argv_tail("evaluate"))},
    )
    console.print(f"noise: {model.to_dict()} from {noise}")
    console.print((out / "table.md").read_text())
    console.print(f"wrote {out}/table.md, table.csv, budget.md, budget.csv, results.csv, evaluation.json")


def terminal_table(table: Any, best_baseline: str | None) -> Table:
    """The results table for an 80-column terminal (table.md keeps the wide Markdown form): one
    column per figure, the value over its 95 % interval; method names never wrap or fold."""
    from rich import box
    from rich.markup import escape

    from agent.evaluate import _fmt

    out = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                caption=f"means over seeds, 95 % CI below; best baseline: {best_baseline or '–'}")
    out.add_column("method", no_wrap=True, overflow="fold")  # a name too long for the line folds, never cut
    for header in ("vs fixed\n(%)", "vs best\nbaseline (%)", "gap\nclosed (%)", "steps\nto 90 %"):
        out.add_column(header, justify="right", no_wrap=True)  # "[-12.3, 45.6]" kept whole

    def cell(r: Any, col: str, *, pct: bool, digits: int = 1) -> str:
        text = _fmt(r.get(col), r.get(f"{col}_low"), r.get(f"{col}_high"), pct=pct, digits=digits)
        value, _, interval = text.partition(" [")
        return value + (f"\n[{interval}" if interval else "")

    for _, r in table.iterrows():
        out.add_row(escape(str(r["method"])), escape(cell(r, "improvement_pct", pct=True)),
                    escape(cell(r, "over_best_baseline_pct", pct=True)),
                    escape(cell(r, "gap_closed", pct=False, digits=0)),
                    escape(cell(r, "steps_to_90", pct=True).lstrip("+")))
    return out


def combine_command(
    dirs: list[Path] = typer.Argument(..., help="Directories written by `scoretune evaluate --out`."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for the combined table.md, table.csv, results.csv, "
                             "plots."),
    methods: str = typer.Option("", help="Keep only these methods, comma-separated (default: all)."),
    protocol: Protocol = typer.Option(Protocol.NOISE_FREE, help="The protocol the evaluations ran with."),
    steps: int = typer.Option(10, min=1, max=10_000, help="noisy: the budget of the headline table."),
) -> None:
    """One results table from several evaluations (a set evaluated in parts, or new policies on
    scenarios the baselines already ran on), rescored together."""
    from agent.evaluate import combine

    if protocol == Protocol.NOISY:
        from agent.noisy_evaluate import combine_noisy

        combine_noisy(dirs, out, steps, [m for m in methods.split(",") if m] or None)
        console.print((out / "table.md").read_text())
        console.print(f"wrote {out}/table.md, table.csv, budget.md, budget.csv, results.csv, evaluation.json")
        return
    table = combine(dirs, out, [m for m in methods.split(",") if m] or None)
    best_baseline = json.loads((out / "evaluation.json").read_text()).get("best_baseline")
    console.print(terminal_table(table, best_baseline))
    console.print(f"wrote {out}/table.md, table.csv, results.csv, tuning-curves.png, final-improvement.png")


def lab_table_command(
    out: Path = typer.Option(Path("runs/lab-table"), "--out", "-o", help="Directory for the experiments, table.md, "
                             "results.csv."),
    scenarios: str = typer.Option(",".join(("lab-small", "lab-taints", "lab-packing")), help="Lab clusters, "
                                  "comma-separated (shipped names or paths)."),
    methods: str = typer.Option("gp,policy", help="Methods, comma-separated: baselines, 'policy' (the shipped policy, "
                                "acting as its config says) or NAME=POLICY_FILE. 'default' needs no experiment: it is "
                                "every experiment's reference."),
    seeds: int = typer.Option(2, min=1, max=100, help="Seeds per scenario and method (the workload's and the tuner's)."),
    steps: int = typer.Option(10, min=1, max=1000, help="Runs per experiment after the reference (T)."),
    confirm: int = typer.Option(3, min=1, max=100, help="Paired reruns confirming each experiment's best profile."),
    duration: float = typer.Option(20.0, min=5.0, max=3600.0, help="Seconds of the lab workload (6 requests/s)."),
    shipped: str = typer.Option("policy", help="The method compared with GP-BO in the last column."),
    report_only: bool = typer.Option(False, "--report-only", metavar="", help="Only build the table from finished "
                                     "experiments."),
) -> None:
    """The paper's table on the embedded lab: one live tuning experiment per lab scenario, method
    and seed, each best profile confirmed by paired reruns (agent/lab_table.py)."""
    from agent.lab_table import LabMethod, collect, run_experiments, write_report

    names = [s for s in scenarios.split(",") if s]
    specs = [LabMethod.parse(m, SHIPPED_POLICY) for m in methods.split(",") if m and m != "default"]
    if not names or not specs:
        raise AgentError("lab-table: give at least one scenario and one method besides default")
    if shipped not in [m.name for m in specs]:
        raise AgentError(f"--shipped {shipped!r} is not one of --methods")
    seed_list = list(range(seeds))
    if not report_only:
        run_experiments(out, names, specs, seed_list, steps=steps, confirm=confirm, duration_s=duration)
    frame = collect(out, names, [m.name for m in specs], seed_list)
    config = {"scenarios": names, "methods": [m.__dict__ for m in specs], "seeds": seed_list, "steps": steps,
              "confirm": confirm, "duration_s": duration,
              "command": "scoretune lab-table " + " ".join(_argv_tail("lab-table"))}
    path = write_report(out, frame, shipped, config)
    console.print(path.read_text())
    console.print(f"wrote {path}, {out / 'results.csv'}")


def _argv_tail(command: str) -> list[str]:
    import sys

    return sys.argv[sys.argv.index(command) + 1:] if command in sys.argv else []


# --- tune: the live loop -------------------------------------------------------------------------


def _finite(low: float, high: float, *, low_open: bool = False) -> typing.Callable[[float], float]:
    """A click callback: a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``);
    click's own ranges let NaN through (every comparison with NaN is false)."""

    def check(value: float) -> float:
        if value is None:
            return value
        bad_low = value <= low if low_open else value < low
        if not math.isfinite(value) or bad_low or value > high:
            raise typer.BadParameter(f"must be a finite number in {'(' if low_open else '['}{low:g}, {high:g}], "
                                     f"got {value}")
        return value

    return check


_RESUME_OPTIONS = {
    "backend": "--backend", "cluster": "--cluster", "workload": "--workload", "policy": "--policy",
    "method": "--method", "steps": "--steps", "metric": "--metric", "repeats": "--repeats", "seed": "--seed",
    "max_reruns": "--max-reruns", "confirm": "--confirm", "max_dispatch_lag_p99_s": "--max-dispatch-lag-s",
    "max_late_share": "--max-late-share", "kubeconfig": "--kubeconfig", "context": "--context",
    "namespace": "--namespace", "ingress_url": "--ingress-url", "cold_nodes": "--cold-nodes",
}
"""Config field (or backend option) -> the ``tune`` option that sets it, for resume errors."""


def _given(ctx: typer.Context) -> set[str]:
    """The parameters the user typed (not defaults)."""
    from typer._click.core import ParameterSource

    return {name for name in ctx.params if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}


def _same_cluster(a: str, b: str) -> bool:
    """Two ``--cluster`` values naming the same spec (a name and the path of its file, say)."""
    if a == b:
        return True
    from testbed.cluster import load_cluster

    try:
        return load_cluster(a) == load_cluster(b)
    except Exception:  # noqa: BLE001 - an unreadable spec is simply not the stored one
        return False


def _resume_config(stored: Any, resume: Path, given: set[str], values: dict[str, Any]) -> Any:
    """The stored config with what the command line may change applied (more ``--steps``,
    ``--max-reruns``, the kube address); any option that contradicts the stored experiment is an
    error naming the option and both values. Options left out resume the experiment as it was."""
    from agent.backends import KubeOptions
    from agent.stats import HealthBounds
    from agent.tune import absolute_if_file, read_log, resume_conflicts

    def refuse(option: str, was: Any, now: Any) -> typing.NoReturn:
        raise AgentError(f"{option} {now!r} contradicts the experiment in {resume} (run with {was!r}, "
                         f"{resume / 'config.json'}); leave {option} out to resume it as it was")

    if "overwrite" in given and values["overwrite"]:
        raise AgentError("--overwrite and --resume contradict each other: --overwrite deletes the experiment --resume continues")
    if "out" in given and values["out"] is not None and Path(values["out"]).resolve() != resume.resolve():
        refuse("--out", str(resume), str(values["out"]))
    overrides: dict[str, Any] = {}
    if values["embedded_default"]:
        if stored.workload != "lab":
            refuse("--embedded-default (workload lab)", stored.workload, "lab")
        if stored.backend not in ("local", "sim"):
            refuse("--embedded-default (backend local or sim)", stored.backend, "local or sim")
        if "policy" not in given and stored.policy != str(SHIPPED_POLICY):
            refuse("--embedded-default (the shipped policy)", stored.policy, str(SHIPPED_POLICY))
    for name in ("backend", "metric", "method"):
        if name in given:
            overrides[name] = values[name]
    for name in ("steps", "repeats", "seed", "max_reruns"):
        if name in given:
            overrides[name] = values[name]
    if "confirm" in given and values["confirm"] >= 0:
        overrides["confirm"] = values["confirm"]
    if "workload" in given:
        overrides["workload"] = absolute_if_file(values["workload"])
    if "policy" in given and values["policy"] is not None:
        overrides["policy"] = str(Path(values["policy"]).resolve())
    if "cluster" in given and values["cluster"]:
        cluster = absolute_if_file(values["cluster"])
        if not _same_cluster(stored.cluster, cluster):
            refuse("--cluster", stored.cluster, values["cluster"])
    health = stored.health
    if "max_dispatch_lag_s" in given:
        health = dataclasses.replace(health, max_dispatch_lag_p99_s=values["max_dispatch_lag_s"])
    if "max_late_share" in given:
        health = dataclasses.replace(health, max_late_share=values["max_late_share"])
    overrides["health"] = HealthBounds(**dataclasses.asdict(health))
    kube = {k: values[k] for k in ("kubeconfig", "context", "namespace", "ingress_url") if k in given}
    if "cold_nodes" in given:
        kube["cold_nodes"] = _node_names(values["cold_nodes"])
    if kube:
        if stored.backend != "kube":
            refuse(_RESUME_OPTIONS[next(iter(kube))], f"backend {stored.backend}", next(iter(kube.values())))
        overrides["backend_options"] = {**dataclasses.asdict(KubeOptions(**stored.backend_options)), **kube}
    config = dataclasses.replace(stored, **overrides)
    recorded = len(read_log(resume)) - 1
    for name, was, now in resume_conflicts(stored, config, recorded_steps=recorded):
        if name == "health":
            if was.max_dispatch_lag_p99_s != now.max_dispatch_lag_p99_s:
                refuse("--max-dispatch-lag-s", was.max_dispatch_lag_p99_s, now.max_dispatch_lag_p99_s)
            refuse("--max-late-share", was.max_late_share, now.max_late_share)
        if name == "steps":
            raise AgentError(f"--steps {now} is fewer than the {recorded} steps {resume / 'experiment.jsonl'} "
                             "already holds; give at least that many (or leave --steps out)")
        refuse(_RESUME_OPTIONS.get(name, name), was, now)
    return config


def _opt(text: str, default: Any, *, short: str | None = None, **option: Any) -> Any:
    """A :class:`TuneArgs` field: its ``--help`` line, an optional short alias, typer's range options."""
    return dataclasses.field(default=default, metadata={"help": text, "option": option,
                                                        **({"short": short} if short else {})})


@dataclasses.dataclass
class TuneArgs:
    """``scoretune tune`` arguments; each field's ``help`` is its ``--help`` line (as ``train``'s
    :class:`agent.train.Args`). The fields as typed; :func:`tune_config` turns them into an
    :class:`agent.tune.ExperimentConfig`."""

    backend: Backend = _opt("Where to run (local: the embedded lab).", "sim")
    cluster: str = _opt("Cluster spec name or path (default: the workload scenario's).", "")
    workload: str = _opt("Workload: a Parquet file, 'lab', or a scenario name.", "lab")
    policy: Path | None = _opt("Tune with this trained policy (zip; its .json beside it), acting as its config's "
                               "`act` says (mean or sample) unless --method policy|policy-sample.", None)
    method: Method | None = _opt("Tune with a baseline instead (or, with --policy, policy-sample: draw from the "
                                 "policy's Gaussian).", None)
    steps: int = _opt("Runs after the reference (T). With --resume, more steps continue a finished experiment.", 10,
                      min=1, max=10_000)
    out: Path | None = _opt("Experiment directory (log, runs, summary, best config).", None, short="-o")
    resume: Path | None = _opt("Continue the interrupted experiment in this directory (options left out are the "
                               "stored ones; contradicting ones are refused).", None)
    metric: Metric = _opt("Latency metric.", "mean")
    repeats: int = _opt("Runs per profile, each paired with a reference run when > 1.", 1, min=1, max=100)
    seed: int = _opt("Seed of the workload replay and of the tuner.", 0, min=0, max=2**32 - 1)
    max_reruns: int = _opt("Reruns of a void run (unhealthy load generator) before giving up.", 3, min=0, max=100)
    confirm: int = _opt("Measured backends: rerun the best profile N times paired with the reference before "
                        "applying it (-1: the preset's, 3 with --embedded-default, else 0).", -1, min=-1, max=100)
    max_dispatch_lag_s: float = _opt("Void a run whose p99 dispatch lag exceeds this (s).", 0.5,
                                     callback=_finite(0.0, 3600.0, low_open=True))
    max_late_share: float = _opt("Void a run with a larger share of late dispatches (0..1).", 0.05,
                                 callback=_finite(0.0, 1.0))
    overwrite: bool = _opt("Delete a previous experiment in --out first.", False)
    embedded_default: bool = _opt("make tune: the preset 'embedded-default', the shipped policy on the embedded lab "
                                  "(lab-small, the lab workload), or the simulator if the lab cannot start.", False)
    kubeconfig: str | None = _opt("kube: kubeconfig file.", None)
    context: str | None = _opt("kube: kubeconfig context.", None)
    namespace: str = _opt("kube: namespace of the functions.", "default")
    ingress_url: str | None = _opt("kube: Kourier's address, e.g. http://10.0.0.11:31080.", None)
    cold_nodes: str | None = _opt("kube: nodes (comma-separated) whose function-image cache is purged before "
                                  "every step; the others hold every image.", None)


@dataclasses.dataclass(frozen=True)
class TunePreset:
    """A named set of values for the :class:`TuneArgs` options a user leaves out (an option typed
    on the command line wins). ``backend`` may be ``auto``: the embedded lab, or the simulator if
    the lab cannot start (:func:`agent.backends.embedded_default_backend`)."""

    name: str
    backend: str
    workload: str
    policy: Path
    confirm: int

    def apply(self, args: TuneArgs, given: set[str]) -> TuneArgs:
        values = {"backend": self.backend, "workload": self.workload, "policy": self.policy}
        changes = {k: v for k, v in values.items() if k not in given}
        if args.confirm < 0:
            changes["confirm"] = self.confirm
        return dataclasses.replace(args, **changes)


EMBEDDED_DEFAULT = TunePreset("embedded-default", backend="auto", workload="lab", policy=SHIPPED_POLICY, confirm=3)


def _node_names(text: str | None) -> list[str]:
    """``a,b`` as node names (DNS-1123 subdomains, as Kubernetes names nodes), each once."""
    import re

    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    for n in names:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", n):
            raise AgentError(f"--cold-nodes: {n!r} is not a Kubernetes node name")
    if len(set(names)) != len(names):
        raise AgentError(f"--cold-nodes: a node is named twice in {text!r}")
    return names


def tune_config(args: TuneArgs, given: set[str]) -> Any:
    """A new experiment's :class:`agent.tune.ExperimentConfig` from the options (``given``: the
    ones typed on the command line), every contradiction an :class:`AgentError` naming the option."""
    from agent.backends import KubeOptions
    from agent.stats import HealthBounds
    from agent.tune import ExperimentConfig
    from agent.tuners import policy_method

    if args.embedded_default:
        args = EMBEDDED_DEFAULT.apply(args, given)
    policy, method = args.policy, args.method
    if policy is not None and method in ("policy", "policy-sample"):
        pass  # the policy, deterministic or sampling
    elif (policy is None) == (not method):
        raise AgentError("give exactly one of --policy FILE or --method NAME")
    if policy is not None and not Path(policy).is_file():
        raise AgentError(f"{policy}: policy file does not exist" if not Path(policy).exists()
                         else f"{policy}: not a file (--policy names a policy zip)")
    if policy is not None and not method:
        method = policy_method(Path(policy))  # the policy's own act mode (mean or sample)
    return ExperimentConfig(
        method=method or "policy", backend=args.backend, cluster=args.cluster, workload=args.workload,
        steps=args.steps, metric=args.metric, repeats=args.repeats, seed=args.seed,
        policy=str(policy) if policy else None, max_reruns=args.max_reruns, confirm=max(args.confirm, 0),
        health=HealthBounds(max_dispatch_lag_p99_s=args.max_dispatch_lag_s, max_late_share=args.max_late_share),
        backend_options=dataclasses.asdict(KubeOptions(args.kubeconfig, args.context, args.namespace, args.ingress_url,
                                                       cold_nodes=_node_names(args.cold_nodes)))
        if args.backend == "kube" else {},
    ).with_absolute_paths()


def _tune(args: TuneArgs, ctx: typer.Context) -> None:
    """``scoretune tune``: the config (new or resumed), the tuner, the backend, the loop."""
    from agent.actions import ActionCodec
    from agent.backends import KubeOptions, embedded_default_backend, make_backend, resolve_workload
    from agent.scenario_objectives import workload_context
    from agent.tune import CONFIG_NAME, ExperimentConfig
    from agent.tuners import make_tuner
    from testbed.cluster import load_cluster

    given = _given(ctx)
    if args.resume is not None:
        stored = ExperimentConfig.load(args.resume)
        config = _resume_config(stored, args.resume, given, dataclasses.asdict(args))
        out = args.resume
    else:
        if args.out is None:
            raise AgentError("--out DIR is required (or --resume DIR)")
        out = args.out
        if out.exists() and not out.is_dir():
            raise AgentError(f"{out}: not a directory (--out names the experiment directory)")
        if args.overwrite and (out / CONFIG_NAME).exists():
            import shutil

            shutil.rmtree(out)
        config = tune_config(args, given)

    wl, scenario_cluster = resolve_workload(config.workload, seed=config.seed)
    cluster_name = config.cluster or scenario_cluster
    if not cluster_name and config.backend != "kube":
        raise AgentError("--cluster is required for this workload (it names no cluster)")
    spec = load_cluster(cluster_name) if cluster_name else None
    # the tuner first: a broken policy file fails before a lab starts
    context_facts = workload_context(spec, wl) if spec is not None else {}
    tuner = make_tuner(config.method, ActionCodec(), seed=config.seed,
                       policy=Path(config.policy) if config.policy else None, steps=config.steps,
                       context=context_facts)
    if config.backend == "auto":
        be, chosen = embedded_default_backend(seed=config.seed)
        config = dataclasses.replace(config, backend=chosen, cluster=cluster_name)
    else:
        be = make_backend(config.backend, spec, seed=config.seed, kube=KubeOptions(**config.backend_options)
                          if config.backend_options else None)
        config = dataclasses.replace(config, cluster=cluster_name or "")
    _run_experiment(config, be, wl, tuner, out, resume=args.resume is not None)


def _run_experiment(config: Any, be: Any, wl: Any, tuner: Any, out: Path, *, resume: bool) -> None:
    """The tuning loop with its progress bar and per-step lines, then the summary table."""
    from agent.tune import Experiment, label_legend

    console.print(f"[bold]scoretune tune[/]: {config.method} on [bold]{config.backend}[/], cluster {config.cluster or '(live)'}, "
                  f"workload {wl.name} ({len(wl)} requests, {wl.duration_s:.0f} s), {config.steps} steps -> {out}")
    console.print("[dim]profiles: " + "\n".join(label_legend(70)) + "[/]")
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    task = progress.add_task("step 0", total=config.steps + 1)

    def on_start(step: int, setting: Any) -> None:
        what = f"step {step}" if step <= config.steps else f"confirmation {step - config.steps}/{config.confirm}"
        progress.update(task, description=what)

    def on_step(record: Any, records: list[Any]) -> None:
        progress.console.print(step_lines(record, records))
        progress.update(task, completed=len(records))

    try:
        with progress:
            if resume:
                from agent.tune import read_log

                progress.update(task, completed=len(read_log(out)))
            summary = Experiment(config, be, wl, tuner, out, on_start=on_start, on_step=on_step).run(resume=resume)
    finally:
        be.close()
    _print_summary(summary, out)


tune_command = dataclass_command(
    TuneArgs, _tune, "Run one live tuning experiment: each step applies a profile, runs the workload, logs the result.",
    context=True,
)


def step_lines(record: Any, records: list[Any]) -> str:
    """A finished step in two lines of at most 80 columns: the figures, then the profile in its
    compact form (plugin abbreviations, legend printed at the start), indented."""
    from rich.markup import escape

    from agent.tune import compact_label

    best = min(r.metric for r in records)
    return (f"step {record.step:>3}  {record.metric:.4f} s  {record.improvement_pct:+7.2f} %  best {best:.4f} s  "
            f"{escape(record.verdict)}\n    [dim]{escape(compact_label(record.setting))}[/]")


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    from agent.tune import compact_label, format_ci

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
    if conf.get("improvement_pct") is not None and conf.get("ci_low") is not None:
        # paired reruns measured the best profile again: that estimate is the one to report
        console.print(
            f"Best step, unreplicated: {summary['improvement_pct']:+.1f} %; paired confirmation "
            f"({len(conf.get('samples', []))} pairs):"
        )
        headline = format_ci(conf["improvement_pct"], conf["ci_low"], conf["ci_high"]) + "[/] (95 % CI)"
    elif ci[0] is not None and summary.get("repeats", 1) > 1:
        headline = format_ci(summary["improvement_pct"], ci[0], ci[1]) + "[/] (95 % CI)"
    else:
        headline = f"{summary['improvement_pct']:+.1f} %[/]"
    console.print(
        f"[bold]Improvement over the default weights: {headline} — {summary['verdict']}; "
        f"applied step {summary['applied_step']}, exported {out / 'best-scheduler-config.yaml'}"
    )
