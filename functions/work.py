"""Per-request work drawn from a function spec: what the simulator executes for each request.

A request's payload may carry its own work (the trace-driven function: ``{"cpu_s": .., "memory_bytes":
.., "io_s": ..}``), which overrides the spec's distribution so a trace's own durations play back as
vHive's InVitro loader does; otherwise the CPU time is drawn from the spec's distribution and memory
and I/O are the spec's per-request values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from functions.errors import InputError
from functions.spec import FunctionSpec, WorkDistribution

_OVERRIDES = ("cpu_s", "memory_bytes", "io_s")


@dataclass(frozen=True)
class WorkSample:
    """Work of each request, aligned with the payloads given (seconds on a speed-1.0 core, bytes)."""

    cpu_s: np.ndarray
    memory_bytes: np.ndarray
    io_s: np.ndarray


def draw(dist: WorkDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws from a work distribution; mean is ``dist.mean`` in every case."""
    if dist.distribution == "constant" or dist.cv == 0.0:
        return np.full(n, dist.mean)
    if dist.distribution == "exponential":
        return rng.exponential(dist.mean, n)
    mu, sigma = dist.lognormal_params()
    return rng.lognormal(mu, sigma, n)


def sample_work(spec: FunctionSpec, payloads: Sequence[str], rng: np.random.Generator) -> WorkSample:
    """Work for each payload (JSON strings as a Workload holds them)."""
    n = len(payloads)
    cpu = draw(spec.work_cpu_s, n, rng)
    mem = np.full(n, float(spec.work_memory_bytes))
    io = np.full(n, float(spec.work_io_s))
    for i, raw in enumerate(payloads):
        if raw in ("{}", "") or not any(k in raw for k in _OVERRIDES):
            continue
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as err:
            raise InputError(f"payload is not JSON: {err.msg}", row=i, field="payload") from None
        for key, column in (("cpu_s", cpu), ("memory_bytes", mem), ("io_s", io)):
            if key in payload:
                value = float(payload[key])
                if not np.isfinite(value) or value < 0:
                    raise InputError(
                        f"{key} must be a finite number >= 0, got {payload[key]!r}",
                        row=i,
                        field=f"payload.{key}",
                    )
                column[i] = value
    return WorkSample(cpu_s=cpu, memory_bytes=mem, io_s=io)
