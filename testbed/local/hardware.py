"""A lab cluster's hardware: what its nodes really are, which no API shows and no tuner reads.

A cluster spec is what ``kubectl get nodes`` would show (capacity, labels, taints, images). On a
real cluster the hardware behind it differs from what a user would assume from that: a "4 CPU"
node may be an over-committed VM, a node's link to the registry may be slow, a neighbour may
come and go. The embedded lab makes that difference real with a *hardware file* beside the spec
(``testbed/clusters/hardware/<cluster>.yaml``, or ``testbed up --hardware FILE``), read only by the
lab's node agents::

    cluster: lab-hidden-links           # must match the spec's name
    nodes:                              # by node name, or a group name for all its nodes
      fast:   {link: 6Mi}               # bytes/s of the node's link (shaped with tc on containers)
      slow-1: {cpu: 600m, core_speed: 0.6,
               neighbour: {cpu: 700m, duty: [0.1, 0.9], period: 30s}}

- ``cpu``: the node's real CPU bandwidth (a quota over all its pods); default: the spec's cpu
  scaled by its speed relative to the fastest node (:func:`testbed.local.cpu.quota_milli`);
- ``core_speed``: what one core of a pod's CPU limit is worth here (0 < s <= 1); default: the
  spec's speed relative to the fastest node;
- ``link``: the node's link rate; default: the spec's ``image_pull_bandwidth``;
- ``neighbour``: a process in the node's CPU group that uses up to ``cpu`` with a duty that moves
  between ``duty[0]`` and ``duty[1]`` along a sine of ``period`` seconds (a noisy neighbour).

Nothing else in the repository imports this module but the lab (``tests/test_layout.py``) and the
tests, and the leak test makes reading it raise while tuners run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from testbed.cluster import (
    CLUSTERS_DIR,
    MAX_NODE_CPU_MILLI,
    MAX_PULL_BYTES_PER_S,
    ClusterSpec,
    NodeSpec,
    Quantity,
    quantity,
    read_text,
    validation_error_parts,
    yaml_error_line,
)
from testbed.errors import ClusterSpecError
from testbed.local.cpu import quota_milli

HARDWARE_DIR = CLUSTERS_DIR / "hardware"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Neighbour(_Strict):
    cpu: Quantity
    duty: tuple[float, float] = (0.0, 1.0)
    period: str | float = "30s"


class _Node(_Strict):
    cpu: Quantity | None = None
    core_speed: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    link: Quantity | None = None
    neighbour: _Neighbour | None = None


class _Hardware(_Strict):
    cluster: str
    nodes: dict[str, _Node] = Field(default_factory=dict)


@dataclass(frozen=True)
class Neighbour:
    cpu_milli: int
    duty_low: float
    duty_high: float
    period_s: float

    def duty(self, t: float) -> float:
        """The neighbour's duty at ``t`` seconds after it started: a sine between the bounds."""
        mid, amp = (self.duty_low + self.duty_high) / 2, (self.duty_high - self.duty_low) / 2
        return mid + amp * math.sin(2 * math.pi * t / self.period_s)


@dataclass(frozen=True)
class NodeHardware:
    cpu_milli: int
    core_speed: float
    link_bytes_per_s: float
    neighbour: Neighbour | None = None


def _seconds(value: str | float, *, file: str, field: str) -> float:
    text = str(value).strip()
    try:
        s = float(text[:-1]) * 60 if text.endswith("m") else float(text.removesuffix("s"))
    except ValueError:
        raise ClusterSpecError(f"{value!r} is not a duration such as 30s or 2m", file=file, field=field) from None
    if not math.isfinite(s) or s <= 0:
        raise ClusterSpecError(f"must be a positive duration, got {value!r}", file=file, field=field)
    return s


def defaults(cluster: ClusterSpec) -> dict[str, NodeHardware]:
    """The hardware a spec implies when no file says otherwise (the process lab's assumptions)."""
    top = max(n.speed for n in cluster.nodes)
    return {n.name: NodeHardware(quota_milli(n.cpu_milli, n.speed, top), n.speed / top, n.image_pull_bytes_per_s)
            for n in cluster.nodes}


