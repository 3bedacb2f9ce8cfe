"""Cluster specs from elsewhere: a twin of a real cluster (``kubectl get nodes -o json``, optionally
``kubectl get pods -A -o json``) and the node mix of the Alibaba GPU-2023 trace.

The twin (``scoretune sim import-cluster``) keeps every node's allocatable cpu, memory and pod
count, labels, taints, ``spec.unschedulable`` and cached images (``status.images``, every name of
each image), one group per node with its exact name. Kubernetes does not know a node's speed or
image-pull bandwidth: they come from the node annotations ``scoretune.io/speed`` and
``scoretune.io/image-pull-bandwidth`` when present, else 1.0 and the spec default.

Running pods (``--pods``), decided here: pods bound to a node that are not terminal and are *not*
Knative revision pods (no ``serving.knative.dev/revision`` label) keep their requests on that node
in the real cluster, so their cpu, memory and pod count are subtracted from the node's allocatable
(what the real scheduler would see as free). Revision pods are left out: the simulator creates the
functions' pods itself. The description records how many pods were subtracted.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from functions.atomic import write_atomic
from testbed.cluster import (
    HOSTNAME_LABEL,
    MAX_PULL_BYTES_PER_S,
    ClusterSpec,
    NodeSpec,
    Taint,
    cluster_to_dict,
    parse_cluster,
    quantity,
    read_text,
)
from testbed.errors import ClusterSpecError

SPEED_ANNOTATION = "scoretune.io/speed"
BANDWIDTH_ANNOTATION = "scoretune.io/image-pull-bandwidth"
REVISION_LABEL = "serving.knative.dev/revision"
DEFAULT_BANDWIDTH = "50Mi"


# Where each field of the round-tripped spec (one group per node, in file order) comes from in
# the nodes file, so an error of the round trip points at the node that caused it.
_GROUP_FIELD_SOURCE = {
    "name": "metadata.name",
    "cpu": "status.allocatable.cpu",
    "memory": "status.allocatable.memory",
    "pods": "status.allocatable.pods",
    "speed": f"metadata.annotations.{SPEED_ANNOTATION}",
    "image_pull_bandwidth": f"metadata.annotations.{BANDWIDTH_ANNOTATION}",
    "images": "status.images",
    "labels": "metadata.labels",
    "taints": "spec.taints",
}


def _items(path: Path, kind: str) -> list[Any]:
    """The objects of ``kubectl get <kind>s -o json``: a ``<Kind>List`` or ``List`` (``items``),
    one ``<Kind>``, or a bare JSON list."""
    what = f"`kubectl get {kind.lower()}s -o json` output"
    text = read_text(path, what=what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ClusterSpecError(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})", file=path) from None
    except RecursionError:
        raise ClusterSpecError(f"not {what}: nested too deeply", file=path) from None
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise ClusterSpecError(f"expected a {kind}List ({what}), not a JSON {type(data).__name__}", file=path)
    got = data.get("kind")
    if got == kind:
        return [data]
    if got not in (None, f"{kind}List", "List"):
        raise ClusterSpecError(f"expected a {kind}List ({what}), got kind {got!r}", file=path, field="kind")
    items = data.get("items")
    if not isinstance(items, list):
        raise ClusterSpecError(f"expected a {kind}List ({what}) with a list of items", file=path, field="items")
    for i, obj in enumerate(items):
        if isinstance(obj, dict) and obj.get("kind") not in (None, kind):
            raise ClusterSpecError(f"expected a {kind}, got kind {obj.get('kind')!r}", file=path, field=f"items[{i}].kind")
    return items


def _annotations(obj: dict[str, Any], *, file: Path, where: str) -> dict[str, Any]:
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    if not isinstance(ann, dict):
        raise ClusterSpecError(f"must be a mapping, not a {type(ann).__name__}", file=file, field=f"{where}.metadata.annotations")
    return ann


def _speed(ann: dict[str, Any], *, file: Path, field: str) -> float:
    """The node's speed annotation: a finite number in (0, 100], as the cluster spec allows."""
    raw = ann.get(SPEED_ANNOTATION, 1.0)
    try:
        speed = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        speed = math.nan
    if not (math.isfinite(speed) and 0.0 < speed <= 100.0):
        raise ClusterSpecError(f"{raw!r} is not a speed: a number in (0, 100], 1.0 = the reference node", file=file, field=field)
    return speed


