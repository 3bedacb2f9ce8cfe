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

Input is checked where it is read, not in the scheduling cycle: a file that is binary, not UTF-8,
empty, truncated or of the wrong shape, a field of the wrong type, and a quantity that is not one,
not finite, negative (``ValidateResourceQuantityValue`` / ``ValidateNonnegativeQuantity`` in
``pkg/apis/core/validation/validation.go`` refuse negative requests, limits, overhead, capacity
and allocatable) or too large (:data:`MAX_QUANTITY`) each raise one ConfigError naming the file and
the field, so the int64 arrays of the hot path never see a value they cannot hold.
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

from functions.errors import read_input_text
from testbed.errors import ConfigError
from testbed.scheduler.selectors import (
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    Taint,
    Toleration,
    expect_mapping,
    expect_str,
    expect_str_list,
    expect_str_map,
    kind_of,
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
#: The largest quantity accepted (2**53: 8 PiB of memory, 9e12 cores in millicores). Upstream's
#: NodeResourcesFit scores compute ``(capacity - requested) * MaxNodeScore`` in int64
#: (``noderesources/least_allocated.go``), which overflows past (2**63-1)/100; the bound leaves
#: room for the per-node sum over a thousand pods and keeps every value exact in float64, which
#: BalancedAllocation's fractions use. No real node or pod comes near it.
MAX_QUANTITY = 2**53
INT32_MAX = 2**31 - 1


def is_scalar_resource(name: str) -> bool:
    """Extended, hugepages and attachable-volume resources (``schedutil.IsScalarResourceName``)."""
    return name not in NON_SCALAR


def quantity_value(resource: str, raw: Any, *, file: str | None = None, field: str = "quantity") -> int:
    """A quantity as the scheduler stores it: millicores for ``cpu``, whole units otherwise (rounded up).

    Refused, with the field named: anything but a string or a number (``true``, a list), what
    ``parse_quantity`` rejects (``"4Gx"``, ``"2cores"``), NaN and infinities, negative values
    (the API server's validation refuses them) and values above :data:`MAX_QUANTITY`."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ConfigError(f"{kind_of(raw)} is not a Kubernetes quantity (e.g. \"500m\", \"4Gi\" or a number)", file=file, field=field)
    try:
        q: Decimal = parse_quantity(raw)
    except (ValueError, InvalidOperation, TypeError, OverflowError):
        raise ConfigError(f"{raw!r} is not a Kubernetes quantity (e.g. \"500m\", \"4Gi\")", file=file, field=field) from None
    if not q.is_finite():
        raise ConfigError(f"{raw!r} is not a finite quantity", file=file, field=field)
    if q < 0:
        raise ConfigError(f"{raw!r}: must be greater than or equal to 0", file=file, field=field)
    try:
        v = int(math.ceil(q * 1000)) if resource == CPU else int(math.ceil(q))
    except (OverflowError, InvalidOperation):
        v = MAX_QUANTITY + 1
    if v > MAX_QUANTITY:
        unit = "millicores" if resource == CPU else "units"
        raise ConfigError(f"{raw!r} is too large (at most {MAX_QUANTITY} {unit})", file=file, field=field)
    return v


def _resource_list(raw: Any, *, file: str | None, field: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"must be a mapping of resource name to quantity, not {kind_of(raw)}", file=file, field=field)
    out = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k:
            raise ConfigError(f"resource names must be non-empty strings, not {kind_of(k)}", file=file, field=field)
        out[k] = quantity_value(k, v, file=file, field=f"{field}.{k}")
    return out


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
    pre = f"{where}." if where else ""
    meta = expect_mapping(obj.get("metadata"), file=file, field=f"{pre}metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a node needs a non-empty string name, not {kind_of(name)}", file=file, field=f"{pre}metadata.name")
    spec = expect_mapping(obj.get("spec"), file=file, field=f"{pre}spec")
    status = expect_mapping(obj.get("status"), file=file, field=f"{pre}status")
    alloc_field = f"{pre}status.allocatable" if status.get("allocatable") else f"{pre}status.capacity"
    alloc_raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = _resource_list(alloc_raw, file=file, field=alloc_field)
    taints = []
    for f, t in _mapping_items(spec.get("taints"), file=file, field=f"{pre}spec.taints"):
        eff = t.get("effect")
        if eff not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ConfigError(f"taint effect {eff!r} is not NoSchedule, PreferNoSchedule or NoExecute", file=file, field=f"{f}.effect")
        key = expect_str(t.get("key"), file=file, field=f"{f}.key")
        if not key:
            raise ConfigError("a taint needs a key", file=file, field=f"{f}.key")
        taints.append(Taint(key, expect_str(t.get("value"), file=file, field=f"{f}.value"), eff))
    images: dict[str, int] = {}
    for f, img in _mapping_items(status.get("images"), file=file, field=f"{pre}status.images"):
        size = img.get("sizeBytes", 0)
        if size is None:
            size = 0
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_QUANTITY:
            raise ConfigError(f"must be a non-negative integer number of bytes, not {kind_of(size)}", file=file, field=f"{f}.sizeBytes")
        for n in expect_str_list(img.get("names"), file=file, field=f"{f}.names"):
            images[n] = size
    ready = True
    for f, c in _mapping_items(status.get("conditions"), file=file, field=f"{pre}status.conditions"):
        if c.get("type") == "Ready":
            ready = expect_str(c.get("status"), file=file, field=f"{f}.status") == "True"
    unschedulable = spec.get("unschedulable", False)
    if unschedulable is None:
        unschedulable = False
    if not isinstance(unschedulable, bool):
        raise ConfigError(f"must be true or false, not {kind_of(unschedulable)}", file=file, field=f"{pre}spec.unschedulable")
    return Node(
        name=name,
        labels=expect_str_map(meta.get("labels"), file=file, field=f"{pre}metadata.labels"),
        allocatable=allocatable,
        taints=tuple(taints),
        unschedulable=unschedulable,
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

    def renamed(self, name: str, uid: str) -> Pod:
        """This pod under another name and uid, every other field the same objects: what
        ``dataclasses.replace(self, name=name, uid=uid)`` gives, without running the generated
        ``__init__`` over every field (the simulator makes one per scale-up from a revision's
        template, and that copy was 6 % of an evaluation's time)."""
        pod = object.__new__(type(self))
        pod.__dict__.update(self.__dict__, name=name, uid=uid)
        return pod

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
        raise ConfigError(f"must be a list, not {kind_of(raw)}", file=file, field=field)
    for i, item in enumerate(raw):
        f = f"{field}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"must be a mapping, not {kind_of(item)}", file=file, field=f)
        yield f, item


def _containers(raw: Any, *, init: bool, file: str | None, field: str) -> tuple[Container, ...]:
    out = []
    for f, c in _mapping_items(raw, file=file, field=field):
        res = expect_mapping(c.get("resources"), file=file, field=f"{f}.resources")
        requests = _resource_list(res.get("requests"), file=file, field=f"{f}.resources.requests")
        # API-server defaulting (pkg/apis/core/v1/defaults.go, SetDefaults_Pod): a resource with a
        # limit and no request requests its limit, so a stored pod always shows it.
        limits = _resource_list(res.get("limits"), file=file, field=f"{f}.resources.limits")
        for k, v in limits.items():
            requests.setdefault(k, v)
        out.append(
            Container(
                name=expect_str(c.get("name"), file=file, field=f"{f}.name"),
                image=expect_str(c.get("image"), file=file, field=f"{f}.image"),
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
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise ConfigError(f"weight {weight!r} is not in 1..100", file=file, field=f"{f}.weight")
            term = expect_mapping(e.get("podAffinityTerm"), file=file, field=f"{f}.podAffinityTerm")
            f = f"{f}.podAffinityTerm"
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConfigError("topologyKey is required", file=file, field=f"{f}.topologyKey")
        namespaces = tuple(expect_str_list(term.get("namespaces"), file=file, field=f"{f}.namespaces"))
        ns_sel = parse_label_selector(term.get("namespaceSelector"), file=file, field=f"{f}.namespaceSelector")
        if not namespaces and ns_sel is None:
            namespaces = (namespace,)
        sel = parse_label_selector(term.get("labelSelector"), file=file, field=f"{f}.labelSelector")
        if sel is not None:
            match_keys = expect_str_list(term.get("matchLabelKeys"), file=file, field=f"{f}.matchLabelKeys")
            mismatch_keys = expect_str_list(term.get("mismatchLabelKeys"), file=file, field=f"{f}.mismatchLabelKeys")
            extra = [Requirement(k, "In", (labels[k],)) for k in match_keys if k in labels]
            extra += [Requirement(k, "NotIn", (labels[k],)) for k in mismatch_keys if k in labels]
            if extra:
                sel = LabelSelector(sel.requirements + tuple(extra))
        out.append(AffinityTerm(sel, namespaces, ns_sel, key, int(weight)))
    return tuple(out)


def _spread_constraints(raw: Any, labels: Mapping[str, str], *, file: str | None, field: str) -> tuple[SpreadConstraint, ...]:
    out = []
    for f, c in _mapping_items(raw, file=file, field=field):
        skew = c.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or not 0 < skew <= INT32_MAX:
            raise ConfigError(f"maxSkew {skew!r} must be a positive integer", file=file, field=f"{f}.maxSkew")
        key = c.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ConfigError("topologyKey is required", file=file, field=f"{f}.topologyKey")
        when = c.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise ConfigError(f"whenUnsatisfiable {when!r} is not DoNotSchedule or ScheduleAnyway", file=file, field=f"{f}.whenUnsatisfiable")
        sel = parse_label_selector(c.get("labelSelector"), file=file, field=f"{f}.labelSelector")
        keys = [k for k in expect_str_list(c.get("matchLabelKeys"), file=file, field=f"{f}.matchLabelKeys") if k in labels]
        if keys and sel is not None:
            sel = LabelSelector(sel.requirements + tuple(Requirement(k, "In", (labels[k],)) for k in keys))
        out.append(
            SpreadConstraint(
                max_skew=skew,
                topology_key=key,
                when_unsatisfiable=when,
                selector=sel,
                node_affinity_policy=_policy(c.get("nodeAffinityPolicy"), "Honor", file=file, field=f"{f}.nodeAffinityPolicy"),
                node_taints_policy=_policy(c.get("nodeTaintsPolicy"), "Ignore", file=file, field=f"{f}.nodeTaintsPolicy"),
            )
        )
    return tuple(out)


def _policy(raw: Any, default: str, *, file: str | None, field: str) -> str:
    """``nodeAffinityPolicy`` / ``nodeTaintsPolicy``: Honor or Ignore (``validateNodeInclusionPolicy``)."""
    v = expect_str(raw, file=file, field=field) or default
    if v not in ("Honor", "Ignore"):
        raise ConfigError(f"{v!r} is not Honor or Ignore", file=file, field=field)
    return v


def pod_from_k8s(obj: Mapping[str, Any], *, file: str | None = None, where: str = "") -> Pod:
    """A ``v1/Pod`` object; the derived requests and the template signature are computed here."""
    if not isinstance(obj, Mapping):
        raise ConfigError("a pod must be a mapping", file=file, field=where or None)
    pre = f"{where}." if where else ""
    meta = expect_mapping(obj.get("metadata"), file=file, field=f"{pre}metadata")
    spec = expect_mapping(obj.get("spec"), file=file, field=f"{pre}spec")
    status = expect_mapping(obj.get("status"), file=file, field=f"{pre}status")
    namespace = expect_str(meta.get("namespace"), file=file, field=f"{pre}metadata.namespace") or "default"
    labels = expect_str_map(meta.get("labels"), file=file, field=f"{pre}metadata.labels")
    name = expect_str(meta.get("name"), file=file, field=f"{pre}metadata.name") or expect_str(
        meta.get("generateName"), file=file, field=f"{pre}metadata.generateName"
    )
    containers = _containers(spec.get("containers"), init=False, file=file, field=f"{pre}spec.containers")
    init_containers = _containers(spec.get("initContainers"), init=True, file=file, field=f"{pre}spec.initContainers")
    overhead = tuple(sorted(_resource_list(spec.get("overhead"), file=file, field=f"{pre}spec.overhead").items()))
    base = f"{pre}spec.affinity"
    aff = expect_mapping(spec.get("affinity"), file=file, field=base)
    na = expect_mapping(aff.get("nodeAffinity"), file=file, field=f"{base}.nodeAffinity")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    required_terms = None
    if req is not None:
        rf = f"{base}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        required_terms = parse_node_selector_terms(
            expect_mapping(req, file=file, field=rf).get("nodeSelectorTerms"), file=file, field=f"{rf}.nodeSelectorTerms"
        )
    preferred = []
    pf = f"{base}.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for f, p in _mapping_items(na.get("preferredDuringSchedulingIgnoredDuringExecution"), file=file, field=pf):
        w = p.get("weight")
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 100:
            raise ConfigError(f"weight {w!r} is not in 1..100", file=file, field=f"{f}.weight")
        pref = expect_mapping(p.get("preference"), file=file, field=f"{f}.preference")
        (term,) = parse_node_selector_terms([pref], file=file, field=f"{f}.preference")
        preferred.append((w, term))
    pa = expect_mapping(aff.get("podAffinity"), file=file, field=f"{base}.podAffinity")
    paa = expect_mapping(aff.get("podAntiAffinity"), file=file, field=f"{base}.podAntiAffinity")

    def terms(block: Mapping[str, Any], kind: str, path: str) -> tuple[AffinityTerm, ...]:
        weighted = kind.startswith("preferred")
        return _affinity_terms(
            block.get(kind), weighted=weighted, namespace=namespace, labels=labels, file=file, field=f"{base}.{path}.{kind}"
        )

    owner_kind = ""
    for f, o in _mapping_items(meta.get("ownerReferences"), file=file, field=f"{pre}metadata.ownerReferences"):
        kind = expect_str(o.get("kind"), file=file, field=f"{f}.kind")
        if o.get("controller") or not owner_kind:
            owner_kind = kind
    node_selector = tuple(sorted(expect_str_map(spec.get("nodeSelector"), file=file, field=f"{pre}spec.nodeSelector").items()))
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
        scheduler_name=expect_str(spec.get("schedulerName"), file=file, field=f"{pre}spec.schedulerName") or DEFAULT_SCHEDULER_NAME,
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
        node_name=expect_str(spec.get("nodeName"), file=file, field=f"{pre}spec.nodeName"),
        uid=expect_str(meta.get("uid"), file=file, field=f"{pre}metadata.uid"),
        phase=expect_str(status.get("phase"), file=file, field=f"{pre}status.phase"),
        terminating=meta.get("deletionTimestamp") is not None,
        signature=signature,
        requests=requests,
        nonzero_cpu=nonzero.get(CPU, 0),
        nonzero_memory=nonzero.get(MEMORY, 0),
        **fields,  # type: ignore[arg-type]
    )


# --- files --------------------------------------------------------------------------------------


def read_text(path: str | Path) -> str:
    """The UTF-8 text of an input file, or one ConfigError naming the file
    (:func:`functions.errors.read_input_text`: missing, a directory, binary, not UTF-8)."""
    return read_input_text(path, error=ConfigError, what="a JSON or YAML text file")


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated in one mapping, as the strict decoding of
    ``sigs.k8s.io/yaml`` (which kube-scheduler uses for its configuration) and the API server do,
    instead of silently keeping the last value."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            dup = key in seen
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, f"unhashable key {kind_of(key)}", key_node.start_mark) from None
        if dup:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = key_node
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (PyYAML's own message spans several
    lines with a source excerpt)."""
    problem = getattr(err, "problem", None) or getattr(err, "context", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def parse_documents(text: str, *, file: str | Path, multi: bool = True) -> list[Any]:
    """The documents of a JSON or YAML text (empty documents dropped). JSON is tried first; a
    text that is neither is reported with the JSON error when it looks like JSON (starts with
    ``{`` or ``[``), else with the YAML error, on one line with its position. Duplicate keys and
    nesting too deep for the parsers are errors too."""
    try:
        return [json.loads(text, object_pairs_hook=_json_pairs)]
    except json.JSONDecodeError as err:
        json_err = f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
    except ValueError as err:  # a duplicate key
        raise ConfigError(f"not valid JSON: {err}", file=file) from None
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply", file=file) from None
    try:
        if multi:
            docs = list(yaml.load_all(text, Loader=_StrictLoader))  # noqa: S506 - a SafeLoader subclass
        else:
            docs = [yaml.load(text, Loader=_StrictLoader)]  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        if text.lstrip()[:1] in ("{", "["):
            raise ConfigError(json_err, file=file) from None
        raise ConfigError(f"not valid YAML: {_yaml_problem(err)}", file=file) from None
    except RecursionError:
        raise ConfigError("not valid YAML: nested too deeply", file=file) from None
    return [d for d in docs if d is not None]


def load_objects(path: str | Path) -> list[dict[str, Any]]:
    """The objects in a JSON or YAML file: a single object, a ``List`` (``kubectl get -o json``),
    a JSON array, or several YAML documents. A file with no document at all is an error (an
    empty cluster is an empty ``List``, which ``kubectl`` prints as such)."""
    p = Path(path)
    docs = parse_documents(read_text(p), file=p)
    if not docs:
        raise ConfigError("empty file: expected a Kubernetes object or a List of them", file=p)
    out: list[dict[str, Any]] = []

    def add(d: Any, where: str) -> None:
        if isinstance(d, list):
            for i, x in enumerate(d):
                add(x, f"{where}[{i}]")
        elif isinstance(d, dict) and "items" in d and str(d.get("kind", "List")).endswith("List"):
            if not isinstance(d["items"], list):
                raise ConfigError(f"must be a list, not {kind_of(d['items'])}", file=p, field=f"{where}items")
            for i, x in enumerate(d["items"]):
                add(x, f"{where}items[{i}]")
        elif isinstance(d, dict):
            out.append(d)
        else:
            raise ConfigError(f"expected a Kubernetes object or a List of them, not {kind_of(d)}", file=p, field=where or None)

    for d in docs:
        add(d, "")
    return out


def load_nodes(path: str | Path) -> list[Node]:
    """The Node objects of a file (other kinds are skipped); a name used twice is an error, as
    the API server would never hold two nodes of one name."""
    objs = load_objects(path)
    nodes = []
    seen: dict[str, int] = {}
    for i, o in enumerate(objs):
        if o.get("kind", "Node") != "Node":
            continue
        n = node_from_k8s(o, file=str(path), where=f"items[{i}]")
        if n.name in seen:
            raise ConfigError(f"node name {n.name!r} is used twice (items[{seen[n.name]}] and items[{i}])", file=path, field=f"items[{i}].metadata.name")
        seen[n.name] = i
        nodes.append(n)
    return nodes


def load_pods(path: str | Path) -> list[Pod]:
    objs = load_objects(path)
    return [pod_from_k8s(o, file=str(path), where=f"items[{i}]") for i, o in enumerate(objs) if o.get("kind", "Pod") == "Pod"]
