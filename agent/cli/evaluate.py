"""``scoretune evaluate`` and ``combine``: tuners compared on named scenarios or the user's own."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from agent.cli.options import argv_tail
from agent.cli.render import console, terminal_table
from agent.errors import AgentError
from agent.metrics import Metric
from agent.rl.artefacts import SHIPPED_POLICY
from agent.tuners.factory import BASELINES, MethodSpec
from testbed.platforms import DEFAULT_PLATFORM, Platform

NOISE_CALIBRATION = Path(__file__).resolve().parents[2] / "docs" / "results" / "noise" / "quiet.yaml"
"""The noisy protocol's default: the lab measured on a quiet machine (docs/results/noise: 8 repeats per cell; the
earlier lab-small.yaml, measured beside other jobs, and hog.yaml, beside a CPU hog, are the sensitivity rows)."""


class Noise(StrEnum):
    """``scoretune evaluate --protocol``: the measurement noise the tuners face."""

    NOISE_FREE = "noise-free"
    NOISY = "noisy"


def checkpoint_policies(items: list[str]) -> dict[str, str]:
    """``--checkpoints`` items (``RUN`` or ``NAME=RUN``) as evaluate's policies: every checkpoint
    twice, ``[NAME/]Nk`` (mean action) and ``[NAME/]Nk:sample``."""
    from agent.rl.artefacts import run_checkpoints

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




def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise AgentError(f"{option} {text!r}: expected comma-separated integers") from None
    if not values or min(values) < 1 or max(values) > 10_000:
        raise AgentError(f"{option} {text!r}: expected integers in 1..10000")
    return values


def _policies(policy: Path | None, ablation: list[str], checkpoints: list[str]) -> dict[str, str]:
    policies: dict[str, str] = {}
    if policy and str(policy) not in ("", "none"):
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
    return policies


def _scenario_names(split: str, scenarios: str, user: list[str]) -> list[str]:
    """The named scenarios (``--scenarios``, else the split unless ``--scenario`` is given) and the
    user's CLUSTER=WORKLOAD pairs, each checked now: a bad file is one line before anything runs."""
    from agent.objectives.sim import load_user_scenario, split_names

    names = [s for s in scenarios.split(",") if s] or ([] if user else split_names(split))
    for spec in user:
        load_user_scenario(spec)
        if spec in names:
            raise AgentError(f"--scenario {spec!r} is given twice")
        names.append(spec)
    return names


