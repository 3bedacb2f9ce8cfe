"""``scoretune sim ...`` (run, sweep, autoscale, import-cluster, scenarios) and ``scoretune bench sim``."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import typer

from testbed.errors import ConfigError
from testbed.platforms import DEFAULT_PLATFORM, Platform
from testbed.sim.warmup import FUNCTION_MIX as BENCH_FUNCTIONS

app = typer.Typer(help="The discrete-event simulator of Knative or OpenWhisk on Kubernetes.", no_args_is_help=True)
log = logging.getLogger(__name__)


def _profile(weights: str | None, config: Path | None, profile_name: str | None) -> Any:
    from testbed.scheduler.config import default_profile, load_config, parse_weights, profile_from_weights

    if weights and config:
        raise ConfigError("give --weights or --config, not both", field="--weights")
    if config is not None:
        cfg = load_config(config)
        if profile_name is None:
            return cfg.profiles[0]
        for p in cfg.profiles:
            if p.scheduler_name == profile_name:
                return p
        raise ConfigError(f"no profile {profile_name!r}; profiles: {[p.scheduler_name for p in cfg.profiles]}",
                          file=config, field="profiles")
    if weights:
        return profile_from_weights(parse_weights(weights))
    return default_profile()


def _workload(workload: str) -> Any:
    """A Workload Parquet file, or the name of a scenario (its workload)."""
    from functions.errors import InputError
    from loadgen.workload import read_workload

    p = Path(workload)
    if p.is_dir():
        raise InputError("is a directory; give a workload Parquet file or a scenario name", file=p, field="--workload")
    # anything that looks like a path is read as one, so a typo says "no such file", not "unknown scenario"
    if p.exists() or p.suffix or "/" in workload:
        from functions.spec import check_suite_functions

        wl = read_workload(p)
        check_suite_functions(wl.functions, file=p)
        return wl
    from testbed.scenarios import build_workload, get_scenario

    return build_workload(get_scenario(workload))


@app.command("run")
def run(
    cluster: str = typer.Option(..., "--cluster", help="Cluster spec: a path or a shipped name (testbed/clusters)."),
    workload: str = typer.Option(..., "--workload", help="Workload Parquet file (t_s, function, payload), or a scenario name."),
    weights: str | None = typer.Option(None, "--weights", help='Score weights, e.g. "ImageLocality=5,TaintToleration=disabled".'),
    config: Path | None = typer.Option(None, "--config", help="A KubeSchedulerConfiguration file instead of --weights."),
    profile: str | None = typer.Option(None, "--profile", help="Profile (schedulerName) of --config; default: its first."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the per-request work draws and the scheduler's tie-breaks."),
    out: Path = typer.Option(..., "--out", "-o", help="Run directory to write (requests, placements, summary)."),
    platform: Platform = typer.Option(DEFAULT_PLATFORM, "--platform",
                                      help="What serves the functions: Knative (KPA, activator) or OpenWhisk."),
) -> None:
    """Simulate one run and write a run directory, as the live backends do."""
    from testbed.cluster import load_cluster
    from testbed.sim.backend import SimBackend
    from testbed.sim.engine import SimConfig
    from testbed.sim.progress import Progress

    with Progress("sim run") as bar:
        bar.phase("reading the cluster and the profile")
        backend = SimBackend(load_cluster(cluster), seed=seed, progress=True,
                             config=SimConfig(platform=platform))
        backend.apply(_profile(weights, config, profile))
        bar.phase("reading the workload")
        wl = _workload(workload)
    result = backend.run(wl, out, seed=seed)
    s = result.summary
    keys = ("count", "ok", "errors", "timeouts", "cold_starts", "latency_mean_s", "latency_p50_s", "latency_p95_s",
            "latency_p99_s", "pods_created")
    typer.echo(json.dumps({"out": str(out), **{k: s.get(k) for k in keys}}, indent=2))


@app.command("sweep")
def sweep_cmd(
    cluster: str = typer.Option(..., "--cluster", help="Cluster spec: a path or a shipped name."),
    workload: str = typer.Option(..., "--workload", help="Workload Parquet file, or a scenario name."),
    samples: int = typer.Option(50, "--samples", min=1, help="Random weight vectors to evaluate."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the weight draws and of every simulation."),
    runs: bool = typer.Option(False, "--runs", help="Include every run in the JSON (default: the summary only)."),
) -> None:
    """Evaluate K random weight vectors: spread of mean and p95 latency, rank of the defaults."""
    from testbed.cluster import load_cluster
    from testbed.sim.progress import Progress
    from testbed.sim.sweep import sweep

    with Progress("sim sweep", unit="profiles") as bar:
        bar.phase("reading the cluster and the workload")
        spec, wl = load_cluster(cluster), _workload(workload)
        bar.phase("evaluating profiles")
        bar.update(0, samples + 1)
        report = sweep(spec, wl, samples=samples, seed=seed, progress=lambda i, _row: bar.update(i + 2, samples + 1))
    if not runs:
        report.pop("runs")
    typer.echo(json.dumps(report, indent=2))


@app.command("autoscale")
def autoscale(
    spec: Path = typer.Option(..., "--spec", help="Decider spec JSON (+ ready_pods_at_creation)."),
    steps: Path = typer.Option(..., "--steps", help="JSON list of {t_s, ready_pods, observed_stable, observed_panic}."),
) -> None:
    """Run the KPA decider alone, as Knative's decider tests drive it; print one result per step."""
    from testbed.autoscaler.drive import run_files

    typer.echo(json.dumps(run_files(spec, steps), indent=2))