def parse_hardware(data: Any, cluster: ClusterSpec, *, file: str = "<hardware>") -> dict[str, NodeHardware]:
    """Node name -> hardware; every error names the file and field in one line."""
    if not isinstance(data, dict):
        raise ClusterSpecError("a hardware file must be a mapping", file=file)
    try:
        m = _Hardware.model_validate(data)
    except ValidationError as err:
        where, msg = validation_error_parts(err)
        raise ClusterSpecError(msg, file=file, field=where) from None
    if m.cluster != cluster.name:
        raise ClusterSpecError(f"describes cluster {m.cluster!r}, not {cluster.name!r}", file=file, field="cluster")
    out = defaults(cluster)
    by_group: dict[str, list[NodeSpec]] = {}
    for n in cluster.nodes:
        by_group.setdefault(n.group, []).append(n)
    names = {n.name for n in cluster.nodes}
    # groups first, then single nodes, so a node's own entry wins over its group's
    for key in sorted(m.nodes, key=lambda k: k in names):
        entry = m.nodes[key]
        targets = [key] if key in names else [n.name for n in by_group.get(key, [])]
        if not targets:
            raise ClusterSpecError(f"no node or group named {key!r} in {cluster.name}", file=file, field=f"nodes.{key}")
        f = f"nodes.{key}"
        for name in targets:
            hw = out[name]
            cpu = hw.cpu_milli if entry.cpu is None else quantity(
                entry.cpu, scale=1000, what="cpu", file=file, field=f"{f}.cpu", upper=MAX_NODE_CPU_MILLI, upper_text="1000000 cores")
            link = hw.link_bytes_per_s if entry.link is None else float(quantity(
                entry.link, what="link", file=file, field=f"{f}.link", upper=MAX_PULL_BYTES_PER_S, upper_text="1Pi per second"))
            nb = hw.neighbour
            if entry.neighbour is not None:
                lo, hi = entry.neighbour.duty
                if not 0 <= lo <= hi <= 1:
                    raise ClusterSpecError(f"must be [low, high] with 0 <= low <= high <= 1, got {[lo, hi]}", file=file, field=f"{f}.neighbour.duty")
                nb = Neighbour(
                    quantity(entry.neighbour.cpu, scale=1000, what="neighbour cpu", file=file, field=f"{f}.neighbour.cpu",
                             upper=MAX_NODE_CPU_MILLI, upper_text="1000000 cores"),
                    lo, hi, _seconds(entry.neighbour.period, file=file, field=f"{f}.neighbour.period"))
            out[name] = NodeHardware(cpu, entry.core_speed if entry.core_speed is not None else hw.core_speed, link, nb)
    return out


def hardware_file(cluster: ClusterSpec) -> Path | None:
    """The shipped hardware file of ``cluster``, when there is one."""
    path = HARDWARE_DIR / f"{cluster.name}.yaml"
    return path if path.exists() else None


def load_hardware(cluster: ClusterSpec, path: str | Path | None = None) -> tuple[dict[str, NodeHardware], str | None]:
    """The cluster's hardware and the file it came from (None: the spec's own assumptions)."""
    p = Path(path) if path is not None else hardware_file(cluster)
    if p is None:
        return defaults(cluster), None
    text = read_text(p, what="a hardware file (YAML)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ClusterSpecError(f"not valid YAML: {yaml_error_line(err)}", file=p) from None
    return parse_hardware(data, cluster, file=str(p)), str(p)


def to_dict(hw: dict[str, NodeHardware]) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: asdict(v) for k, v in hw.items()}


def from_dict(d: dict[str, Any]) -> dict[str, NodeHardware]:
    return {k: NodeHardware(v["cpu_milli"], v["core_speed"], v["link_bytes_per_s"],
                            Neighbour(**v["neighbour"]) if v.get("neighbour") else None) for k, v in d.items()}


__all__ = ["HARDWARE_DIR", "Neighbour", "NodeHardware", "defaults", "from_dict", "hardware_file", "load_hardware", "parse_hardware", "to_dict"]
