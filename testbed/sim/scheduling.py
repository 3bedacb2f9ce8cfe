"""The simulator's use of ``testbed.scheduler``: one Scheduler over the cluster's nodes, the
image-cache update after a pull (the kubelet reports a pulled image in ``status.images``, which
is what ImageLocality scores from then on), and the check that every function's pod fits on some
node of the empty cluster at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from functions.knative import revision_pod
from functions.spec import discover_specs
from testbed.errors import InfeasibleClusterError
from testbed.scheduler.framework import UNSCHEDULABLE_TAINT, Scheduler
from testbed.scheduler.objects import (
    CPU,
    MEMORY,
    PODS,
    Node,
    Pod,
    is_scalar_resource,
    node_from_k8s,
    normalized_image_name,
    pod_from_k8s,
)
from testbed.scheduler.selectors import terms_match, tolerated

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from testbed.cluster import ClusterSpec
    from testbed.scheduler.config import Profile


def sim_nodes(cluster: ClusterSpec, specs: Mapping[str, FunctionSpec]) -> list[Node]:
    """The spec's nodes rendered as ``v1/Node`` objects (cached images with their sizes) and parsed
    as the scheduler reads them."""
    sizes = {s.image: s.image_size_bytes for s in specs.values()}
    sizes.update({normalized_image_name(k): v for k, v in list(sizes.items())})
    return [node_from_k8s(n.to_k8s_node(sizes)) for n in cluster.nodes]


def make_scheduler(
    cluster: ClusterSpec,
    specs: Mapping[str, FunctionSpec],
    profile: Profile,
    *,
    kube_version: str,
    seed: int,
    nodes: Sequence[Node] | None = None,
) -> Scheduler:
    """A Scheduler over the spec's nodes (``nodes``, if already built by :func:`sim_nodes`)."""
    return Scheduler(list(nodes) if nodes is not None else sim_nodes(cluster, specs), profile,
                     kube_version=kube_version, seed=seed)


def add_node_image(sched: Any, node_index: int, image: str, size_bytes: int) -> None:
    """Record that node ``node_index`` now holds ``image`` (the scheduler refreshes ImageLocality)."""
    sched.add_node_image(node_index, image, int(size_bytes))


def report_node_image(sched: Any, node_index: int, image: str, size_bytes: int, max_images: int) -> None:
    """The node's ``status.images`` now lists ``image`` (:mod:`testbed.kubelet`: the kubelet's
    report, which lags the pull), and only the node's ``max_images`` largest (nodeStatusMaxImages)."""
    from testbed.kubelet import reported_images

    sched.add_node_image(node_index, image, int(size_bytes))
    held = sched.nodes[node_index].images
    if max_images == -1 or len(held) <= max_images:
        return
    for name in held.keys() - reported_images(dict(held), max_images).keys():
        sched.remove_node_image(node_index, name)


Report = tuple[float, int, str, int]
"""A pulled image the kubelet has not reported yet: (report time, node index, image, size)."""


def report_due(sched: Any, pending: list[Report], now: float, max_images: int) -> list[Report]:
    """Report to the scheduler every image whose kubelet report is due by ``now`` (in time order);
    the reports still pending."""
    if not pending:
        return pending
    due = [x for x in pending if x[0] <= now]
    if not due:
        return pending
    for _, idx, image, size in sorted(due):
        report_node_image(sched, idx, image, size, max_images)
    return [x for x in pending if x[0] > now]


# --- a pod that fits nowhere ----------------------------------------------------------------------


def _fit_ignored(resource: str, profile: Profile | None) -> bool:
    if profile is None:
        return False
    fit = profile.fit
    return resource in fit.ignored_resources or (
        is_scalar_resource(resource) and resource.split("/")[0] in fit.ignored_resource_groups
    )


