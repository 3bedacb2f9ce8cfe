"""The OpenWhisk deployment the simulator models: what the lab's role sets, with upstream's
defaults where it sets nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from functions.errors import InputError
from testbed.openwhisk.pool import IDLE_CONTAINER_S


@dataclass(frozen=True)
class OpenWhiskConfig:
    """Knobs of the OpenWhisk model, each with where its default comes from."""

    invokers: int = 0
    """Invoker replicas; 0: one per node action pods may run on (the role's replicaCount is the
    number of invoker nodes)."""
    user_memory_mb: int = 4096
    """``whisk.containerPool.userMemory`` (the role's ``openwhisk_user_memory``, 4096m)."""
    managed_fraction: float = 0.9
    """``whisk.loadbalancer.managed-fraction`` (controller reference.conf, 90 %)."""
    blackbox_fraction: float = 1.0
    """``whisk.loadbalancer.blackboxFraction``: the role sets 100 % so the suite's blackbox actions
    may use every invoker (the chart's 10 % sends them all to one invoker of up to nine)."""
    controllers: int = 1
    """Controller replicas (the chart's one): each gets ``user_memory / controllers`` per invoker."""
    namespace: str = "guest"
    """The namespace the actions live in and are invoked from (the guest key's)."""
    idle_timeout_s: float = IDLE_CONTAINER_S
    """ContainerProxy's ``pause-grace`` (10 s) plus ``idle-container`` (10 minutes)."""
    readiness_poll_s: float = 1.0
    """KubernetesClient polls a new pod until it is Ready once a second."""
    pod_start_timeout_s: float = 60.0
    """``whisk.kubernetes.timeouts.run`` (1 minute): a pod not Ready by then fails its activations."""
    dispatch_s: float = 0.005
    """Controller -> Kafka -> invoker for one activation."""
    ack_s: float = 0.005
    """Invoker -> Kafka -> controller -> client for one result (the active ack)."""
    pod_create_delay_s: float = 0.1
    """Invoker -> API server -> scheduler queue for a new action pod."""
    health_test_s: float = 0.05
    """How long an unhealthy invoker's health-test action takes to come back (a trivial nodejs
    action, ``function main(params) { return params; }``, on a warm container: dispatch, run,
    ack). Its container's pod is not modelled (testbed.openwhisk.health)."""

    def seen_ready(self, created_s: float, up_s: float) -> float:
        """When the invoker sees a pod created at ``created_s`` and up at ``up_s`` Ready: at its
        next readiness poll after ``up_s`` (polls every ``readiness_poll_s`` from the creation)."""
        poll = self.readiness_poll_s
        if poll <= 0:
            return up_s
        return created_s + math.ceil(max(0.0, up_s - created_s) / poll) * poll

    def __post_init__(self) -> None:
        if self.invokers < 0 or self.user_memory_mb < 128 or self.controllers < 1:
            raise InputError(
                f"an OpenWhisk deployment needs invokers >= 0, user memory >= 128 MB and controllers >= 1, "
                f"not {self.invokers}, {self.user_memory_mb} and {self.controllers}", field="openwhisk")
        if not self.health_test_s > 0:
            raise InputError(f"health_test_s must be > 0, not {self.health_test_s}", field="openwhisk")
        for name in ("managed_fraction", "blackbox_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InputError(f"{name} must be within [0, 1], not {getattr(self, name)}", field="openwhisk")


__all__ = ["OpenWhiskConfig"]
