"""Node health: what must hold of every node before and after a run for the run to count.

Why: a node that goes NotReady, is cordoned, comes under memory, disk or PID pressure, or leaves
(or joins) the cluster changes the cluster the profile is scored on. The scheduler silently
drops such a node (the NodeUnschedulable and TaintToleration filters, the node lifecycle
controller's ``node.kubernetes.io/*`` taints), so the run would be a measurement of a different,
smaller cluster charged to the profile. The expected node set and each node's schedulability are
taken at the experiment's first look (:attr:`KubeBackend.node_baseline`); any change from it, a
node not Ready, or a pressure condition voids the run.

Conditions are the kubelet's (``k8s.io/api/core/v1`` NodeConditionType): Ready, and the pressure
conditions MemoryPressure, DiskPressure, PIDPressure, plus NetworkUnavailable (set by the CNI).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PRESSURE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def get_path(obj: Any, *path: str) -> Any:
    """Walk an API object given as a client model or a dict (watch events are models, tests use
    dicts); None as soon as a step is missing."""
    cur = obj
    for key in path:
        if cur is None:
            return None
        cur = cur.get(key) if isinstance(cur, dict) else getattr(cur, key, None)
    return cur


_get = get_path


def k8s_time(value: Any) -> float | None:
    """A Kubernetes timestamp (datetime from the client, or RFC 3339 text) as Unix seconds."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    import pandas as pd

    return float(pd.Timestamp(value).timestamp())


def schedulable(node: Any) -> bool:
    """A node function pods can land on: not cordoned, no NoSchedule/NoExecute taint."""
    spec = _get(node, "spec")
    if _get(spec, "unschedulable"):
        return False
    return not any(_get(t, "effect") in ("NoSchedule", "NoExecute") for t in _get(spec, "taints") or [])


@dataclass(frozen=True)
class NodeState:
    name: str
    ready: bool
    schedulable: bool
    pressure: tuple[str, ...]
    not_ready_why: str = ""


def node_state(node: Any) -> NodeState:
    """One node as the API reports it (a client model or a dict)."""
    name = str(_get(_get(node, "metadata"), "name"))
    conditions = {str(_get(c, "type")): c for c in _get(_get(node, "status"), "conditions") or []}
    ready = conditions.get("Ready")
    is_ready = _get(ready, "status") == "True"
    why = ""
    if not is_ready:
        status = _get(ready, "status") or "missing"
        detail = ": ".join(str(x) for x in (_get(ready, "reason"), _get(ready, "message")) if x)
        why = f"Ready is {status}" + (f" ({detail})" if detail else "")
    pressure = tuple(t for t in PRESSURE_CONDITIONS if _get(conditions.get(t), "status") == "True")
    return NodeState(name, is_ready, schedulable(node), pressure, why)


def health_problems(baseline: Mapping[str, bool], nodes: Iterable[NodeState]) -> list[tuple[str, str]]:
    """(node, why) for every way the cluster differs from ``baseline`` (node -> schedulable at the
    first look) or is unhealthy now; empty when the run may count."""
    now = {n.name: n for n in nodes}
    out: list[tuple[str, str]] = []
    for name in sorted(set(baseline) - set(now)):
        out.append((name, "left the cluster"))
    for name in sorted(set(now) - set(baseline)):
        out.append((name, "joined the cluster during the experiment"))
    for name in sorted(set(now) & set(baseline)):
        n = now[name]
        if not n.ready:
            out.append((name, f"is not Ready: {n.not_ready_why}"))
        for cond in n.pressure:
            out.append((name, f"reports {cond}"))
        if n.schedulable != baseline[name]:
            out.append((name, "was cordoned or tainted NoSchedule/NoExecute" if baseline[name]
                        else "became schedulable"))
    return out


def describe(problems: Iterable[tuple[str, str]]) -> str:
    return "; ".join(f"node {n} {why}" for n, why in problems)


__all__ = ["PRESSURE_CONDITIONS", "NodeState", "describe", "get_path", "health_problems", "node_state", "schedulable"]
