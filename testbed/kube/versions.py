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

from dataclasses import dataclass

KUBERNETES_VERSION = "1.36.0"
"""kubeadm's ``kubernetesVersion``, the kubelet/kubeadm/kubectl packages and the kube-scheduler image."""

KUBERNETES_MINOR = ".".join(KUBERNETES_VERSION.split(".")[:2])

KUBE_SCHEDULER_IMAGE = f"registry.k8s.io/kube-scheduler:v{KUBERNETES_VERSION}"
"""The official image; its binary is ``/usr/local/bin/kube-scheduler``."""

KNATIVE_SERVING_VERSION = "knative-v1.23.0"
NET_KOURIER_VERSION = "knative-v1.23.0"
FLANNEL_VERSION = "v0.28.9"
POD_SUBNET = "10.244.0.0/16"

CONTAINERD_VERSION = "2.3.4"
"""The newest containerd 2.x patch release at the pin (Kubernetes 1.36 needs containerd >= 2.0)."""
RUNC_VERSION = "1.4.3"
"""Newer than runc 1.3.3 / 1.4.0, the November 2025 releases with the container-escape fixes
(CVE-2025-31133, CVE-2025-52565, CVE-2025-52881)."""
CNI_PLUGINS_VERSION = "1.9.1"
CRICTL_VERSION = "1.36.0"
"""cri-tools follows the Kubernetes minor."""


@dataclass(frozen=True)
class Artefact:
    """One file the lab's roles download, pinned by version and SHA-256 (per architecture, or
    ``any``). The role defaults repeat the numbers and a test checks they agree; a download whose
    bytes differ fails the role instead of installing something else."""

    name: str
    version: str
    url: str
    """With ``{version}`` and ``{arch}`` (amd64, arm64) to fill in."""
    sha256: dict[str, str]


ARTEFACTS: tuple[Artefact, ...] = (
    # release checksums as published with each release (the *.sha256sum files), the same numbers
    # kubernetes-sigs/kubespray keeps in roles/kubespray_defaults/vars/main/checksums.yml
    Artefact("containerd", CONTAINERD_VERSION,
             "https://github.com/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz",
             {"amd64": "9d68969855fbf676cdb8ed758e420fb048d61f984f61de3e53eddfebe484d168",
              "arm64": "a985fbb7e18fc0362d31a055338f5d7b0e087a3e27f14c70d1c5965399a29f95"}),
    Artefact("runc", RUNC_VERSION, "https://github.com/opencontainers/runc/releases/download/v{version}/runc.{arch}",
             {"amd64": "f6ae8efc0fa40079e1475e97cbe9d1bd3f106a28d6af78a11d9f1bd565515e60",
              "arm64": "633301e2e32f8a5ad54031aab4901eb00308bec677dd15faa2751e8f9dab5ca4"}),
    Artefact("cni-plugins", CNI_PLUGINS_VERSION,
             "https://github.com/containernetworking/plugins/releases/download/v{version}/cni-plugins-linux-{arch}-v{version}.tgz",
             {"amd64": "b98f74a0f8522f0a83867178729c1aa70f2158f90c45a2ca8fa791db1c76b303",
              "arm64": "56171987d3947707c3563db2f4001bccaf50fd63468611b9f3cbecb1375ee7ec"}),
    Artefact("crictl", CRICTL_VERSION,
             "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{version}/crictl-v{version}-linux-{arch}.tar.gz",
             {"amd64": "83855e114566a8a8c44c548d515670f51de3a5e1da8b2effb59870e2f10c25a3",
              "arm64": "68328594ccf780a80ae2b092d9f6ce484eec7cf540c275242e8fd954bfd95332"}),
    # files of the projects' repositories at the release tag (git blobs: immutable per tag),
    # hashed from the tagged tree
    Artefact("containerd.service", CONTAINERD_VERSION,
             "https://raw.githubusercontent.com/containerd/containerd/v{version}/containerd.service",
             {"any": "1941362cbaa89dd591b99c32b050d82c583d3cd2e5fa63085d7017457ec5fca8"}),
    Artefact("kube-flannel.yml", FLANNEL_VERSION,
             "https://raw.githubusercontent.com/flannel-io/flannel/{version}/Documentation/kube-flannel.yml",
             {"any": "e875824be2f552b45711dbda91af81b17eb961d00025d914d9fef18fad8f09c0"}),
)
"""Every artefact the roles download, in one place (docs/lab.md "Pinned downloads" lists them).
The Kubernetes packages come from pkgs.k8s.io's apt repository (signed, pinned by version); the
Knative and Kourier manifests are release assets fetched at their pinned tags."""

KNATIVE_MANIFEST_SHA256: dict[str, str] = {}
"""SHA-256 of the Knative and Kourier release manifests by the file name the role keeps them under
(``knative-v1.23.0-serving-core.yaml``, ...); the knative_serving role's ``knative_serving_sha256``
repeats it. Empty: the digests must be read from the release assets themselves, which the machine
this was written on could not download. Until they are recorded here, the role pins each
manifest on its first download (the lab's ``manifests.lock.json``) and refuses any later download
that differs."""

KNATIVE_SERVICE_API = ("serving.knative.dev", "v1", "services")
"""(group, version, plural) of the Knative Service custom resource."""

__all__ = [
    "ARTEFACTS",
    "CNI_PLUGINS_VERSION",
    "CONTAINERD_VERSION",
    "CRICTL_VERSION",
    "FLANNEL_VERSION",
    "RUNC_VERSION",
    "Artefact",
    "KNATIVE_MANIFEST_SHA256",
    "KNATIVE_SERVICE_API",
    "KNATIVE_SERVING_VERSION",
    "KUBERNETES_MINOR",
    "KUBERNETES_VERSION",
    "KUBE_SCHEDULER_IMAGE",
    "NET_KOURIER_VERSION",
    "POD_SUBNET",
]
