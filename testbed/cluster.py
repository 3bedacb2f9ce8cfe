"""The cluster spec (DESIGN.md, "Cluster spec"): one YAML file drives ``sim`` and ``local``.

A spec lists node groups; each group expands to ``count`` identical nodes named
``<name>-<i>`` (or exactly ``name`` when ``count`` is 1 and ``exact_name`` is set by an import).
Capacities are Kubernetes quantities. ``to_k8s_node`` renders each node as the JSON
``kubectl get node -o json`` would print, so the scheduler reads spec nodes and real nodes through
the same parser.

Example::

    name: mixed-speed
    description: two fast nodes and four slow ones
    defaults: {pods: 110, image_pull_bandwidth: 50Mi}
    groups:
      - {name: fast, count: 2, cpu: "4", memory: 8Gi, speed: 1.5, images: [scoretune/float-ops]}
      - {name: slow, count: 4, cpu: "4", memory: 8Gi, speed: 0.7,
         labels: {topology.kubernetes.io/zone: zone-b},
         taints: [{key: spot, value: "true", effect: PreferNoSchedule}]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.spec import cpu_milli, memory_bytes
from testbed.errors import ClusterSpecError

CLUSTERS_DIR = Path(__file__).resolve().parent / "clusters"
HOSTNAME_LABEL = "kubernetes.io/hostname"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Taint(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class _Group(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    count: int = Field(default=1, ge=1, le=100_000)
    exact_name: bool = False
    cpu: str | int | float
    memory: str | int
    pods: int | None = Field(default=None, ge=1)
    speed: float = Field(default=1.0, gt=0, le=100)
    images: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[_Taint] = Field(default_factory=list)
    image_pull_bandwidth: str | int | None = None
    unschedulable: bool = False


class _Defaults(_Strict):
    pods: int = Field(default=110, ge=1)
    image_pull_bandwidth: str | int = "50Mi"


class _ClusterModel(_Strict):
    name: str
    description: str = ""
    defaults: _Defaults = _Defaults()
    groups: list[_Group] = Field(min_length=1)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeSpec:
    """One node. ``speed`` scales service time (2.0 runs work in half the time)."""

    name: str
    group: str
    cpu_milli: int
    memory_bytes: int
    pods: int
    speed: float
    images: tuple[str, ...]
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    image_pull_bytes_per_s: float
    unschedulable: bool = False

    def to_k8s_node(self, image_sizes: dict[str, int] | None = None) -> dict[str, Any]:
        """The node as a Kubernetes ``v1/Node`` object (status.images carries the cached images
        with their sizes, which is what ImageLocality reads)."""
        sizes = image_sizes or {}
        labels = {HOSTNAME_LABEL: self.name, **self.labels}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {
                "unschedulable": self.unschedulable,
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in self.taints],
            },
            "status": {
                "capacity": {"cpu": f"{self.cpu_milli}m", "memory": str(self.memory_bytes), "pods": str(self.pods)},
                "allocatable": {"cpu": f"{self.cpu_milli}m", "memory": str(self.memory_bytes), "pods": str(self.pods)},
                "images": [{"names": [img], "sizeBytes": int(sizes.get(img, 0))} for img in self.images],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    description: str
    nodes: tuple[NodeSpec, ...]
    path: Path | None = None
    groups: tuple[str, ...] = field(default=())

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_k8s_nodes(self, image_sizes: dict[str, int] | None = None) -> list[dict[str, Any]]:
        return [n.to_k8s_node(image_sizes) for n in self.nodes]


def parse_cluster(data: Any, *, file: str | Path = "<cluster>") -> ClusterSpec:
    if not isinstance(data, dict):
        raise ClusterSpecError("a cluster spec must be a mapping", file=file)
    try:
        m = _ClusterModel.model_validate(data)
    except ValidationError as err:
        e = err.errors()[0]
        raise ClusterSpecError(e["msg"], file=file, field=".".join(str(p) for p in e["loc"])) from None
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for gi, g in enumerate(m.groups):
        cpu = cpu_milli(g.cpu)
        mem = memory_bytes(g.memory)
        if cpu <= 0:
            raise ClusterSpecError("node cpu must be positive", file=file, field=f"groups.{gi}.cpu")
        if mem <= 0:
            raise ClusterSpecError("node memory must be positive", file=file, field=f"groups.{gi}.memory")
        bw = float(memory_bytes(g.image_pull_bandwidth if g.image_pull_bandwidth is not None else m.defaults.image_pull_bandwidth))
        if bw <= 0:
            raise ClusterSpecError("image pull bandwidth must be positive", file=file, field=f"groups.{gi}.image_pull_bandwidth")
        names = [g.name] if (g.exact_name and g.count == 1) else [f"{g.name}-{i}" for i in range(g.count)]
        for name in names:
            if name in seen:
                raise ClusterSpecError(f"duplicate node name {name!r}", file=file, field=f"groups.{gi}.name")
            seen.add(name)
            nodes.append(
                NodeSpec(
                    name=name,
                    group=g.name,
                    cpu_milli=cpu,
                    memory_bytes=mem,
                    pods=g.pods or m.defaults.pods,
                    speed=g.speed,
                    images=tuple(g.images),
                    labels=dict(g.labels),
                    taints=tuple(Taint(t.key, t.value, t.effect) for t in g.taints),
                    image_pull_bytes_per_s=bw,
                    unschedulable=g.unschedulable,
                )
            )
    return ClusterSpec(
        name=m.name,
        description=m.description,
        nodes=tuple(nodes),
        path=Path(file) if not str(file).startswith("<") else None,
        groups=tuple(g.name for g in m.groups),
    )


def load_cluster(path: str | Path) -> ClusterSpec:
    """Load a cluster spec by path, or by the name of a shipped spec in ``testbed/clusters``."""
    p = Path(path)
    if not p.exists() and (CLUSTERS_DIR / f"{path}.yaml").exists():
        p = CLUSTERS_DIR / f"{path}.yaml"
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as err:
        raise ClusterSpecError(f"cannot read: {err.strerror}", file=p) from None
    except yaml.YAMLError as err:
        raise ClusterSpecError(f"not valid YAML: {err}", file=p) from None
    return parse_cluster(data, file=p)


def cluster_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """One group per node (exact names): a lossless YAML form, used by ``sim import-cluster``."""
    return {
        "name": spec.name,
        "description": spec.description,
        "groups": [
            {
                "name": n.name,
                "exact_name": True,
                "cpu": f"{n.cpu_milli}m",
                "memory": n.memory_bytes,
                "pods": n.pods,
                "speed": n.speed,
                "images": list(n.images),
                "labels": dict(n.labels),
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
                "image_pull_bandwidth": int(n.image_pull_bytes_per_s),
                "unschedulable": n.unschedulable,
            }
            for n in spec.nodes
        ],
    }