def evaluate_command(
    split: str = typer.Option("test", help="Scenario split to evaluate on (when no --scenarios/--scenario)."),
    scenarios: str = typer.Option("", help="Comma-separated scenario names, or gen-N / gentrace-N for member N of the "
                                  "synthetic / trace-window generated family (default: the whole split)."),
    scenario: list[str] = typer.Option([], "--scenario", help="Your own scenario as CLUSTER.yaml=WORKLOAD.parquet (a "
                                       "cluster spec and a workload from `scoretune workload`), repeatable; "
                                       "evaluated beside --scenarios."),
    seeds: int = typer.Option(3, min=1, max=1000, help="Seeds per scenario (independent repetitions; intervals are over seeds)."),
    out: Path = typer.Option(Path("runs/evaluate"), "--out", "-o", help="Directory for table.md, table.csv, "
                             "results.csv, budget.md, plots; each finished task is kept in DIR/tasks/ and "
                             "reused when the same command runs again (a stopped evaluation resumes)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write a summary here: per method, the mean "
                                         "improvement over the default weights (%) and the gap closed (0..1), overall "
                                         "and per scenario."),
    policy: Path = typer.Option(SHIPPED_POLICY, help="The policy evaluated as method 'policy' ('none': no policy)."),
    ablation: list[str] = typer.Option([], help="More policies as NAME=FILE (the ablations), repeatable. A NAME ending in "
                                      "':sample' draws from the policy's Gaussian, ':sample-stdX' with X times its std; "
                                      "otherwise it plays its mean action."),
    checkpoints: list[str] = typer.Option([], help="Also every checkpoint of this training run (RUN/checkpoints), as "
                                          "methods Nk (mean action) and Nk:sample: the validation of a run. "
                                          "Repeatable as NAME=RUN: methods NAME/Nk and NAME/Nk:sample."),
    methods: str = typer.Option(",".join(BASELINES), help="Baselines, comma-separated (gp-noisy and X+reeval too)."),
    prior: Path | None = typer.Option(None, help="The transfer prior (`scoretune transfer-prior --out FILE`) that "
                                      "learned-default, ws-cmaes, gp-warm and task-mixture read (default: the "
                                      "shipped agent/policies/transfer-prior.json)."),
    steps: int = typer.Option(10, min=1, max=10_000, help="Runs per experiment after the reference (T)."),
    oracle_runs: int = typer.Option(500, min=0, max=1_000_000, help="Runs of the oracle's search per scenario and seed (>= 500)."),
    metric: Metric = typer.Option(Metric.MEAN, help="Latency metric."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes (with --ray auto: the local Ray's CPUs)."),
    ray: str | None = typer.Option(None, "--ray", help="Run the tasks on Ray: 'auto' starts one on this machine, "
                                   "HOST:PORT or ray://HOST:PORT joins a cluster (docs/ray.md). Default: a process "
                                   "pool of --jobs workers."),
    seed_offset: int = typer.Option(0, min=0, max=2**31 - 1, help="First seed (a validation run on the training split uses an offset)."),
    oracle_only: bool = typer.Option(False, "--oracle-only", metavar="", help="Only compute and cache the oracle (DIR/oracle.json)."),
    sim_seed: int = typer.Option(-1, min=-1, max=2**32 - 1, help="Fix the simulator's seed (one objective per scenario; seeds then vary "
                                 "only the tuners). -1: the simulator's seed follows the seed."),
    protocol: Noise = typer.Option(Noise.NOISE_FREE, help="noise-free: every run of an experiment on one simulator "
                                   "seed, a measurement is the truth; noisy: every run a fresh seed and a calibrated "
                                   "measurement error, methods scored by the true quality of the profile they apply "
                                   "(agent/evaluation/study.py)."),
    noise: Path = typer.Option(NOISE_CALIBRATION, help="noisy: the noise calibration (`scoretune calibrate --noise`)."),
    budgets: str = typer.Option("1,2,3,5,10,20", help="noisy: the budgets (runs after the reference) of the budget "
                                "table, comma-separated; each is its own experiment."),
    truth_seeds: int = typer.Option(10, min=2, max=10_000, help="noisy: simulator seeds a profile's true value is "
                                    "the mean over (never drawn by a measurement)."),
    noise_scale: float = typer.Option(1.0, min=0.0, max=100.0, help="noisy: multiply the calibrated spread by this "
                                      "(a sensitivity analysis: 0.5 = a lab half as noisy)."),
    mismatch: str = typer.Option("none", help="The truth's perturbations no twin has (testbed/sim/mismatch.py): none, "
                                 "mild, default, severe: hidden node speeds, pull bandwidths and work, interference of "
                                 "busy pods, a load-dependent slowdown, zone latency; structural, structural-severe: "
                                 "default plus what the twin cannot express (per-node latency, CPU caps, noisy "
                                 "neighbours, slow cold starts, service-time shape, the autoscaler; docs/twin.md)."),
    platform: Platform = typer.Option(DEFAULT_PLATFORM, help="What serves the functions in every run: Knative "
                                      "(KPA, activator) or OpenWhisk (balancer, invokers' container pools)."),
    view: str = typer.Option("own", help="What the tuners are told the cluster is: own, or next (the next generated "
                             "family member's cluster: a twin given the wrong cluster; noise-free protocol)."),
) -> None:
    """Run every method on every scenario and write the results table, budget table and plots."""
    from agent.evaluation.study import Protocol, evaluate

    noisy = protocol == Noise.NOISY
    if json_out is not None and json_out.is_dir():
        raise AgentError(f"{json_out}: is a directory (--json names the summary file to write)")
    names = _scenario_names(split, scenarios, scenario)
    if ray:  # reach the cluster before anything is written or started
        from agent.compute import connect_ray

        connect_ray(ray, num_cpus=jobs if ray == "auto" else None)
    policies = {} if oracle_only else _policies(policy, ablation, checkpoints)
    method_list = [] if oracle_only else [m for m in methods.split(",") if m]
    if noisy:
        if view != "own":
            raise AgentError("--view next is for the noise-free protocol")
        if oracle_only:
            raise AgentError("--oracle-only is for the noise-free protocol (the noisy one caches its oracle profiles "
                             "in DIR/oracle-profiles.json as it runs)")
        if sim_seed >= 0:
            raise AgentError("--sim-seed fixes the simulator's seed, which the noisy protocol draws afresh for every run")
        from testbed.noise_model import load_noise_model

        model = load_noise_model(noise, metric.value).scaled(noise_scale)
        p = Protocol(steps=steps, budgets=tuple(_int_list(budgets, "--budgets")), noise=model.to_dict(),
                     truth_seeds=truth_seeds, oracle_runs=oracle_runs, metric=metric.value, mismatch=mismatch,
                     platform=platform)
    else:
        p = Protocol(steps=steps, oracle_runs=oracle_runs, metric=metric.value,
                     sim_seed=None if sim_seed < 0 else sim_seed, mismatch=mismatch, platform=platform, view=view)
    config = {"split": split, "command": "scoretune evaluate " + " ".join(argv_tail("evaluate"))}
    if noisy:
        config["noise_source"] = str(noise)
    from agent.compute import Compute

    table = evaluate(names, seeds=seeds, out_dir=out, protocol=p, methods=method_list, policies=policies,
                     compute=Compute(jobs=jobs, ray=ray),
                     seed_offset=seed_offset, config=config, prior=prior,
                     on_done=lambda s, k, n: console.print(f"  {s}: done ({k}/{n})"))
    if oracle_only:
        console.print(f"oracle cached in {out / 'oracle.json'}")
        return
    _report(out, table, not noisy, json_out)


def _report(out: Path, table: Any, exact: bool, json_out: Path | None) -> None:
    meta = json.loads((out / "evaluation.json").read_text())
    console.print(terminal_table(table, meta.get("best_baseline"), exact=exact))
    if json_out is not None:
        write_summary_json(out, json_out)
        console.print(f"summary: {json_out}")
    console.print(f"wrote {out}/table.md, table.csv, budget.md, budget.csv, results.csv, evaluation.json"
                  + (", tuning-curves.png, final-improvement.png" if exact else ""))


def write_summary_json(out: Path, path: Path) -> None:
    """``--json``: per method, the mean improvement (%) and gap closed (0..1) at the headline budget,
    overall (with 95 % intervals over seeds) and per scenario, from the evaluation in ``out``."""
    from agent.evaluation.scoring import per_scenario, score, summary_table
    from agent.evaluation.tables import read_results
    from functions.atomic import write_atomic

    meta = json.loads((out / "evaluation.json").read_text())
    frame = score(read_results(out).to_dict("records"), int(meta["steps"]))
    table = summary_table(frame, None if frame.attrs["exact"] else int(meta["steps"]))
    scenarios = per_scenario(frame, int(meta["steps"]))
    methods = {}
    for _, r in table.iterrows():
        methods[str(r["method"])] = {
            "improvement_pct": r["improvement_pct"], "improvement_pct_ci": [r["improvement_pct_low"], r["improvement_pct_high"]],
            "gap_closed": r["gap_closed"], "gap_closed_ci": [r["gap_closed_low"], r["gap_closed_high"]],
            "per_scenario": scenarios.get(str(r["method"]), {}),
        }
    summary = {"protocol": meta.get("protocol"), "steps": meta["steps"], "best_baseline": meta.get("best_baseline"),
               "scenarios": sorted(frame["scenario"].unique().tolist()), "seeds": int(frame["seed"].nunique()),
               "methods": methods, "evaluation": str(out)}
    write_atomic(path, json.dumps(summary, indent=2, sort_keys=True, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    """numpy scalars and NaN as JSON (NaN → null: no interval from one seed)."""
    import math

    v = float(value)
    return None if math.isnan(v) else v


def combine_command(
    dirs: list[Path] = typer.Argument(..., help="Directories written by `scoretune evaluate --out`."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for the combined table.md, table.csv, results.csv, "
                             "budget.md, plots."),
    methods: str = typer.Option("", help="Keep only these methods, comma-separated (default: all)."),
    steps: int = typer.Option(0, min=0, max=10_000, help="The headline budget (default: the one the evaluations were run for)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the summary of `evaluate --json` here."),
    protocol: Noise | None = typer.Option(None, help="Check that the results are of this protocol (by default it "
                                          "is read from them)."),
    scenarios: str = typer.Option("", help="Keep only these scenarios, comma-separated names or shell patterns "
                                  "(gen-*,gentrace-*: a subset of an evaluation, rescored on its own)."),
) -> None:
    """One results table from several evaluations (a set evaluated in parts, or new policies on
    scenarios the baselines already ran on), rescored together. The protocol (noise-free or noisy)
    is read from the results."""
    from agent.evaluation.study import combine

    table = combine(dirs, out, [m for m in methods.split(",") if m] or None, steps=steps or None,
                    scenarios=[p for p in scenarios.split(",") if p] or None)
    exact = json.loads((out / "evaluation.json").read_text()).get("protocol") == "noise-free"
    if protocol is not None and (protocol == Noise.NOISE_FREE) != exact:
        raise AgentError(f"--protocol {protocol.value}: the results in {', '.join(map(str, dirs))} are of the "
                         f"{'noise-free' if exact else 'noisy'} protocol")
    _report(out, table, exact, json_out)
