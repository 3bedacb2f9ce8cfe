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

import math
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from functions.errors import InputError, read_input_text
from functions.spec import parse_quantity
from testbed.errors import ClusterSpecError
from testbed.scheduler.selectors import Taint  # the core/v1 Taint the scheduler matches

CLUSTERS_DIR = Path(__file__).resolve().parent / "clusters"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Upper bounds that keep every per-node sum inside the int64 arrays of the scheduler and the
# simulator (a typo such as ``1e30`` would otherwise overflow them or allocate terabytes): far
# above any real node, far below 2**63.
MAX_NODE_CPU_MILLI = 10**9  # a million cores
MAX_NODE_MEMORY_BYTES = 2**60  # 1 Ei
MAX_PULL_BYTES_PER_S = 2**50  # 1 Pi/s
MAX_NODE_PODS = 10_000  # kubelet's maxPods; Kubernetes documents 110 per node as the supported limit


def _quantity_scalar(value: Any) -> Any:
    """A quantity is written as a string (``500m``, ``8Gi``) or a plain number; YAML's ``true``
    or a list is not one (pydantic's lax mode would read ``true`` as 1 core)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be a Kubernetes quantity such as \"4\", \"500m\" or \"8Gi\", not {value!r}")
    return value


Quantity = Annotated[Any, BeforeValidator(_quantity_scalar)]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text)} characters)"


def quantity(
    value: Any, *, scale: int = 1, what: str, file: str | Path | None, field: str, upper: int, upper_text: str
) -> int:
    """A positive Kubernetes quantity times ``scale``, rounded up (as the API server rounds
    sub-milli cpu), checked to be finite and at most ``upper``; errors name the file and field."""
    value_text = _short(value)
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        raise ClusterSpecError(
            f"{value_text} is not a Kubernetes quantity (e.g. \"4\", \"500m\", \"8Gi\")", file=file, field=field
        ) from None
    if not isinstance(q, Decimal) or not q.is_finite():
        raise ClusterSpecError(f"{value_text} is not a finite quantity", file=file, field=field)
    too_large = ClusterSpecError(f"{what} {value_text} is too large (at most {upper_text})", file=file, field=field)
    try:
        scaled = q * scale
        if scaled > upper:
            raise too_large
        n = int(math.ceil(scaled))
    except ArithmeticError:  # decimal's Overflow and InvalidOperation are ArithmeticErrors
        raise too_large from None
    if n <= 0:
        raise ClusterSpecError(f"{what} must be positive, got {value_text}", file=file, field=field)
    return n


def read_text(path: Path, *, error: type[InputError] = ClusterSpecError, what: str = "a YAML file") -> str:
    """The file's text, or one clear error (:func:`functions.errors.read_input_text`)."""
    return read_input_text(path, error=error, what=what)


def yaml_error_line(err: yaml.YAMLError) -> str:
    """PyYAML's multi-line message in one line: the problem and where it is."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        m = err.problem_mark
        what = err.problem or err.context or "syntax error"
        return f"{what} (line {m.line + 1}, column {m.column + 1})"
    return " ".join(str(err).split())


def validation_error_parts(err: ValidationError) -> tuple[str, str]:
    """The first pydantic error as (dotted field path, message without pydantic's prefixes)."""
    e = err.errors()[0]
    msg = str(e["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return ".".join(str(p) for p in e["loc"]), msg


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
    cpu: Quantity
    memory: Quantity
    pods: int | None = Field(default=None, ge=1, le=MAX_NODE_PODS)
    speed: float = Field(default=1.0, gt=0, le=100, allow_inf_nan=False)
    images: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[_Taint] = Field(default_factory=list)
    image_pull_bandwidth: Quantity | None = None
    unschedulable: bool = False


class _Defaults(_Strict):
    pods: int = Field(default=110, ge=1, le=MAX_NODE_PODS)
    image_pull_bandwidth: Quantity = "50Mi"


class _ClusterModel(_Strict):
    name: str
    description: str = ""
    defaults: _Defaults = _Defaults()
    groups: list[_Group] = Field(min_length=1)


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
        where, msg = validation_error_parts(err)
        raise ClusterSpecError(msg, file=file, field=where) from None
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for gi, g in enumerate(m.groups):
        cpu = quantity(g.cpu, scale=1000, what="node cpu", file=file, field=f"groups.{gi}.cpu",
                       upper=MAX_NODE_CPU_MILLI, upper_text="1000000 cores")
        mem = quantity(g.memory, what="node memory", file=file, field=f"groups.{gi}.memory",
                       upper=MAX_NODE_MEMORY_BYTES, upper_text="1Ei")
        if g.image_pull_bandwidth is not None:
            raw_bw, bw_field = g.image_pull_bandwidth, f"groups.{gi}.image_pull_bandwidth"
        else:
            raw_bw, bw_field = m.defaults.image_pull_bandwidth, "defaults.image_pull_bandwidth"
        bw = float(quantity(raw_bw, what="image pull bandwidth", file=file, field=bw_field,
                            upper=MAX_PULL_BYTES_PER_S, upper_text="1Pi per second"))
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
    if not p.exists() and p.suffix == "" and "/" not in str(path):
        shipped = sorted(x.stem for x in CLUSTERS_DIR.glob("*.yaml"))
        raise ClusterSpecError(f"no such file, nor a shipped cluster; shipped: {', '.join(shipped)}", file=p)
    text = read_text(p, what="a cluster spec (YAML)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ClusterSpecError(f"not valid YAML: {yaml_error_line(err)}", file=p) from None
    except RecursionError:
        raise ClusterSpecError("not a cluster spec: nested too deeply", file=p) from None
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
