"""Compact builders of Node and Pod objects, in the spirit of upstream's ``pkg/scheduler/testing``
(``st.MakeNode()`` / ``st.MakePod()``), so upstream's test tables port line by line.

Each builder writes the Kubernetes JSON first and parses it with :func:`node_from_k8s` /
:func:`pod_from_k8s`, so everything built here goes through the same parser as real objects.
Note the upstream conventions these mirror: ``capacity={"cpu": "4000"}`` means 4000 *cores*, and
a pod built without ``containers`` has none (so no non-zero defaults apply).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from testbed.scheduler.objects import Node, Pod, node_from_k8s, pod_from_k8s


def node_obj(
    name: str,
    *,
    capacity: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    images: Mapping[str, int] | Sequence[tuple[Sequence[str], int]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A ``v1/Node``; ``images`` maps a name to its size, or lists (names, size) pairs."""
    imgs: list[dict[str, Any]] = []
    if isinstance(images, Mapping):
        imgs = [{"names": [n], "sizeBytes": int(s)} for n, s in images.items()]
    elif images:
        imgs = [{"names": list(ns), "sizeBytes": int(s)} for ns, s in images]
    cap = {str(k): str(v) for k, v in (capacity or {}).items()}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": unschedulable, "taints": [dict(t) for t in taints]},
        "status": {
            "capacity": cap,
            "allocatable": cap,
            "images": imgs,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def make_node(name: str, **kw: Any) -> Node:
    return node_from_k8s(node_obj(name, **kw))


def pod_obj(
    name: str = "p",
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    requests: Sequence[Mapping[str, Any]] = (),
    images: Sequence[str] = (),
    init_requests: Sequence[Mapping[str, Any]] = (),
    affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    node_selector: Mapping[str, str] | None = None,
    spread: Sequence[Mapping[str, Any]] = (),
    owner_kind: str = "",
    scheduler_name: str = "",
) -> dict[str, Any]:
    """A ``v1/Pod``: one container per ``requests`` entry (``{}`` for a container without
    requests); ``images`` adds containers with only an image."""
    containers: list[dict[str, Any]] = [
        {"name": f"c{i}", "image": "busybox", "resources": {"requests": {k: str(v) for k, v in r.items()}}} for i, r in enumerate(requests)
    ]
    containers += [{"name": f"i{i}", "image": img} for i, img in enumerate(images)]
    spec: dict[str, Any] = {"containers": containers}
    if init_requests:
        spec["initContainers"] = [
            {"name": f"init{i}", "image": "busybox", "resources": {"requests": {k: str(v) for k, v in r.items()}}}
            for i, r in enumerate(init_requests)
        ]
    if node_name:
        spec["nodeName"] = node_name
    if affinity:
        spec["affinity"] = dict(affinity)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if spread:
        spec["topologySpreadConstraints"] = [dict(c) for c in spread]
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "owner", "uid": "owner-uid", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def make_pod(name: str = "p", **kw: Any) -> Pod:
    return pod_from_k8s(pod_obj(name, **kw))


def weighted_term(weight: int, topology_key: str, selector: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``WeightedPodAffinityTerm``."""
    return {"weight": weight, "podAffinityTerm": {"topologyKey": topology_key, "labelSelector": dict(selector), **extra}}


def exists(key: str) -> dict[str, Any]:
    """``st.MakeLabelSelector().Exists(key)``."""
    return {"matchExpressions": [{"key": key, "operator": "Exists"}]}


def label_in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
