"""Nodes and Pods, read from the Kubernetes objects ``kubectl get ... -o json`` prints.

Only the fields scheduling reads are kept, parsed once into frozen records. Quantities are
parsed by the official client's ``kubernetes.utils.parse_quantity`` and rounded up as
``resource.Quantity.Value()`` / ``MilliValue()`` do (``apimachinery/pkg/api/resource/quantity.go``).

Pod requests follow ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``):
the sum over containers, the max with each init container (sidecars, i.e. init containers with
``restartPolicy: Always``, add to both), plus ``spec.overhead``. The *non-zero* variant that
NodeResourcesFit scoring and the node's ``NonZeroRequested`` use counts a container that lacks a
``cpu`` request as 100m and one that lacks ``memory`` as 200Mi (``pkg/scheduler/util/pod_resources.go``,
``DefaultMilliCPURequest`` / ``DefaultMemoryRequest``); an explicit ``"0"`` stays 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

from testbed.cluster import Taint
from testbed.errors import ConfigError
from testbed.scheduler.selectors import (
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    Toleration,
    parse_label_selector,
    parse_node_selector_terms,
    parse_tolerations,
)

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_MILLI_CPU_REQUEST = 100  # pkg/scheduler/util/pod_resources.go
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024  # pkg/scheduler/util/pod_resources.go
DEFAULT_SCHEDULER_NAME = "default-scheduler"
NON_SCALAR = frozenset({CPU, MEMORY, PODS, EPHEMERAL_STORAGE, "storage"})


def is_scalar_resource(name: str) -> bool:
    """Extended, hugepages and attachable-volume resources (``schedutil.IsScalarResourceName``)."""
    return name not in NON_SCALAR


def quantity_value(resource: str, raw: Any, *, file: str | None = None, field: str = "quantity") -> int:
    """A quantity as the scheduler stores it: millicores for ``cpu``, whole units otherwise (rounded up)."""
    try:
        q: Decimal = parse_quantity(raw)
    except (ValueError, InvalidOperation, TypeError):
        raise ConfigError(f"{raw!r} is not a Kubernetes quantity", file=file, field=field) from None
    if resource == CPU:
        return int(math.ceil(q * 1000))
    return int(math.ceil(q))


def _resource_list(raw: Any, *, file: str | None, field: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping of resource name to quantity", file=file, field=field)
    return {str(k): quantity_value(str(k), v, file=file, field=f"{field}.{k}") for k, v in raw.items()}


# --- Node ---------------------------------------------------------------------------------------


def normalized_image_name(name: str) -> str:
    """``imagelocality.normalizedImageName``: a reference without a tag gets ``:latest``."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


@dataclass(frozen=True, eq=False)
class Node:
    """A node as scheduling sees it. ``allocatable`` has cpu in millicores, the rest in units."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    images: Mapping[str, int] = field(default_factory=dict)
    ready: bool = True


def node_from_k8s(obj: Mapping[str, Any], *, file: str | None = None, where: str = "") -> Node:
    """A ``v1/Node`` object (``status.allocatable``, falling back to ``status.capacity``)."""
    if not isinstance(obj, Mapping):
        raise ConfigError("a node must be a mapping", file=file, field=where or None)
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    pre = f"{where}." if where else ""
    if not isinstance(name, str) or not name:
        raise ConfigError("a node needs metadata.name", file=file, field=f"{pre}metadata.name")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    alloc_raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = _resource_list(alloc_raw, file=file, field=f"{pre}status.allocatable")
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        eff = t.get("effect")
        if eff not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ConfigError(f"taint effect {eff!r} is not NoSchedule, PreferNoSchedule or NoExecute", file=file, field=f"{pre}spec.taints[{i}].effect")
        taints.append(Taint(str(t.get("key") or ""), str(t.get("value") or ""), eff))
    images: dict[str, int] = {}
    for img in status.get("images") or []:
        size = int(img.get("sizeBytes") or 0)
        for n in img.get("names") or []:
            images[str(n)] = size
    ready = True
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            ready = str(c.get("status")) == "True"
    return Node(
        name=name,
        labels=dict(meta.get("labels") or {}),
        allocatable=allocatable,
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable", False)),
        images=images,
        ready=ready,
    )


# --- Pod ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    requests: tuple[tuple[str, int], ...]
    sidecar: bool = False  # an init container with restartPolicy Always


@dataclass(frozen=True)
class AffinityTerm:
    """A pod (anti-)affinity term (``framework.AffinityTerm``); ``weight`` is 0 for required terms.

    A term matches a pod when the pod's namespace is listed (by default the term owner's
    namespace) or its namespace labels match ``namespace_selector``, and the labels match.
    Namespace labels are taken to be the ``kubernetes.io/metadata.name`` label every namespace carries.
    """

    selector: LabelSelector | None
    namespaces: tuple[str, ...]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None:
            return False
        ns_ok = namespace in self.namespaces or (
            self.namespace_selector is not None and self.namespace_selector.matches({NAMESPACE_NAME_LABEL: namespace})
        )
        return ns_ok and self.selector.matches(labels)


@dataclass(frozen=True)
class SpreadConstraint:
    """A topology spread constraint with ``matchLabelKeys`` already merged into the selector."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector | None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True, eq=False)
