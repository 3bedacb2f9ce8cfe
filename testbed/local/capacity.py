"""A lab sized to its host: the CPU a cluster's nodes may have on this machine, and one factor.

The embedded lab runs every node on one machine. A cluster whose node quotas add up to more cores
than the machine has beside its harness (Locust, the controller, the node agents, the registry) is
over-subscribed by construction: under contention the nodes share the host instead of their
quotas, the hidden hardware fades as the host saturates, and a run's latency follows the host's
load more than the profile (../shared/notes/measurement.md measured 4.0-4.4 cores of quota on a
2-core host). So ``testbed up`` sizes the cluster to the host, as Abedi & Brecht's first rule asks
of any performance experiment (a system under test that does not share its resources with the
measurement):

- the host's capacity is the cores this process may run on (``sched_getaffinity``), less a
  stated reserve for the harness (:data:`DEFAULT_RESERVE_MILLI`, or ``--reserve``);
- the cluster's demand is the sum of its nodes' real CPU (the hardware file's quotas);
- when the demand exceeds the capacity, every CPU figure of the hardware is multiplied by one
  factor ``f = capacity / demand`` -- each node's quota, what one core of a pod's limit is worth,
  and the noisy neighbour's CPU -- and the workload's rate with it (the backend keeps a share
  ``f`` of every function's requests, :func:`thin_mask`), so the cluster's utilisation is the
  declared one, every CPU-bound phase (work, unpacking, start-up) runs ``1/f`` times slower, and
  the link-bound phases (downloads) do not;
- or, with ``fit="refuse"``, ``up`` refuses with one line naming the cluster, its cores and the
  host's; ``fit="off"`` runs it as declared, over-subscribed (how the lab ran before; for
  comparing with results measured then), and records that too.

The factor is recorded in ``lab.json`` (``host_fit``) and in every run's summary
(``lab_scale``). Nothing here is read by a tuner.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from testbed.errors import InputError, TestbedError
from testbed.local.hardware import NodeHardware

DEFAULT_RESERVE_MILLI = 600
"""CPU kept for the harness. On a 2-core host it leaves the nodes 1.4 cores, the upper end of the
1.2-1.4 the outside read of the container lab's noise recommended (../shared/notes/measurement.md
section 4); the harness's group weight is worth the same, so under contention it keeps this share."""
FITS = ("scale", "refuse", "off")


@dataclass(frozen=True)
class HostFit:
    """How a cluster was fitted to the host: the cores, the reserve, the cluster's demand, the factor."""

    host_milli: int
    reserve_milli: int
    demand_milli: int
    factor: float
    fit: str

    @property
    def capacity_milli(self) -> int:
        return max(0, self.host_milli - self.reserve_milli)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "capacity_milli": self.capacity_milli}

    @property
    def notice(self) -> str:
        if self.fit == "off" and self.demand_milli > self.capacity_milli:
            return (f"the cluster's {self.demand_milli / 1000:g} cores run as declared on the host's "
                    f"{self.capacity_milli / 1000:g} beside the harness (--host-fit off): over-subscribed")
        if self.factor >= 1.0:
            return (f"the cluster's {self.demand_milli / 1000:g} cores fit the host's {self.capacity_milli / 1000:g} "
                    f"({self.host_milli / 1000:g} less {self.reserve_milli / 1000:g} for the harness): not scaled")
        return (f"the cluster's {self.demand_milli / 1000:g} cores are scaled by {self.factor:.3f} to the host's "
                f"{self.capacity_milli / 1000:g} ({self.host_milli / 1000:g} less {self.reserve_milli / 1000:g} for the "
                f"harness): node quotas, core speed, the neighbour and the request rate alike")


def host_milli() -> int:
    """The CPU this process may use, in millicores (its affinity mask: what a cpuset allows)."""
    try:
        return 1000 * len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 1000 * (os.cpu_count() or 1)


def fit_host(cluster_name: str, hardware: dict[str, NodeHardware], *, fit: str = "scale",
             reserve_milli: int = DEFAULT_RESERVE_MILLI, host: int | None = None) -> HostFit:
    """The factor that fits ``hardware`` to the host (1.0 when it fits), or a refusal."""
    if fit not in FITS:
        raise InputError(f"must be one of {', '.join(FITS)}, got {fit!r}", field="--host-fit")
    host = host_milli() if host is None else host
    if not 0 <= reserve_milli < host:
        raise InputError(f"must be at least 0 and below the host's {host}m, got {reserve_milli}m", field="--reserve")
    demand = sum(h.cpu_milli for h in hardware.values())
    capacity = host - reserve_milli
    factor = 1.0 if demand <= capacity or fit == "off" else capacity / demand
    if factor < 1.0 and fit == "refuse":
        raise TestbedError(f"cluster {cluster_name} needs {demand / 1000:g} cores and this host has "
                           f"{host / 1000:g} ({capacity / 1000:g} beside the harness): run it with --host-fit scale, "
                           f"or on a bigger host")
    return HostFit(host, reserve_milli, demand, round(factor, 6), fit)


def scale_hardware(hardware: dict[str, NodeHardware], factor: float) -> dict[str, NodeHardware]:
    """Every CPU figure of the hardware times ``factor`` (links untouched)."""
    if factor >= 1.0:
        return dict(hardware)
    out = {}
    for name, h in hardware.items():
        nb = h.neighbour
        if nb is not None:
            nb = replace(nb, cpu_milli=max(10, int(round(nb.cpu_milli * factor))))
        out[name] = replace(h, cpu_milli=max(10, int(round(h.cpu_milli * factor))),
                            core_speed=h.core_speed * factor, neighbour=nb)
    return out


def thin_mask(functions: np.ndarray, factor: float) -> np.ndarray:
    """Which requests a lab scaled by ``factor`` keeps: a share ``factor`` of each function's,
    evenly spread through its arrivals (request ``k`` of a function is kept when ``floor((k+1) f)``
    steps past ``floor(k f)``), so the rate of every function, and its burstiness, scale alike and
    no seed is needed."""
    keep = np.ones(len(functions), dtype=bool)
    if factor >= 1.0:
        return keep
    for fn in np.unique(functions):
        idx = np.flatnonzero(functions == fn)
        k = np.arange(idx.size)
        keep[idx] = np.floor((k + 1) * factor) > np.floor(k * factor)
    return keep


__all__ = ["DEFAULT_RESERVE_MILLI", "FITS", "HostFit", "fit_host", "host_milli", "scale_hardware", "thin_mask"]
