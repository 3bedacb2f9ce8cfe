"""What the machine under the embedded lab was doing during a run: the share of its CPU time the
hypervisor took (steal) and the share of the run during which some runnable task waited for a CPU
(the kernel's pressure-stall information). The lab's timings are real, so they move with the host:
with the same code, cluster, workload and default weights, a container lab's reference run measured
0.4-4.9 s on one day and 8-13 s the next (docs/results/containers/lab). Every run's summary records
these figures (``host``), so a run can be read against the machine it ran on.

Linux only (``/proc/stat``, ``/proc/pressure/cpu``); elsewhere, or where a file is missing, the
figure is None rather than a guess."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
PSI_CPU = Path("/proc/pressure/cpu")


@dataclass(frozen=True)
class HostSample:
    at: float
    """time.monotonic() when sampled."""
    steal: int | None
    """Jiffies the hypervisor took from this machine's CPUs since boot (``/proc/stat``)."""
    total: int | None
    """All jiffies since boot (user, nice, system, idle, iowait, irq, softirq, steal)."""
    pressure_us: int | None
    """Microseconds during which some runnable task waited for a CPU (PSI ``some total``)."""


def parse_stat(text: str) -> tuple[int, int] | None:
    """(steal, total) from ``/proc/stat``'s aggregate ``cpu`` line; guest time is already inside
    user and nice, so it is not added again."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(x) for x in fields[1:9]]
            if len(values) < 8:
                return None
            return values[7], sum(values)
    return None


def parse_psi(text: str) -> int | None:
    """The ``some`` line's ``total=`` (microseconds) of a pressure file."""
    for line in text.splitlines():
        if line.startswith("some "):
            for item in line.split()[1:]:
                if item.startswith("total="):
                    return int(item.split("=", 1)[1])
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def sample() -> HostSample:
    stat = _read(PROC_STAT)
    parsed = parse_stat(stat) if stat is not None else None
    psi = _read(PSI_CPU)
    return HostSample(time.monotonic(), parsed[0] if parsed else None, parsed[1] if parsed else None,
                      parse_psi(psi) if psi is not None else None)


def between(a: HostSample, b: HostSample) -> dict[str, float | None]:
    """What the host did from ``a`` to ``b``: ``steal_share`` (of all CPU time), ``cpu_pressure_share``
    (of the wall time), ``seconds``."""
    seconds = max(b.at - a.at, 0.0)
    steal = None
    if None not in (a.steal, b.steal, a.total, b.total) and b.total > a.total:  # type: ignore[operator]
        steal = round((b.steal - a.steal) / (b.total - a.total), 4)  # type: ignore[operator]
    pressure = None
    if a.pressure_us is not None and b.pressure_us is not None and seconds > 0:
        pressure = round(min((b.pressure_us - a.pressure_us) / (seconds * 1e6), 1.0), 4)
    return {"steal_share": steal, "cpu_pressure_share": pressure, "seconds": round(seconds, 3)}


__all__ = ["HostSample", "between", "parse_psi", "parse_stat", "sample"]