def import_cluster(nodes_json: str | Path, pods_json: str | Path | None = None, *, name: str | None = None) -> ClusterSpec:
    """The twin cluster spec of ``kubectl get nodes -o json`` (minus running pods' requests)."""
    from testbed.scheduler.objects import CPU, MEMORY, PODS, node_from_k8s, pod_from_k8s

    npath = Path(nodes_json)
    raw_nodes = _items(npath, "Node")
    if not raw_nodes:
        raise ClusterSpecError("no nodes in the file", file=npath, field="items")
    if name is not None and not name.strip():
        raise ClusterSpecError("the cluster name must not be empty", field="--name")
    used: dict[str, Counter[str]] = {}
    subtracted = 0
    if pods_json is not None:
        ppath = Path(pods_json)
        for i, obj in enumerate(_items(ppath, "Pod")):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if REVISION_LABEL in labels:
                continue
            pod = pod_from_k8s(obj, file=str(ppath), where=f"items[{i}]")
            if not pod.node_name or pod.terminal:
                continue
            c = used.setdefault(pod.node_name, Counter())
            c[CPU] += pod.requests.get(CPU, 0)
            c[MEMORY] += pod.requests.get(MEMORY, 0)
            c[PODS] += 1
            subtracted += 1
    nodes: list[NodeSpec] = []
    for i, obj in enumerate(raw_nodes):
        n = node_from_k8s(obj, file=str(npath), where=f"items[{i}]")
        ann = _annotations(obj, file=npath, where=f"items[{i}]")
        where = f"items[{i}].metadata.annotations"
        speed = _speed(ann, file=npath, field=f"{where}.{SPEED_ANNOTATION}")
        bw = float(quantity(ann.get(BANDWIDTH_ANNOTATION, DEFAULT_BANDWIDTH), what="image pull bandwidth", file=npath,
                            field=f"{where}.{BANDWIDTH_ANNOTATION}", upper=MAX_PULL_BYTES_PER_S,
                            upper_text="1Pi per second"))
        for res in (CPU, MEMORY):
            if n.allocatable.get(res, 0) <= 0:
                raise ClusterSpecError(f"node {n.name!r} has no allocatable {res} (status.allocatable or status.capacity)",
                                       file=npath, field=f"items[{i}].status.allocatable.{res}")
        u = used.get(n.name, Counter())
        cpu = n.allocatable.get(CPU, 0) - u[CPU]
        mem = n.allocatable.get(MEMORY, 0) - u[MEMORY]
        pods = n.allocatable.get(PODS, 110) - u[PODS]
        if cpu <= 0 or mem <= 0 or pods <= 0:
            raise ClusterSpecError(
                f"node {n.name!r} has nothing left after its running pods (cpu {cpu}m, memory {mem}, pods {pods})",
                file=npath, field=f"items[{i}].status.allocatable",
            )
        labels = {k: v for k, v in n.labels.items() if k != HOSTNAME_LABEL}
        nodes.append(
            NodeSpec(
                name=n.name,
                group=n.name,
                cpu_milli=int(cpu),
                memory_bytes=int(mem),
                pods=int(pods),
                speed=speed,
                images=tuple(sorted(n.images)),
                labels=labels,
                taints=tuple(Taint(t.key, t.value, t.effect) for t in n.taints),
                image_pull_bytes_per_s=bw,
                unschedulable=n.unschedulable,
            )
        )
    desc = f"imported from {npath.name}: {len(nodes)} nodes"
    if pods_json is not None:
        desc += f"; requests of {subtracted} running non-Knative pods subtracted from allocatable"
    spec = ClusterSpec(name=name or npath.stem, description=desc, nodes=tuple(nodes))
    # round-trip through the YAML form so what is written is exactly what loads; the spec has one
    # group per node in file order, so an error there is the node's: say which, in its own terms
    try:
        return parse_cluster(cluster_to_dict(spec), file=f"<import of {npath}>")
    except ClusterSpecError as err:
        parts = (err.field or "").split(".")
        if len(parts) >= 3 and parts[0] == "groups" and parts[1].isdigit():
            source = _GROUP_FIELD_SOURCE.get(parts[2], parts[2])
            raise ClusterSpecError(f"node {nodes[int(parts[1])].name!r}: {err.detail}", file=npath,
                                   field=f"items[{parts[1]}].{source}") from None
        raise ClusterSpecError(err.detail, file=npath, field=err.field) from None


