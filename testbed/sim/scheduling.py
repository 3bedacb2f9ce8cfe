"""The simulator's use of ``testbed.scheduler``: one Scheduler over the cluster's nodes, and the
image-cache update after a pull (the kubelet reports a pulled image in ``status.images``, which
is what ImageLocality scores from then on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from testbed.scheduler.framework import Scheduler
from testbed.scheduler.objects import node_from_k8s, normalized_image_name

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from testbed.cluster import ClusterSpec
    from testbed.scheduler.config import Profile


def make_scheduler(
    cluster: ClusterSpec, specs: Mapping[str, FunctionSpec], profile: Profile, *, kube_version: str, seed: int
) -> Scheduler:
    """A Scheduler over the spec's nodes rendered as ``v1/Node`` objects (cached images with sizes)."""
    sizes = {s.image: s.image_size_bytes for s in specs.values()}
    sizes.update({normalized_image_name(k): v for k, v in list(sizes.items())})
    nodes = [node_from_k8s(n.to_k8s_node(sizes)) for n in cluster.nodes]
    return Scheduler(nodes, profile, kube_version=kube_version, seed=seed)


def add_node_image(sched: Any, node_index: int, image: str, size_bytes: int) -> None:
    """Record that node ``node_index`` now holds ``image`` (the scheduler refreshes ImageLocality)."""
    sched.add_node_image(node_index, image, int(size_bytes))
