"""Measuring what each handler really costs on this machine, so the spec's ``work`` distribution
(which the simulator executes) matches the real function.

Each function is measured in its own fresh interpreter (:mod:`functions.measure`), for honest
memory figures: a shared process would carry every other handler's imports and high-water mark.

1. import the runtime and the handler and run its warm-up; ``init_s`` is the CPU time the
   process has used by then (interpreter start + imports + warm-up), the part of a cold start
   after the container starts that does not depend on other load;
2. read the resident set (``baseline_rss_bytes``), then run one unrecorded warm-up request;
3. run ``samples`` requests at the spec's default payload, each timed with
   :func:`time.process_time` (CPU of the whole process, so BLAS threads count),
   :func:`time.perf_counter` (wall) and the thread's run-queue wait from ``schedstat``.

``peak_memory_bytes`` is the peak resident set (``VmHWM``) minus the baseline: the memory a
request touches beyond an idle warm instance, an upper bound since it includes allocator slack.
The child pins BLAS/OpenMP to one thread, so CPU seconds are seconds of one core, the "speed-1.0
core" of the spec.

On a shared machine wall time includes waiting for a CPU. The I/O wait of a request is therefore
taken as wall − CPU − run-queue wait, never as wall − CPU, and the refitted CPU mean is the
median sample, which a burst of contention moves least. The spread (``cv``) is not refitted:
a handful of samples cannot estimate it, so it stays as written in the spec.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from functions.errors import FunctionsError
from functions.runtime import SINGLE_THREAD_ENV
from functions.spec import FunctionSpec, MeasuredProfile
from functions.specfile import mib_quantity, update_spec_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measurement:
    """Raw per-sample figures of one function, as the child process reported them."""

    name: str
    cpu_s: tuple[float, ...]
    wall_s: tuple[float, ...]
    init_s: float
    baseline_rss_bytes: int
    peak_rss_bytes: int
    runqueue_s: tuple[float, ...] = ()
    init_wall_s: float = 0.0

    @property
    def peak_memory_bytes(self) -> int:
        return max(0, self.peak_rss_bytes - self.baseline_rss_bytes)

    @property
    def io_s(self) -> tuple[float, ...]:
        """Per-sample time off the CPU and not waiting for one: wall − CPU − run-queue wait."""
        runq = self.runqueue_s or (0.0,) * len(self.wall_s)
        return tuple(max(0.0, w - c - q) for w, c, q in zip(self.wall_s, self.cpu_s, runq, strict=True))


def machine_description() -> str:
    """CPU model, core count and Python version: enough to tell two machines' profiles apart."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def measure(
    spec: FunctionSpec,
    *,
    samples: int = 3,
    payload: dict[str, Any] | None = None,
    timeout_s: float = 600.0,
) -> Measurement:
    """Measure one function in a fresh interpreter running :mod:`functions.measure`."""
    if samples < 1:
        raise FunctionsError(f"samples must be >= 1, got {samples}")
    cmd = [sys.executable, "-m", "functions.measure", spec.name, "--samples", str(samples)]
    if payload:
        cmd += ["--payload", json.dumps(payload)]
    env = {**os.environ, **SINGLE_THREAD_ENV}
    repo = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise FunctionsError(f"profiling {spec.name} took longer than {timeout_s:g} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise FunctionsError(f"profiling {spec.name} failed (exit {done.returncode}): {tail}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(
        name=raw["name"],
        cpu_s=tuple(raw["cpu_s"]),
        wall_s=tuple(raw["wall_s"]),
        init_s=float(raw["init_cpu_s"]),
        baseline_rss_bytes=int(raw["baseline_rss_bytes"]),
        peak_rss_bytes=int(raw["peak_rss_bytes"]),
        runqueue_s=tuple(raw["runqueue_s"]),
        init_wall_s=float(raw["init_s"]),
    )


def summarize(m: Measurement, *, machine: str | None = None, now: datetime | None = None) -> MeasuredProfile:
    """The spec's ``measured`` block from raw samples (p50/p95 by linear interpolation)."""
    cpu = np.asarray(m.cpu_s, dtype=float)
    return MeasuredProfile(
        cpu_s_mean=round(float(cpu.mean()), 6),
        cpu_s_p50=round(float(np.percentile(cpu, 50)), 6),
        cpu_s_p95=round(float(np.percentile(cpu, 95)), 6),
        wall_s_mean=round(float(np.mean(m.wall_s)), 6),
        peak_memory_bytes=m.peak_memory_bytes,
        samples=len(m.cpu_s),
        machine=machine if machine is not None else machine_description(),
        measured_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        init_s=round(m.init_s, 4),
        baseline_rss_bytes=m.baseline_rss_bytes,
    )


def write_measured(
    path: Path, measured: MeasuredProfile, *, refit: bool = False, io_s: float | None = None
) -> None:
    """Write ``measured`` into the spec file at ``path``, keeping its header comments, key order
    and quantity spelling. With ``refit``, ``work.cpu_s.mean`` becomes the median CPU sample,
    ``work.memory`` the memory touched, ``work.io_s`` the given I/O wait and
    ``cold_start.init_s`` the measured initialisation (see :func:`update_spec_file`)."""

    def change(data: dict[str, Any]) -> None:
        data["measured"] = {k: getattr(measured, k) for k in measured.__dataclass_fields__}
        if refit:
            work = data["work"]
            work["cpu_s"]["mean"] = round(measured.cpu_s_p50, 4)
            work["memory"] = mib_quantity(measured.peak_memory_bytes)
            if io_s is not None:
                work["io_s"] = round(io_s, 4)
            data["cold_start"]["init_s"] = round(measured.init_s, 3)

    update_spec_file(path, change)


def median_io_s(m: Measurement) -> float:
    return float(np.median(m.io_s)) if m.io_s else 0.0