def write_cluster_yaml(spec: ClusterSpec, out: str | Path) -> Path:
    """Write ``spec`` as YAML atomically: a temporary file beside ``out`` replaces it only once
    complete, so a failed write never leaves a spec that looks good (nor a stray temporary)."""

    import yaml

    path = Path(out)
    if path.is_dir():
        raise ClusterSpecError("is a directory; give the path of the cluster spec YAML to write", file=path, field="--out")
    text = f"# {spec.description}\n" + yaml.safe_dump(cluster_to_dict(spec), sort_keys=False)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ClusterSpecError(f"cannot write: {parent} is a file, not a directory", file=path, field="--out")
            break
    try:
        write_atomic(path, text)
    except OSError as err:
        raise ClusterSpecError(f"cannot write: {err.strerror or err}", file=path, field="--out") from None
    return path


def alibaba_node_mix(
    node_list_csv: str | Path, *, nodes: int = 32, scale: float = 0.125, name: str = "alibaba-gpu2023-32"
) -> dict[str, Any]:
    """A cluster spec (YAML mapping) with the CPU/memory mix of the Alibaba GPU-2023 node list
    (``openb_node_list_all_node.csv``): node shapes in proportion to their counts (largest
    remainder, at least one node per shape kept), capacities scaled by ``scale`` so the cluster is
    simulation-sized. GPUs are ignored (the suite has no GPU function); speed is 1.0 throughout."""
    path = Path(node_list_csv)
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as err:
        raise ClusterSpecError(f"cannot read: {err.strerror}", file=path) from None
    shapes: Counter[tuple[int, int]] = Counter()
    for i, r in enumerate(rows):
        try:
            shapes[(int(r["cpu_milli"]), int(r["memory_mib"]))] += 1
        except (KeyError, ValueError):
            raise ClusterSpecError("needs integer cpu_milli and memory_mib", file=path, row=i + 2) from None
    total = sum(shapes.values())
    ordered = sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0]))
    quota = [(shape, nodes * count / total) for shape, count in ordered]
    alloc = {shape: math.floor(q) for shape, q in quota}
    rest = nodes - sum(alloc.values())
    for shape, _q in sorted(quota, key=lambda sq: (-(sq[1] - math.floor(sq[1])), sq[0]))[:rest]:
        alloc[shape] += 1
    groups = []
    for (cpu, mem), _ in ordered:
        count = alloc[(cpu, mem)]
        if count == 0:
            continue
        groups.append(
            {
                "name": f"c{cpu // 1000}-m{mem // 1024}g",
                "count": count,
                "cpu": f"{max(1000, round(cpu * scale / 500) * 500)}m",
                "memory": f"{max(1024, round(mem * scale / 512) * 512)}Mi",
                "speed": 1.0,
                "labels": {"scoretune.io/shape": f"{cpu // 1000}c-{mem // 1024}g"},
            }
        )
    return {
        "name": name,
        "description": f"CPU/memory mix of the Alibaba GPU-2023 node list ({total} nodes), {nodes} nodes at scale {scale}",
        "defaults": {"pods": 110, "image_pull_bandwidth": DEFAULT_BANDWIDTH},
        "groups": groups,
    }
