"""``scoretune bench agent``: the agent's own inner loops, as one JSON line.

- environment steps per second on a simulator scenario (the cost of one training step is one
  simulated run of the workload, so this bounds the training budget);
- the per-call cost of each tuner's ``suggest`` + ``tell`` (model-based samplers refit every call);
- policy inference latency (one deterministic ``predict`` of the shipped MLP).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer


def _per_call(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def bench_agent(
    scenario: str = typer.Option("lab-web", help="Scenario for the environment-step measurement."),
    env_steps: int = typer.Option(10, help="Environment steps to time (one simulated run each)."),
    policy: Path = typer.Option(None, help="Policy zip for the inference timing (default: the shipped one)."),
) -> None:
    """Environment steps/s on the simulator, tuner overhead per step, policy inference latency."""
    from agent.actions import ActionCodec
    from agent.objectives.sim import ScenarioObjective
    from agent.rl.artefacts import SHIPPED_POLICY
    from agent.rl.env import SchedulerTuningEnv
    from agent.tuners.factory import make_tuner
    from agent.tuners.policy import PolicyTuner

    codec = ActionCodec()
    objective = ScenarioObjective(scenario, seed=0)
    objective(codec.reference())  # compile the simulator's kernels outside the timing
    env = SchedulerTuningEnv(lambda rng: ScenarioObjective(scenario, seed=0), steps=env_steps)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, codec.dim).astype(np.float32) for _ in range(env_steps)]
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    env_rate = env_steps / (time.perf_counter() - t0)

    tuner_ms = {}
    for method in ("random", "tpe", "gp", "cmaes", "hill"):
        tuner = make_tuner(method, codec, seed=0)
        tuner.tell(codec.reference_action(), 1.0)
        values = iter(np.linspace(0.9, 1.1, 1000))

        def step(tuner=tuner, values=values) -> None:
            a = tuner.suggest()
            tuner.tell(a, float(next(values)))

        tuner_ms[method] = round(1000 * _per_call(step, 10), 3)

    result = {"env_steps_per_s": round(env_rate, 2), "scenario": scenario, "tuner_ms_per_step": tuner_ms}
    path = policy or SHIPPED_POLICY
    if path.exists():
        pt = PolicyTuner.from_file(path)
        pt.tell(codec.reference_action(), 1.0)
        result["policy_predict_ms"] = round(1000 * _per_call(pt.suggest, 200), 4)
    typer.echo(json.dumps(result))


def bench_grid(
    scenarios: int = typer.Option(2, min=1, max=20, help="Scenarios of the grid (lab-small under seeded lab workloads)."),
    seeds: int = typer.Option(2, min=1, max=50, help="Seeds per scenario."),
    steps: int = typer.Option(10, min=1, max=100, help="Runs per experiment after the reference."),
    oracle_runs: int = typer.Option(100, min=0, max=10_000, help="Runs of each cell's oracle search."),
    jobs: int = typer.Option(2, min=1, max=256, help="Worker processes, and the local Ray's CPUs."),
    ray: bool = typer.Option(True, "--ray/--no-ray", help="Also time the grid on a local Ray."),
) -> None:
    """The evaluation grid's throughput (simulated tuner runs per second) on the process pool and
    on a local Ray, the same grid on both, so Ray's overhead on one machine is known."""
    import shutil
    import tempfile

    from agent.compute import Compute, connect_ray
    from agent.evaluation.study import Protocol, evaluate
    from loadgen.workload import write_workload
    from testbed.cluster import CLUSTERS_DIR
    from testbed.scenarios import lab_workload

    work = Path(tempfile.mkdtemp(prefix="scoretune-bench-grid-"))
    try:
        specs = []
        for k in range(scenarios):
            shutil.copy(CLUSTERS_DIR / "lab-small.yaml", work / f"c{k}.yaml")
            write_workload(lab_workload(k, duration_s=20.0), work / f"w{k}.parquet")
            specs.append(f"{work / f'c{k}.yaml'}={work / f'w{k}.parquet'}")
        methods = ["random", "tpe", "cmaes"]
        runs = scenarios * seeds * (len(methods) * (steps + 1) + oracle_runs + 1)
        result: dict[str, object] = {"grid": {"scenarios": scenarios, "seeds": seeds, "methods": methods, "steps": steps,
                                              "oracle_runs": oracle_runs, "tuner_runs": runs, "jobs": jobs}}

        def timed(name: str, compute: Compute) -> float:
            t0 = time.perf_counter()
            evaluate(specs, seeds=seeds, out_dir=work / name, protocol=Protocol(steps=steps, oracle_runs=oracle_runs),
                     methods=methods, compute=compute)
            wall = time.perf_counter() - t0
            result[name] = {"wall_s": round(wall, 2), "tuner_runs_per_s": round(runs / wall, 1)}
            return wall

        pool = timed("pool", Compute(jobs=jobs))
        if ray:
            t0 = time.perf_counter()
            connect_ray("auto", num_cpus=jobs)
            start = time.perf_counter() - t0
            wall = timed("ray", Compute(jobs=jobs, ray="auto"))
            result["ray"]["start_s"] = round(start, 2)  # type: ignore[index]
            result["ray_over_pool"] = round(pool / wall, 3)
            same = (work / "pool" / "results.csv").read_text() == (work / "ray" / "results.csv").read_text()
            result["same_results"] = same
    finally:
        shutil.rmtree(work, ignore_errors=True)
    typer.echo(json.dumps(result))
