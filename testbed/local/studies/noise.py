"""Measuring the embedded lab's noise (``scoretune calibrate --noise``): the lab workload of each
(length, load) cell replayed ``repeats`` times under one profile, each run from a reset lab, exactly
as a tuning step runs it. The spread of a cell is the coefficient of variation of the metric over
its repeats; the model fitted to the cells is :mod:`testbed.noise_model`.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from testbed.errors import InputError, TestbedError
from testbed.noise_model import MIN_REPEATS, NOISE_METRICS, NoiseCell


@contextlib.contextmanager
def cpu_hog(processes: int) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy-looping Python processes for the length of the block: a co-located job
    competing for the CPU, so the lab's own run-to-run spread can be told apart from contention
    (``scoretune calibrate --noise --beside-hog N``). Killed on the way out, whatever happens."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(max(0, processes))]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def noise_cells(durations: Sequence[float], rates: Sequence[float], reference_rate: float,
                reference_duration: float) -> list[tuple[float, float]]:
    """The measured (duration, rate) cells: every duration at ``reference_rate`` and every rate at
    ``reference_duration`` (a cross, not a grid: length and load each vary once, which is what the
    one-variable model needs, at a fraction of a grid's cost)."""
    cells = [(float(d), float(reference_rate)) for d in durations]
    cells += [(float(reference_duration), float(r)) for r in rates if (float(reference_duration), float(r)) not in cells]
    return cells


def measure_noise(
    local: Any,
    cells: Sequence[tuple[float, float]],
    repeats: int,
    out_dir: Path,
    *,
    seed: int = 0,
    profile: Any = None,
    progress: Any = None,
) -> dict[str, list[NoiseCell]]:
    """Replay the lab workload of each cell ``repeats`` times under ``profile`` (default weights
    when None), each run from a reset lab; returns the cells per metric. A failed run is an error
    naming its directory: a spread with a failure in it would measure the failure, not the noise."""
    from testbed.scenarios import lab_workload
    from testbed.scheduler.config import default_profile

    if repeats < MIN_REPEATS:
        raise InputError(f"a spread needs >= {MIN_REPEATS} repeats, got {repeats}", field="repeats")
    profile = profile or default_profile()
    values: dict[str, dict[tuple[float, float], list[float]]] = {m: {} for m in NOISE_METRICS}
    for d, r in cells:
        wl = lab_workload(seed, duration_s=d, rate_per_s=r)
        for k in range(repeats):
            local.apply(profile)
            local.reset()
            run_dir = Path(out_dir) / f"d{d:g}-r{r:g}" / f"repeat-{k:02d}"
            t0 = time.monotonic()
            res = local.run(wl, run_dir, seed=seed)
            if res.failed or res.summary.get("latency_mean_s") is None:
                raise TestbedError(f"{run_dir}: the run failed ({res.summary.get('failure') or 'no successful request'})")
            for m in NOISE_METRICS:
                values[m].setdefault((d, r), []).append(float(res.summary[f"latency_{m}_s"]))
            if progress is not None:
                progress(d, r, k, float(res.summary["latency_mean_s"]), time.monotonic() - t0)
    return {m: [NoiseCell(d, r, tuple(v)) for (d, r), v in per.items()] for m, per in values.items()}


__all__ = ["cpu_hog", "measure_noise", "noise_cells"]