@app.command("import-cluster")
def import_cluster_cmd(
    nodes: Path = typer.Option(..., "--nodes", help="`kubectl get nodes -o json` output."),
    pods: Path | None = typer.Option(None, "--pods", help="`kubectl get pods -A -o json`: running pods' requests are subtracted."),
    out: Path = typer.Option(..., "-o", "--out", help="Cluster spec YAML to write."),
    name: str | None = typer.Option(None, "--name", help="Cluster name (default: the nodes file's stem)."),
) -> None:
    """Turn a real cluster's nodes (and running pods) into a cluster spec: a twin to replay traces on."""
    from testbed.errors import ClusterSpecError
    from testbed.sim.importer import import_cluster, write_cluster_yaml

    if out.is_dir():  # before reading anything: the user's mistake is the path, say so first
        raise ClusterSpecError("is a directory; give the path of the cluster spec YAML to write", file=out, field="--out")
    spec = import_cluster(nodes, pods, name=name)
    write_cluster_yaml(spec, out)
    typer.echo(json.dumps({"out": str(out), "name": spec.name, "nodes": len(spec.nodes)}))


@app.command("scenarios")
def scenarios_cmd(split: str | None = typer.Option(None, "--split", help="train or test (default: all).")) -> None:
    """List the scenario library with its split."""
    from testbed.scenarios import scenarios

    rows = [{"name": s.name, "split": s.split, "cluster": s.cluster, "workload": s.workload.name,
             "description": s.description} for s in scenarios(split)]
    typer.echo(json.dumps(rows, indent=2))


BENCH = (
    # (name, cluster, peak rate per s) - a ramp to the peak so the autoscaler keeps up
    ("large-120", "large-120", 2400.0),
    ("homogeneous-20", "homogeneous-20", 400.0),
)


def bench_workload(peak: float, *, step_s: float = 60.0, seed: int = 0) -> Any:
    """The bench workload: Poisson steps at 1/8, 1/4, 1/2, 1 and 1 of the peak (5 minutes)."""
    from loadgen.synth import steps

    return steps([peak / 8, peak / 4, peak / 2, peak, peak], step_s, BENCH_FUNCTIONS, seed=seed)


def bench_sim(
    json_out: bool = typer.Option(False, "--json", help="Print JSON (the only output format)."),
    repeat: int = typer.Option(3, "--repeat", min=1, help="Timed evaluations per scenario (the best is reported)."),
    platform: Platform = typer.Option(DEFAULT_PLATFORM, "--platform", help="The platform simulated: Knative's "
                                      "kernel, or OpenWhisk's."),
) -> None:
    """Completed invocations per wall second of `evaluate` (one core, JIT warm-up excluded)."""
    from testbed.cluster import load_cluster
    from testbed.scheduler.config import default_profile
    from testbed.sim.backend import evaluate
    from testbed.sim.engine import SimConfig
    from testbed.sim.warmup import compile_kernels

    config = SimConfig(platform=platform)
    compile_kernels(platform)  # compile (or load from numba's cache) every kernel before timing
    rows = []
    for name, cluster_name, peak in BENCH:
        cluster = load_cluster(cluster_name)
        wl = bench_workload(peak)
        best = None
        for _ in range(repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            s = evaluate(cluster, wl, default_profile(), seed=0, config=config)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if best is None or wall < best[0]:
                best = (wall, cpu, s)
        wall, cpu, s = best
        ended = int(s["ok"] + s["errors"] + s["timeouts"])
        rows.append(
            {
                "name": name,
                "nodes": len(cluster.nodes),
                "invocations": ended,
                "completed_ok": int(s["ok"]),
                "invocations_per_s": round(ended / wall, 1),
                "invocations_per_cpu_s": round(ended / cpu, 1),
                "sim_s_per_wall_s": round(float(s["sim_end_s"]) / wall, 1),
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4),
                "pods_created": s["pods_created"],
                "latency_mean_s": s["latency_mean_s"],
            }
        )
    report = {
        "platform": platform.value,
        "scenarios": rows,
        "notes": "evaluate() end to end (simulation setup + run + summary; workload generation excluded), "
        f"default profile, best of {repeat} by wall time; numba JIT compile excluded by a warm-up run; one "
        "process on one core. invocations = requests that ended (ok, error or timeout). On a shared "
        "machine wall time includes waiting for the CPU: invocations_per_cpu_s is the same run per "
        "second of this process's CPU time.",
    }
    typer.echo(json.dumps(report, indent=2))
