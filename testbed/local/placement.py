"""Placing instances with testbed/scheduler, the same way the simulator does.

Every new instance is a Knative revision pod (``functions.knative.revision_pod``: user container
plus queue-proxy, the revision labels and the preferred hostname anti-affinity), scheduled with the
lab's current profile on the lab's nodes as ``NodeSpec.to_k8s_node`` renders them. When a node
pulls an image its ``status.images`` changes, which is what ImageLocality reads, so the scheduler's
view of that node is refreshed (the kubelet reports pulled images in its node status).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from testbed.cluster import ClusterSpec

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)


def profile_from_config_dict(data: dict[str, Any]) -> Any:
    """The first profile of a KubeSchedulerConfiguration mapping (how profiles cross processes)."""
    from testbed.scheduler.config import parse_config

    return parse_config(data, file="<profile>").profiles[0]


def profile_to_config_dict(profile: Any) -> dict[str, Any]:
    from testbed.scheduler.config import config_for_profile, config_to_dict

    return config_to_dict(config_for_profile(profile))


def revision_pod_object(spec: FunctionSpec, name: str, scheduler_name: str | None) -> Any:
    """The scheduler's Pod for one instance of ``spec``."""
    from functions.knative import revision_pod
    from testbed.scheduler.objects import pod_from_k8s

    return pod_from_k8s(revision_pod(spec, scheduler_name=scheduler_name, name=name))


class Placer:
    """The scheduler over the lab's nodes, with the binding of every live instance."""

    def __init__(self, cluster: ClusterSpec, specs: dict[str, FunctionSpec], profile: Profile, *, seed: int = 0) -> None:
        self.cluster = cluster
        self.image_sizes = {s.image: s.image_size_bytes for s in specs.values()}
        self.profile = profile
        self.seed = seed
        self.names = [n.name for n in cluster.nodes]
        self.images: dict[str, set[str]] = {}
        self.ready: dict[str, bool] = {}
        self.bound: dict[str, tuple[Any, int]] = {}
        self.reset()

    def reset(self) -> None:
        """Images as in the spec, every node ready, nothing bound, a fresh scheduler (same seed)."""
        self.images = {n.name: set(n.images) for n in self.cluster.nodes}
        self.ready = {n.name: True for n in self.cluster.nodes}
        self.bound = {}
        self._build()

    def _build(self) -> None:
        from testbed.scheduler.framework import Scheduler
        from testbed.scheduler.objects import node_from_k8s

        nodes = []
        for n in self.cluster.nodes:
            view = dataclasses.replace(n, images=tuple(sorted(self.images[n.name])))
            nodes.append(node_from_k8s(view.to_k8s_node(self.image_sizes)))
        self.scheduler = Scheduler(nodes, self.profile, seed=self.seed)
        for pod, idx in self.bound.values():
            self.scheduler.bind(pod, idx)
        for i, name in enumerate(self.names):
            if not self.ready[name]:
                self.scheduler.set_node_ready(i, False)

    def set_profile(self, profile: Profile) -> None:
        self.profile = profile
        self.scheduler.set_profile(profile)

    def fits_somewhere(self, pod: Any) -> bool:
        """Whether ``pod`` could be placed on the *empty* cluster (a spec that can never fit)."""
        from testbed.scheduler.framework import Scheduler
        from testbed.scheduler.objects import node_from_k8s

        empty = Scheduler(
            [node_from_k8s(n.to_k8s_node(self.image_sizes)) for n in self.cluster.nodes], self.profile, seed=self.seed
        )
        return empty.schedule(pod) is not None

    def place(self, pod_name: str, pod: Any) -> str | None:
        """Schedule and bind; the node name, or None while unschedulable."""
        idx = self.scheduler.schedule(pod)
        if idx is None:
            return None
        self.scheduler.bind(pod, idx)
        self.bound[pod_name] = (pod, idx)
        return self.names[idx]

    def release(self, pod_name: str) -> None:
        entry = self.bound.pop(pod_name, None)
        if entry is not None:
            self.scheduler.unbind(*entry)

    def add_image(self, node: str, image: str) -> None:
        if image not in self.images[node]:
            self.images[node].add(image)
            self._build()

    def set_ready(self, node: str, ready: bool) -> None:
        self.ready[node] = ready
        self.scheduler.set_node_ready(self.names.index(node), ready)


def workload_problems(cluster: ClusterSpec, specs: dict[str, FunctionSpec], functions: list[str], profile: Profile) -> list[str]:
    """Why a workload over ``functions`` cannot run on ``cluster`` (empty if it can): a function
    that is not in the suite, or whose pod fits on no node even when the cluster is empty."""
    problems = []
    placer: Placer | None = None
    for name in functions:
        spec = specs.get(name)
        if spec is None:
            problems.append(f"unknown function {name!r}; known: {', '.join(sorted(specs))}")
            continue
        placer = placer or Placer(cluster, specs, profile)
        pod = revision_pod_object(spec, f"{name}-probe", profile.scheduler_name)
        if not placer.fits_somewhere(pod):
            problems.append(
                f"function {name!r} (cpu request {spec.cpu_request_milli}m + queue-proxy, memory request "
                f"{spec.memory_request_bytes} bytes) fits on no node of cluster {cluster.name!r}"
            )
    return problems