def filter_reason(node: Node, pod: Pod, profile: Profile | None) -> str | None:
    """Why ``pod`` cannot run on the *empty* ``node``, in kube-scheduler's words, or None if it can.

    The filters run in kube-scheduler's default order and the first that fails is the node's
    reason, as ``RunFilterPlugins`` reports it (``pkg/scheduler/framework/runtime/framework.go``);
    the messages are the plugins' own (``nodeunschedulable``, ``nodename``, ``tainttoleration``,
    ``nodeaffinity``, ``noderesources/fit.go``). Only filters that cannot pass on an empty
    node are checked: pod-to-pod constraints (inter-pod affinity, topology spread) depend on the
    other pods and are the run's business.
    """
    filters = set(profile.filters) if profile is not None else None

    def on(name: str) -> bool:
        return filters is None or name in filters

    tol = pod.tolerations
    if on("NodeUnschedulable") and node.unschedulable and not tolerated(tol, UNSCHEDULABLE_TAINT, "", "NoSchedule"):
        return "node(s) were unschedulable"
    if on("NodeName") and pod.node_name and pod.node_name != node.name:
        return "node(s) didn't match the requested node name"
    if on("TaintToleration"):
        for t in node.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not tolerated(tol, t.key, t.value, t.effect):
                return f"node(s) had untolerated taint {{{t.key}: {t.value}}}"
    if on("NodeAffinity"):
        if any(node.labels.get(k) != v for k, v in pod.node_selector) or (
            pod.required_node_terms is not None and not terms_match(pod.required_node_terms, node.name, node.labels)
        ):
            return "node(s) didn't match Pod's node affinity/selector"
        added = profile.node_affinity.added_required if profile is not None else None
        if added is not None and not terms_match(added, node.name, node.labels):
            return "node(s) didn't match scheduler-enforced node affinity"
    if on("NodeResourcesFit"):
        if node.allocatable.get(PODS, 0) < 1:
            return "Too many pods"
        short = [
            f"Insufficient {r}"
            for r, v in sorted(pod.requests.items(), key=lambda kv: (kv[0] not in (CPU, MEMORY), kv[0]))
            if r != PODS and v > 0 and not _fit_ignored(r, profile) and node.allocatable.get(r, 0) < v
        ]
        if short:
            return ", ".join(short)
    return None


def _cpu_text(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _bytes_text(n: int) -> str:
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def feasible_nodes(cluster: ClusterSpec, functions: Sequence[str], profile: Profile | None = None) -> dict[str, list[str]]:
    """Per function of the suite, the nodes of the *empty* cluster its revision pod passes Filter
    on (:func:`filter_reason`; no pod-to-pod filter, which depends on the run)."""
    specs = discover_specs()
    chosen = {f: specs[f] for f in functions if f in specs}
    nodes = sim_nodes(cluster, chosen)
    out: dict[str, list[str]] = {}
    for name, spec in chosen.items():
        pod = pod_from_k8s(revision_pod(spec))
        out[name] = [n.name for n in nodes if filter_reason(n, pod, profile) is None]
    return out


def forced_placement_note(cluster: ClusterSpec, functions: Sequence[str]) -> str | None:
    """A sentence for the user when no score weight can change where any function's pods go:
    every function passes Filter on one node at most (a taint, a selector, capacity), so the
    scheduler has nothing to choose and tuning cannot improve anything. None otherwise."""
    feasible = feasible_nodes(cluster, functions)
    if not feasible or any(len(nodes) > 1 for nodes in feasible.values()):
        return None
    where = "; ".join(f"{f}: {', '.join(n) or 'none'}" for f, n in sorted(feasible.items()))
    return (f"on cluster {cluster.name!r} every function passes the Filter plugins on one node at most ({where}): "
            "no score weight can change a placement here, so tuning can find no improvement")


def check_feasible(
    cluster: ClusterSpec, nodes: Sequence[Node], pods: Mapping[str, Pod], profile: Profile | None
) -> None:
    """Raise :class:`InfeasibleClusterError` if some function's pod fits on no node even with the
    cluster empty: such a run would only queue requests until they time out, however long it is
    simulated, and no score weight can change that. The message is kube-scheduler's FitError
    (``0/N nodes are available: ...``, reasons counted and sorted as ``FitError.Error`` does)."""
    for name, pod in pods.items():
        if any(filter_reason(node, pod, profile) is None for node in nodes):
            continue  # usually the first node: the check costs one node per function
        reasons = [filter_reason(node, pod, profile) for node in nodes]
        counts = Counter(part for r in reasons if r is not None for part in r.split(", "))
        why = ", ".join(sorted(f"{c} {reason}" for reason, c in counts.items()))
        req = pod.requests
        shown = f"cpu {_cpu_text(int(req.get(CPU, 0)))}, memory {_bytes_text(int(req.get(MEMORY, 0)))}"
        raise InfeasibleClusterError(
            f"function {name} (pod requests {shown}, queue-proxy included) fits on no node of cluster "
            f"{cluster.name!r}: 0/{len(nodes)} nodes are available: {why}; every request to it would time out, "
            "so give the cluster a node that can hold it",
            file=cluster.path if cluster.path is not None else None,
        )
