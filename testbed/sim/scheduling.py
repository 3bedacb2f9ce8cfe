"""The simulator's use of ``testbed.scheduler``: one Scheduler over the cluster's nodes, and the
image-cache update after a pull (the kubelet reports a pulled image in ``status.images``, which
is what ImageLocality scores from then on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from testbed.scheduler import scoring
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
    """Record that node ``node_index`` now holds ``image`` and refresh ImageLocality's per-template
    sums (``imagelocality/image_locality.go``: the spread factor ``k / total`` changes for every node
    holding the image). Uses the scheduler's public ``add_node_image`` when it has one."""
    public = getattr(type(sched), "add_node_image", None)
    if public is not None:
        public(sched, node_index, image, size_bytes)
        return
    name = normalized_image_name(image)
    node = sched._nodes[node_index]
    if name in node.images:
        return
    sched._nodes[node_index] = dataclasses.replace(node, images={**node.images, name: int(size_bytes)})
    sched._image_nodes[name] = sched._image_nodes.get(name, 0) + 1
    total = sched._n
    for t in sched._template_list:
        pod = t.pod
        containers = pod.init_containers + pod.containers
        if not any(normalized_image_name(c.image) == name for c in containers):
            continue
        sums = np.zeros(total, dtype=np.int64)
        for c in containers:
            cname = normalized_image_name(c.image)
            k = sched._image_nodes.get(cname, 0)
            if not k:
                continue
            for i, nd in enumerate(sched._nodes):
                s = nd.images.get(cname)
                if s is not None:
                    sums[i] += scoring.scaled_image_score(s, k, total)
        t.image_sum = sums
