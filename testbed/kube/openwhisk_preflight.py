"""What a user's machines must have before OpenWhisk goes on them (issue 45, item 6), checked on
the cluster's own Node objects before the chart is installed: one line per problem, naming the
node and the numbers.

- **The core node.** Every core component (controller JVM, Kafka, ZooKeeper, CouchDB, Redis,
  nginx, the API gateway) is required on the core node beside kube-apiserver, etcd and the
  scheduler under test, and the chart gives most of them no memory request: a core node with
  less than :data:`CORE_MIN_MIB` allocatable starves or OOM-kills the scheduler being measured.
- **The invokers' user memory.** Each invoker's container pool admits ``userMemory`` of action
  containers (``whisk.containerPool.userMemory``), but kube-scheduler admits action pods only by
  the invoker nodes' allocatable memory, and each node also runs its invoker's JVM (the chart's
  ``jvmHeapMB`` 512, no memory request: :data:`INVOKER_JVM_MIB` with its overhead). When the
  pools admit more than the nodes hold, action pods go Pending, are not Ready in 60 s and their
  activations fail: every run measures the deployment's overcommit, not the profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from functions.spec import memory_bytes
from testbed.kube.nodes import get_path as _get

MIB = 1024 * 1024
CORE_MIN_MIB = 8192
"""Allocatable memory the core node needs (issue 45's review: a 4 GB control plane OOMs)."""
INVOKER_JVM_MIB = 768
"""An invoker pod's memory on its node: ``jvmHeapMB`` 512 (openwhisk-deploy-kube values.yaml at
108f327) plus the JVM's own overhead; not requested, so the scheduler does not see it."""


def allocatable_mib(node: Any) -> int | None:
    """A Node's allocatable memory in MiB (None when it reports none)."""
    value = _get(node, "status", "allocatable", "memory")
    if value is None:
        return None
    return int(memory_bytes(str(value)) // MIB)


def preflight_problems(nodes: Iterable[Any], *, core_nodes: Sequence[str], invoker_nodes: Sequence[str],
                       user_memory_mib: int) -> list[str]:
    """Every problem of an OpenWhisk deployment on ``nodes`` (Node objects or their JSON), one
    line each, naming the node and the numbers; empty: it fits."""
    by_name = {str(_get(n, "metadata", "name")): n for n in nodes}
    out: list[str] = []
    for name in [*core_nodes, *invoker_nodes]:
        if name not in by_name:
            out.append(f"node {name}: not a node of the cluster (nodes: {', '.join(sorted(by_name)) or 'none'})")
    for name in core_nodes:
        if name in by_name:
            mib = allocatable_mib(by_name[name])
            if mib is not None and mib < CORE_MIN_MIB:
                out.append(f"node {name} (OpenWhisk core): {mib} MiB allocatable < {CORE_MIN_MIB} MiB: the controller, "
                           "Kafka, ZooKeeper, CouchDB, Redis and nginx share it with kube-apiserver, etcd and the "
                           "scheduler under test; use a larger control plane or set openwhisk_core_nodes to one")
    held: dict[str, int] = {}
    for name in invoker_nodes:
        mib = allocatable_mib(by_name[name]) if name in by_name else None
        if mib is not None:
            held[name] = mib - INVOKER_JVM_MIB
    if held:
        n, room = len(held), sum(held.values())
        if n * user_memory_mib > room:
            shown = ", ".join(f"{k} {v + INVOKER_JVM_MIB}" for k, v in held.items())
            out.append(f"invoker nodes: {n} x {user_memory_mib} MiB user memory = {n * user_memory_mib} MiB > {room} MiB "
                       f"they hold ({shown} MiB allocatable, less {INVOKER_JVM_MIB} MiB each for the invoker's JVM): "
                       f"action pods would go Pending and fail their activations; set openwhisk_user_memory to at "
                       f"most {max(room // n, 0)}m")
    return out


__all__ = ["CORE_MIN_MIB", "INVOKER_JVM_MIB", "allocatable_mib", "preflight_problems"]
