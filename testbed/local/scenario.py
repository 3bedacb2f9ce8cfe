"""The small lab scenario of ``make tune``: the cluster ``lab-small`` and a workload that this
2-core machine sustains next to everything else running on it.

Four cheap functions of the suite (tens of milliseconds of CPU per request each, see their specs)
under a Poisson load of ``rate_per_s`` requests per second in total for ``duration_s`` seconds:
about 0.25 cores of function work on average, so node capacities and speeds -- not the machine --
decide the latency, and where the scheduler puts instances shows up in the measurements.
"""

from __future__ import annotations

from loadgen.workload import Workload

LAB_CLUSTER = "lab-small"
LAB_FUNCTIONS: dict[str, float] = {
    "float-ops": 0.35,
    "dynamic-html": 0.3,
    "thumbnailer": 0.2,
    "aes": 0.15,
}
LAB_RATE_PER_S = 6.0
LAB_DURATION_S = 15.0
"""Seconds of the lab workload (90 requests). The 40 s it replaces made ``make tune`` take 13 min;
the lab's measured run-to-run spread is no larger for shorter runs (docs/results/noise/: 6.9 % at
10 s, 8.5 % at 20 s, 24 % at 40 s, four repeats each), so a paired confirmation of 15 s runs is at
least as strong evidence, in under half the time (docs/results/tune-time.md)."""


def lab_workload(
    seed: int = 0, *, duration_s: float = LAB_DURATION_S, rate_per_s: float = LAB_RATE_PER_S
) -> Workload:
    """The lab workload: Poisson arrivals over :data:`LAB_FUNCTIONS`, seeded."""
    from loadgen.synth import poisson

    wl = poisson(rate_per_s, duration_s, dict(LAB_FUNCTIONS), seed=seed)
    meta = dict(wl.metadata)
    meta["name"] = f"lab-poisson-{rate_per_s:g}rps-{duration_s:g}s-seed{seed}"
    return Workload(frame=wl.frame, metadata=meta)
