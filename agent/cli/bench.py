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
