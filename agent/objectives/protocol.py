"""The "run a profile, measure latency" callable the environment and the tuners optimise.

The environment never talks to a backend directly: it calls an :class:`Objective`, so training
runs on the simulator's fast in-memory ``evaluate`` while the live loop (agent/loop/experiment.py) drives any
:class:`~testbed.backend.Backend`. An :class:`ObjectiveSampler` draws one objective per episode
(a scenario and a seed from a split).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from agent.actions import WeightSetting


@runtime_checkable
class Objective(Protocol):
    """One tuning problem: a cluster, a workload and a seed; lower is better."""

    name: str

    def __call__(self, setting: WeightSetting) -> float:
        """The latency metric (seconds, finite, > 0) of one run with ``setting``."""

    def context(self) -> Mapping[str, float]:
        """Scenario facts for the *full information* observation (nodes, cpu_cores, ...)."""


ObjectiveSampler = Callable[[np.random.Generator], Objective]