class Pod:
    """A pod as scheduling sees it. ``signature`` identifies pods that schedule identically
    (same namespace, labels and spec; not name, uid or nodeName), so the scheduler can cache
    per-"template" data for the many identical replicas of a Knative revision."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    overhead: tuple[tuple[str, int], ...] = ()
    node_name: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    node_selector: tuple[tuple[str, str], ...] = ()
    required_node_terms: tuple[NodeSelectorTerm, ...] | None = None
    preferred_node_terms: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    affinity_required: tuple[AffinityTerm, ...] = ()
    affinity_preferred: tuple[AffinityTerm, ...] = ()
    anti_affinity_required: tuple[AffinityTerm, ...] = ()
    anti_affinity_preferred: tuple[AffinityTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    owner_kind: str = ""
    uid: str = ""
    phase: str = ""
    terminating: bool = False
    signature: str = ""
    requests: Mapping[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0

    @property
    def has_affinity(self) -> bool:
        return bool(self.affinity_required or self.affinity_preferred or self.anti_affinity_required or self.anti_affinity_preferred)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def pod_requests(
    containers: tuple[Container, ...],
    init_containers: tuple[Container, ...],
    overhead: tuple[tuple[str, int], ...],
    *,
    non_missing: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """``resourcehelper.PodRequests``; ``non_missing`` fills a container's absent requests."""

    def reqs(c: Container) -> dict[str, int]:
        d = dict(c.requests)
        if non_missing:
            for k, v in non_missing.items():
                d.setdefault(k, v)
        return d

    total: dict[str, int] = {}
    for c in containers:
        for k, v in reqs(c).items():
            total[k] = total.get(k, 0) + v
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in init_containers:
        r = reqs(c)
        if c.sidecar:
            for k, v in r.items():
                total[k] = total.get(k, 0) + v
                sidecars[k] = sidecars.get(k, 0) + v
            effective = dict(sidecars)
        else:
            effective = dict(r)
            for k, v in sidecars.items():
                effective[k] = effective.get(k, 0) + v
        for k, v in effective.items():
            init_max[k] = max(init_max.get(k, 0), v)
    for k, v in init_max.items():
        total[k] = max(total.get(k, 0), v)
    for k, v in overhead:
        total[k] = total.get(k, 0) + v
    return total


