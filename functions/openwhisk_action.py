"""A suite function as an OpenWhisk action: its limits and the pod the invoker creates for it.

The action is a blackbox action (``exec.kind: blackbox`` with the function's own image; its
runtime speaks the action protocol, :mod:`functions.openwhisk`). OpenWhisk's limits are the
action's ``memory`` in MB (the spec's memory limit, at least the chart's 128 MB minimum) and its
``concurrency`` (activations per container: the spec's containerConcurrency, 1 when the spec says 0
= unlimited, which OpenWhisk does not have).

The pod is what ``KubernetesContainerFactory`` creates through ``WhiskPodBuilder.buildPodSpec``
(apache/openwhisk core/invoker/.../kubernetes/WhiskPodBuilder.scala): one container
``user-action`` on port 8080 whose memory request and limit are both the action's memory and which
has no CPU request or limit (``cpu-scaling`` is off in openwhisk-deploy-kube) and no
``imagePullPolicy``, labels ``name``, ``user-action-pod``, ``invoker`` and ``release``
(``KubernetesContainerFactory.createContainer``; ``openwhisk/action`` and ``openwhisk/namespace``
are patched on after the pod runs, ``KubernetesContainer.initialize``, so no scheduling decision
sees them), and, with ``user-pod-node-affinity`` on (the chart's
default), a required node affinity on ``openwhisk-role In [invoker]``. The scheduler name comes
from the pod template the lab renders (``testbed/kube/render``), so the tuned scheduler places it.
"""

from __future__ import annotations

import re
from typing import Any

from functions.errors import InputError
from functions.spec import FunctionSpec

MIB = 1024 * 1024
MIN_ACTION_MEMORY_MB = 128
"""openwhisk-deploy-kube's ``whisk.limits.actions.memory.min``."""
ACTION_LOG_LIMIT_MB = 0
"""``limits.logs`` of every action. Upstream collects an activation's logs whenever the limit is not
0 (apache/openwhisk ``Invoker.scala`` at ef725a6, ``logsToBeCollected``): with the
KubernetesContainerFactory that is one pod-log GET to kube-apiserver per activation
(``KubernetesContainer.logs``), and ``ContainerProxy`` frees the controller's slot only after it
(``splitAckMessagesPendingLogCollection``). At a replay's hundreds of activations a second that
loads the API server the tuned scheduler needs and delays every slot's release; the chart's
``whisk.limits.actions.log.min`` is ``0m``, so 0 is accepted. The suite's handlers print nothing the
benchmark reads."""
INVOKER_ROLE = ("openwhisk-role", "invoker")
"""The node label the chart's ``user-pod-node-affinity`` requires (and the lab's invokers carry)."""


def action_memory_mb(spec: FunctionSpec) -> int:
    """The action's memory limit in MB: the spec's memory limit rounded up, at least 128."""
    return max(MIN_ACTION_MEMORY_MB, -(-int(spec.memory_limit_bytes) // MIB))


def action_concurrency(spec: FunctionSpec) -> int:
    """Activations one container runs at once (OpenWhisk has no unlimited: 0 becomes 1)."""
    return int(spec.container_concurrency) or 1


def check_action_image(spec: FunctionSpec) -> None:
    """One line naming the function when its image is ``:latest`` or untagged (pulled on every
    cold start by Kubernetes' default pull policy for such images, which the action pod keeps)."""
    ref = spec.image.split("@", 1)[0]
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else None
    if "@" not in spec.image and tag in (None, "latest"):
        raise InputError(f"function {spec.name}: image {spec.image} is {'untagged' if tag is None else ':latest'}: "
                         "an OpenWhisk action pod sets no imagePullPolicy, so Kubernetes would pull it on every "
                         "cold start; tag the image (e.g. :0.1.0) or pin it by digest", field="image")


def container_name(invoker: int, seq: int, namespace: str, action: str) -> str:
    """A pod name like the invoker's ``ContainerFactory.containerNamePrefix`` + a sequence
    (``wsk<invoker>-<n>-<namespace>-<action>``), sanitised to a DNS label."""
    raw = f"wsk{invoker}-{seq}-{namespace}-{action}".lower()
    return re.sub(r"[^a-z0-9-]", "-", raw)[:63].strip("-")


def action_pod(
    spec: FunctionSpec,
    *,
    name: str,
    invoker: str = "invoker0",
    scheduler_name: str | None = None,
    namespace: str = "openwhisk",
    node_affinity: bool = True,
    release: str = "owdev",
) -> dict[str, Any]:
    """The pending Pod (API JSON) for one container of ``spec``'s action, before it is bound.
    Refuses an image tagged ``:latest`` (or untagged): WhiskPodBuilder sets no
    ``imagePullPolicy``, so Kubernetes would pull such an image on every cold start
    (``Always``), while every backend here takes a node's cached image as cached."""
    check_action_image(spec)
    memory = f"{action_memory_mb(spec)}Mi"
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "containers": [
            {
                "name": "user-action",
                "image": spec.image,
                "ports": [{"name": "action", "containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"memory": memory}, "requests": {"memory": memory}},
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "securityContext": {"capabilities": {"drop": ["NET_RAW", "NET_ADMIN"]}},
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
    }
    if scheduler_name:
        pod_spec["schedulerName"] = scheduler_name
    if node_affinity:
        key, value = INVOKER_ROLE
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"name": name, "user-action-pod": "true", "invoker": invoker, "release": release},
        },
        "spec": pod_spec,
    }


__all__ = ["ACTION_LOG_LIMIT_MB", "INVOKER_ROLE", "MIN_ACTION_MEMORY_MB", "action_concurrency", "action_memory_mb", "action_pod",
           "check_action_image",
           "container_name"]
