"""A small deterministic analytic stand-in for a backend, for the agent's unit tests only.

The latency it reports is a smooth function of the profile with a known optimum, so tests can
check the env contract, the reward arithmetic, the tuners and the live loop (logging, resume,
voided runs) without the simulator's cost. It is a test fixture, not a backend anyone ships.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from agent.actions import WeightSetting
from loadgen.results import RunResult, write_run
from loadgen.workload import make_workload
from testbed.scheduler.config import SCORE_PLUGINS, profile_weights


def analytic_latency(weights: Mapping[str, int | None], strategy_share: float, targets: Mapping[str, float],
                     target_share: float, base_s: float) -> float:
    """``base * (1 + sum_p (log10 w_p - t_p)^2 / 4 + (share - t_share)^2)``; disabled counts as w = 0.5."""
    total = 0.0
    for p in SCORE_PLUGINS:
        w = weights.get(p)
        x = math.log10(0.5 if w is None else w)
        total += (x - targets[p]) ** 2 / 4.0
    return base_s * (1.0 + total + (strategy_share - target_share) ** 2)


def strategy_share(strategy: str, shape) -> float:
    if strategy == "LeastAllocated":
        return 0.0
    if strategy == "MostAllocated":
        return 1.0
    return float(shape[1][1]) / 10.0


class AnalyticObjective:
    """An objective with a known optimum: targets are log10 weights in [0, 2]."""

    def __init__(self, seed: int = 0, base_s: float = 0.2, name: str | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.targets = {p: float(rng.uniform(0.0, 2.0)) for p in SCORE_PLUGINS}
        self.target_share = float(rng.uniform(0.0, 1.0))
        self.base_s = base_s
        self.name = name or f"analytic-{seed}"
        self.calls = 0

    def __call__(self, setting: WeightSetting) -> float:
        self.calls += 1
        return analytic_latency(setting.weights, strategy_share(setting.strategy, setting.shape), self.targets,
                                self.target_share, self.base_s)

    def context(self) -> Mapping[str, float]:
        return {"nodes": 4, "cpu_cores": 16, "memory_gib": 64, "requests_per_s": 20, "functions": 3, "duration_s": 60}


def analytic_sampler(rng: np.random.Generator) -> AnalyticObjective:
    return AnalyticObjective(seed=int(rng.integers(0, 2**31 - 1)), base_s=float(rng.uniform(0.05, 2.0)))


class Crash(Exception):
    """Raised by the fixture backend to simulate the loop being killed mid-experiment."""


class AnalyticBackend:
    """Implements the Backend protocol: ``run`` writes a real run directory whose requests have the
    analytic latency, times a seeded multiplicative noise (``noise`` = relative std)."""

    name = "analytic"

    def __init__(self, objective: AnalyticObjective, *, noise: float = 0.0, requests: int = 50,
                 crash_on_run: int | None = None, void_runs: frozenset[int] = frozenset(),
                 lab_faults: frozenset[int] = frozenset()) -> None:
        self.objective = objective
        self.noise = noise
        self.requests = requests
        self.crash_on_run = crash_on_run
        self.void_runs = void_runs
        self.lab_faults = lab_faults
        """Resets (1-based) that fail as a real lab's do: testbed.errors.LabFault."""
        self.profile = None
        self.runs = 0
        self.applied: list = []
        self.resets = 0

    def apply(self, profile) -> None:
        self.profile = profile
        self.applied.append(profile)

    def reset(self) -> None:
        self.resets += 1
        if self.resets in self.lab_faults:
            from testbed.errors import LabFault

            raise LabFault(f"node health: node n{self.resets} is not Ready: Ready is Unknown (NodeStatusUnknown)")

    def run(self, workload, out_dir: Path, *, seed: int = 0) -> RunResult:
        self.runs += 1
        if self.crash_on_run is not None and self.runs == self.crash_on_run:
            raise Crash(f"killed at run {self.runs}")
        weights = profile_weights(self.profile)
        fit = self.profile.fit
        share = strategy_share(fit.strategy, fit.shape)
        mean = analytic_latency(weights, share, self.objective.targets, self.objective.target_share, self.objective.base_s)
        rng = np.random.default_rng(seed * 1_000_003 + self.runs)
        factor = 1.0 + self.noise * rng.standard_normal() if self.noise else 1.0
        lat = np.full(self.requests, mean * factor)
        t = np.arange(self.requests, dtype=float) * 0.1
        lag = 2.0 if self.runs in self.void_runs else 0.0
        frame = pd.DataFrame({
            "request_id": np.arange(self.requests), "function": "f", "scheduled_s": t, "sent_s": t + lag,
            "finished_s": t + lag + lat, "latency_s": lat + lag, "status": "ok", "http_status": 200,
            "node": "n0", "cold_start": False,
        })
        return write_run(out_dir, frame, info={"seed": seed})

    def close(self, *, failed: bool = False) -> None:
        return None


def tiny_workload():
    return make_workload([0.0, 1.0], ["f", "f"], metadata={"name": "tiny"})
