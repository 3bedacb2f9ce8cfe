"""Placing instances with testbed/scheduler, the same way the simulator does (it reuses the
simulator's ``make_scheduler`` and ``add_node_image``).

Every new instance is a Knative revision pod (``functions.knative.revision_pod``: user container
plus queue-proxy, the revision labels and the preferred hostname anti-affinity), scheduled with the
lab's current profile on the lab's nodes as ``NodeSpec.to_k8s_node`` renders them. When a node
pulls an image its ``status.images`` changes, which is what ImageLocality reads, so the scheduler's
view of that node is refreshed (the kubelet reports pulled images in its node status).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from testbed.cluster import ClusterSpec

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)


def profile_from_config_dict(data: dict[str, Any], scheduler_name: str | None = None) -> Any:
    """The profile named ``scheduler_name`` (else the last one) of a KubeSchedulerConfiguration
    mapping: how a profile crosses from the backend to the controller process. A profile under a
    second scheduler name travels beside the untouched default profile (``config_for_profile``)."""
    from testbed.scheduler.config import parse_config

    profiles = parse_config(data, file="<profile>").profiles
    for prof in profiles:
        if prof.scheduler_name == scheduler_name:
            return prof
    return profiles[-1]


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

    def __init__(
        self,
        cluster: ClusterSpec,
        specs: dict[str, FunctionSpec],
        profile: Profile,
        *,
        seed: int = 0,
        kube_version: str = "1.36",
    ) -> None:
        self.cluster = cluster
        self.specs = specs
        self.kube_version = kube_version
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
        """A scheduler over the spec's nodes, with the simulator's own construction, then the
        current image caches, bindings and readiness applied on top."""
        from testbed.sim.scheduling import add_node_image, make_scheduler

        self.scheduler = make_scheduler(self.cluster, self.specs, self.profile, kube_version=self.kube_version, seed=self.seed)
        for i, n in enumerate(self.cluster.nodes):
            for image in sorted(self.images[n.name] - set(n.images)):
                add_node_image(self.scheduler, i, image, self.image_sizes.get(image, 0))
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
        from testbed.sim.scheduling import make_scheduler

        empty = make_scheduler(self.cluster, self.specs, self.profile, kube_version=self.kube_version, seed=self.seed)
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
        """The node pulled ``image``: ImageLocality sees it from now on (as in the simulator)."""
        from testbed.sim.scheduling import add_node_image

        if image not in self.images[node]:
            self.images[node].add(image)
            add_node_image(self.scheduler, self.names.index(node), image, self.image_sizes.get(image, 0))

    def set_ready(self, node: str, ready: bool) -> None:
        self.ready[node] = ready
        self.scheduler.set_node_ready(self.names.index(node), ready)


def action_pod_object(spec: FunctionSpec, name: str, scheduler_name: str | None, *, node_affinity: bool,
                      invoker: str = "invoker0") -> Any:
    """The scheduler's Pod for one OpenWhisk container of ``spec`` (``functions.openwhisk_action``)."""
    from functions.openwhisk_action import action_pod
    from testbed.scheduler.objects import pod_from_k8s

    return pod_from_k8s(action_pod(spec, name=name, invoker=invoker, scheduler_name=scheduler_name,
                                   node_affinity=node_affinity))


def workload_problems(cluster: ClusterSpec, specs: dict[str, FunctionSpec], functions: list[str], profile: Profile,
                      pod: Callable[[FunctionSpec, str, str | None, ClusterSpec], tuple[dict[str, Any], str]]) -> list[str]:
    """Why a workload over ``functions`` cannot run on ``cluster`` (empty if it can): a function
    that is not in the suite, or whose pod -- the one its platform creates, ``pod`` of
    :mod:`testbed.platforms` (a revision pod, or on OpenWhisk an action pod) -- fits on no node
    even when the cluster is empty."""
    from testbed.scheduler.objects import pod_from_k8s

    problems = []
    placer: Placer | None = None
    for name in functions:
        spec = specs.get(name)
        if spec is None:
            problems.append(f"unknown function {name!r}; known: {', '.join(sorted(specs))}")
            continue
        placer = placer or Placer(cluster, specs, profile)
        manifest, what = pod(spec, f"{name}-probe", profile.scheduler_name, cluster)
        if not placer.fits_somewhere(pod_from_k8s(manifest)):
            problems.append(f"function {name!r} ({what}) fits on no node of cluster {cluster.name!r}")
    return problems

