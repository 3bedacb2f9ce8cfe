"""The versions the real lab is pinned to, in one place.

The Ansible role defaults repeat these numbers (Ansible cannot import Python); a test checks that
they agree, so bumping a version here without the roles (or the other way round) fails ``make test``.

Why these:

- Kubernetes 1.36: the simulator emulates kube-scheduler 1.36 by default (the NodeResourcesBalancedAllocation
  formula changed in 1.36, kubernetes/kubernetes#135573), so weights tuned on the lab mean the same
  thing as weights tuned on ``sim``. ``kubernetes-validate`` ships offline schemas for 1.36.
- Knative Serving and net-kourier knative-v1.23.0: the newest release tags of both repositories
  (knative/serving, knative-extensions/net-kourier) when this was written; Serving 1.23 is built
  against k8s.io/api v0.35 and its minimum-version check accepts newer API servers.
- Flannel v0.28.9 (the newest flannel-io/flannel tag seen): a small CNI with no operator; its manifest
  expects the pod CIDR 10.244.0.0/16.
"""

from __future__ import annotations

KUBERNETES_VERSION = "1.36.0"
"""kubeadm's ``kubernetesVersion``, the kubelet/kubeadm/kubectl packages and the kube-scheduler image."""

KUBERNETES_MINOR = ".".join(KUBERNETES_VERSION.split(".")[:2])

KUBE_SCHEDULER_IMAGE = f"registry.k8s.io/kube-scheduler:v{KUBERNETES_VERSION}"
"""The official image; its binary is ``/usr/local/bin/kube-scheduler``."""

KNATIVE_SERVING_VERSION = "knative-v1.23.0"
NET_KOURIER_VERSION = "knative-v1.23.0"
FLANNEL_VERSION = "v0.28.9"
POD_SUBNET = "10.244.0.0/16"

KNATIVE_SERVICE_API = ("serving.knative.dev", "v1", "services")
"""(group, version, plural) of the Knative Service custom resource."""

__all__ = [
    "FLANNEL_VERSION",
    "KNATIVE_SERVICE_API",
    "KNATIVE_SERVING_VERSION",
    "KUBERNETES_MINOR",
    "KUBERNETES_VERSION",
    "KUBE_SCHEDULER_IMAGE",
    "NET_KOURIER_VERSION",
    "POD_SUBNET",
]