def _mapping_items(raw: Any, *, file: str | None, field: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The items of a list of mappings with their field paths (``field[i]``); anything else is a
    ConfigError naming the path. ``None`` (the field left out) is an empty list."""
    if raw is None:
        return
    if not isinstance(raw, list):
        raise ConfigError("must be a list", file=file, field=field)
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("must be a mapping", file=file, field=f)
        yield f, item


def _containers(raw: Any, *, init: bool, file: str | None, field: str) -> tuple[Container, ...]:
    out = []
    for f, c in _mapping_items(raw, file=file, field=field):
        res = c.get("resources") or {}
        requests = _resource_list(res.get("requests"), file=file, field=f"{f}.resources.requests")
        # API-server defaulting (pkg/apis/core/v1/defaults.go, SetDefaults_Pod): a resource with a
        # limit and no request requests its limit, so a stored pod always shows it.
        limits = _resource_list(res.get("limits"), file=file, field=f"{f}.resources.limits")
        for k, v in limits.items():
            requests.setdefault(k, v)
        out.append(
            Container(
                name=str(c.get("name") or ""),
                image=str(c.get("image") or ""),
                requests=tuple(sorted(requests.items())),
                sidecar=init and c.get("restartPolicy") == "Always",
            )
        )
    return tuple(out)


def _affinity_terms(
    raw: Any, *, weighted: bool, namespace: str, labels: Mapping[str, str], file: str | None, field: str
) -> tuple[AffinityTerm, ...]:
    """Pod (anti-)affinity terms; ``matchLabelKeys``/``mismatchLabelKeys`` are merged into the
    selector with the owner pod's label values, as the API server does on pod creation."""
    out = []
    for f, e in _mapping_items(raw, file=file, field=field):
        weight = 0
        term = e
        if weighted:
            weight = e.get("weight")
            if not isinstance(weight, int) or not 1 <= weight <= 100:
                raise ConfigError(f"weight {weight!r} is not in 1..100", file=file, field=f"{f}.weight")
            term = e.get("podAffinityTerm") or {}
            f = f"{f}.podAffinityTerm"
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConfigError("topologyKey is required", file=file, field=f"{f}.topologyKey")
        namespaces = tuple(str(n) for n in term.get("namespaces") or [])
        ns_sel = parse_label_selector(term.get("namespaceSelector"), file=file, field=f"{f}.namespaceSelector")
        if not namespaces and ns_sel is None:
            namespaces = (namespace,)
        sel = parse_label_selector(term.get("labelSelector"), file=file, field=f"{f}.labelSelector")
        if sel is not None:
            extra = [Requirement(k, "In", (labels[k],)) for k in term.get("matchLabelKeys") or [] if k in labels]
            extra += [Requirement(k, "NotIn", (labels[k],)) for k in term.get("mismatchLabelKeys") or [] if k in labels]
            if extra:
                sel = LabelSelector(sel.requirements + tuple(extra))
        out.append(AffinityTerm(sel, namespaces, ns_sel, key, int(weight)))
    return tuple(out)


def _spread_constraints(raw: Any, labels: Mapping[str, str], *, file: str | None, field: str) -> tuple[SpreadConstraint, ...]:
    out = []
    for f, c in _mapping_items(raw, file=file, field=field):
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or skew <= 0:
            raise ConfigError(f"maxSkew {skew!r} must be a positive integer", file=file, field=f"{f}.maxSkew")
        key = c.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConfigError("topologyKey is required", file=file, field=f"{f}.topologyKey")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ConfigError(f"whenUnsatisfiable {when!r} is not DoNotSchedule or ScheduleAnyway", file=file, field=f"{f}.whenUnsatisfiable")
        sel = parse_label_selector(c.get("labelSelector"), file=file, field=f"{f}.labelSelector")
        keys = [k for k in c.get("matchLabelKeys") or [] if k in labels]
        if keys and sel is not None:
            sel = LabelSelector(sel.requirements + tuple(Requirement(k, "In", (labels[k],)) for k in keys))
        out.append(
            SpreadConstraint(
                max_skew=skew,
                topology_key=key,
                when_unsatisfiable=when,
                selector=sel,
                node_affinity_policy=c.get("nodeAffinityPolicy") or "Honor",
                node_taints_policy=c.get("nodeTaintsPolicy") or "Ignore",
            )
        )
    return tuple(out)


def pod_from_k8s(obj: Mapping[str, Any], *, file: str | None = None, where: str = "") -> Pod:
    """A ``v1/Pod`` object; the derived requests and the template signature are computed here."""
    if not isinstance(obj, Mapping):
        raise ConfigError("a pod must be a mapping", file=file, field=where or None)
    pre = f"{where}." if where else ""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    namespace = str(meta.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    name = str(meta.get("name") or meta.get("generateName") or "")
    containers = _containers(spec.get("containers"), init=False, file=file, field=f"{pre}spec.containers")
    init_containers = _containers(spec.get("initContainers"), init=True, file=file, field=f"{pre}spec.initContainers")
    overhead = tuple(sorted(_resource_list(spec.get("overhead"), file=file, field=f"{pre}spec.overhead").items()))
    aff = spec.get("affinity") or {}
    na = aff.get("nodeAffinity") or {}
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    required_terms = None
    if req is not None:
        required_terms = parse_node_selector_terms(
            req.get("nodeSelectorTerms"), file=file, field=f"{pre}spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        )
    preferred = []
    pf = f"{pre}spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for i, p in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        w = p.get("weight")
        if not isinstance(w, int) or not 1 <= w <= 100:
            raise ConfigError(f"weight {w!r} is not in 1..100", file=file, field=f"{pf}[{i}].weight")
        (term,) = parse_node_selector_terms([p.get("preference") or {}], file=file, field=f"{pf}[{i}].preference")
        preferred.append((w, term))
    pa = aff.get("podAffinity") or {}
    paa = aff.get("podAntiAffinity") or {}
    base = f"{pre}spec.affinity"

    def terms(block: Mapping[str, Any], kind: str, path: str) -> tuple[AffinityTerm, ...]:
        weighted = kind.startswith("preferred")
        return _affinity_terms(
            block.get(kind), weighted=weighted, namespace=namespace, labels=labels, file=file, field=f"{base}.{path}.{kind}"
        )

    owner_kind = ""
    for o in meta.get("ownerReferences") or []:
        if o.get("controller") or not owner_kind:
            owner_kind = str(o.get("kind") or "")
    node_selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
    tolerations = parse_tolerations(spec.get("tolerations"), file=file, field=f"{pre}spec.tolerations")
    spread = _spread_constraints(spec.get("topologySpreadConstraints"), labels, file=file, field=f"{pre}spec.topologySpreadConstraints")
    requests = pod_requests(containers, init_containers, overhead)
    nonzero = pod_requests(
        containers, init_containers, overhead, non_missing={CPU: DEFAULT_MILLI_CPU_REQUEST, MEMORY: DEFAULT_MEMORY_REQUEST}
    )
    fields = dict(
        namespace=namespace,
        labels=labels,
        containers=containers,
        init_containers=init_containers,
        overhead=overhead,
        scheduler_name=str(spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME),
        node_selector=node_selector,
        required_node_terms=required_terms,
        preferred_node_terms=tuple(preferred),
        affinity_required=terms(pa, "requiredDuringSchedulingIgnoredDuringExecution", "podAffinity"),
        affinity_preferred=terms(pa, "preferredDuringSchedulingIgnoredDuringExecution", "podAffinity"),
        anti_affinity_required=terms(paa, "requiredDuringSchedulingIgnoredDuringExecution", "podAntiAffinity"),
        anti_affinity_preferred=terms(paa, "preferredDuringSchedulingIgnoredDuringExecution", "podAntiAffinity"),
        tolerations=tolerations,
        spread_constraints=spread,
        owner_kind=owner_kind,
    )
    signature = repr(sorted((k, repr(v)) for k, v in fields.items()))
    return Pod(
        name=name,
        node_name=str(spec.get("nodeName") or ""),
        uid=str(meta.get("uid") or ""),
        phase=str(status.get("phase") or ""),
        terminating=meta.get("deletionTimestamp") is not None,
        signature=signature,
        requests=requests,
        nonzero_cpu=nonzero.get(CPU, 0),
        nonzero_memory=nonzero.get(MEMORY, 0),
        **fields,  # type: ignore[arg-type]
    )


# --- files --------------------------------------------------------------------------------------


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    """The objects in a JSON or YAML file: a single object, a ``List`` (``kubectl get -o json``),
    a JSON array, or several YAML documents."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError(f"cannot read: {err.strerror}", file=p) from None
    docs: list[Any]
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as err:
            raise ConfigError(f"neither JSON nor YAML: {err}", file=p) from None
    out: list[dict[str, Any]] = []

    def add(d: Any, where: str) -> None:
        if isinstance(d, list):
            for i, x in enumerate(d):
                add(x, f"{where}[{i}]")
        elif isinstance(d, dict) and isinstance(d.get("items"), list) and str(d.get("kind", "List")).endswith("List"):
            for i, x in enumerate(d["items"]):
                add(x, f"{where}items[{i}]")
        elif isinstance(d, dict):
            out.append(d)
        else:
            raise ConfigError("expected a Kubernetes object or a List of them", file=p, field=where or None)

    for d in docs:
        add(d, "")
    return out


def load_nodes(path: str | Path) -> list[Node]:
    objs = load_objects(path)
    return [node_from_k8s(o, file=str(path), where=f"items[{i}]") for i, o in enumerate(objs) if o.get("kind", "Node") == "Node"]


def load_pods(path: str | Path) -> list[Pod]:
    objs = load_objects(path)
    return [pod_from_k8s(o, file=str(path), where=f"items[{i}]") for i, o in enumerate(objs) if o.get("kind", "Pod") == "Pod"]
