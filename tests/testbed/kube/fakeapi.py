"""A fake Kubernetes API server at the HTTP level, for the ``kube`` backend's tests.

A stand-in for a real cluster (none is available where these tests run): a threaded HTTP server
on 127.0.0.1 that speaks the REST shapes the official ``kubernetes`` client uses for the calls the
backend makes — ConfigMaps (create, list, GET, PATCH, PUT, DELETE), Deployments (GET, PATCH), pods (list and chunked ``watch=true``
streams), Leases, nodes, Knative Services through the custom-objects paths — and records every
request, so a test can check the exact sequence of calls. It also plays the controllers the
backend waits on, deterministically:

- the Deployment controller: a PATCH bumps ``metadata.generation``; the next ``observe_delay``
  reads still show the old ``observedGeneration``; then the status shows the new ReplicaSet as
  ``outcome(config_text)`` says: ``"ready"`` (rolled out, new pod ready and holding the lease),
  ``"crash"`` (new pod in CrashLoopBackOff, old pod still serving: ``maxUnavailable: 0``) or
  ``"pending"`` (new pod never ready);
- the Knative autoscaler at the end of a run: function pods disappear after ``drain_after`` lists;
- Knative's ingress: a POST whose Host is a route creates that function's pod on the first request
  (ADDED -> scheduled -> Ready watch events) and answers with ``X-Scoretune-Node``.

The API server's own rules it enforces:

- an immutable ConfigMap (``immutable: true``) refuses any update of ``data``/``binaryData`` or
  of ``immutable`` itself with 422 Invalid, "field is immutable when `immutable` is set", as
  kubernetes/kubernetes ``pkg/apis/core/validation/validation.go`` ``ValidateConfigMapUpdate``
  does (metadata may still change); creating a ConfigMap whose name exists is 409 AlreadyExists;
- a Deployment PATCH is a strategic merge: lists of volumes and containers merge by ``name``;
  the pods of a rollout get the template's volumes, and a pod whose ConfigMap does not exist
  never starts (the kubelet's FailedMount).

And it models the faults a real lab has (each driven by a test through the backend):

- leader election: after a rollout the new pod is Ready but the lease moves to it only after
  ``lease_delay`` reads (held by the old pod, or by nobody with ``lease_released``: the old
  scheduler released it on shutdown, ``holderIdentity: ""``); :meth:`release_lease`;
- the scheduler pod restarting (:meth:`restart_scheduler`);
- function pods that never start (``pod_state[fn]``: ``"pending"`` unschedulable,
  ``"image-pull"`` ImagePullBackOff, ``"crash"`` CrashLoopBackOff, ``"terminating"`` stuck with a
  deletionTimestamp);
- a Knative Revision that is not Ready (:meth:`fail_revision`);
- ``on_first_request``: called once at the first ingress request, to inject a fault mid-run;
- Knative's tag-to-digest resolution (``resolve_digests``, on by default as in Knative): each
  Revision's ``status.containerStatuses[].imageDigest`` is ``repo@sha256:...`` and its pods run
  that reference, so the kubelet caches the digest and no tag;
- the containerd image store of each node (``cri``, fakecri.ImageStore: IDs with tags and
  digests; reported in ``status.images``): a function pod that starts on a node pulls its image
  there, and the image-state pods reset() creates (POST, GET, log, DELETE) run the real
  render.IMAGE_STATE_SCRIPT in ``sh`` with fakecri as their ``crictl``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fakecri import ImageStore, resolved
from kubernetes import client

from testbed.kube.backend import KubeBackend, KubeTimeouts

NOW = "2026-12-02T10:00:00Z"


def DATA_PLANE(nodes: tuple[str, ...]) -> list[tuple[str, str, dict[str, str], str]]:  # noqa: N802 - a table
    """The data-plane pods of a lab as ansible/ deploys it: Knative Serving and Kourier on the first
    node, CoreDNS, and kube-proxy and Flannel on every node (namespace, name, labels, node)."""
    first = nodes[0]
    pods = [("knative-serving", f"{app}-6d9b8f7c4-x2x7k", {"app": app}, first)
            for app in ("activator", "autoscaler", "controller", "webhook", "net-kourier-controller")]
    pods += [("kourier-system", "3scale-kourier-gateway-5b8d7f-qq2lm", {"app": "3scale-kourier-gateway"}, first),
             ("kube-system", "coredns-7db6d8ff4d-9kz2p", {"k8s-app": "kube-dns"}, first)]
    for node in nodes:
        pods += [("kube-system", f"kube-proxy-{node}", {"k8s-app": "kube-proxy"}, node),
                 ("kube-flannel", f"kube-flannel-ds-{node}", {"app": "flannel"}, node)]
    return pods


MERGE_BY_NAME = frozenset({"volumes", "containers", "volumeMounts", "env"})
"""Lists a strategic merge patch merges item by item on ``name`` (their ``patchMergeKey`` in
k8s.io/api core/v1 types.go); other lists are replaced, as in a JSON merge patch."""


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Strategic merge patch for the shapes patched here: JSON merge patch (RFC 7386) for maps,
    lists in ``MERGE_BY_NAME`` merged by ``name``."""
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        elif k in MERGE_BY_NAME and isinstance(v, list) and isinstance(out.get(k), list):
            items = out[k]
            for item in v:
                at = next((i for i, old in enumerate(items) if old.get("name") == item.get("name")), None)
                if at is None:
                    items.append(copy.deepcopy(item))
                else:
                    items[at] = merge(items[at], item)
        else:
            out[k] = copy.deepcopy(v)
    return out


def configmap_update_errors(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """kubernetes/kubernetes pkg/apis/core/validation/validation.go ``ValidateConfigMapUpdate``:
    once ``immutable`` is true, neither it nor ``data`` nor ``binaryData`` may change."""
    if old.get("immutable") is not True:
        return []
    errors = []
    if new.get("immutable") is not True:
        errors.append("immutable: Forbidden: field is immutable when `immutable` is set")
    for key in ("data", "binaryData"):
        if (new.get(key) or None) != (old.get(key) or None):
            errors.append(f"{key}: Forbidden: field is immutable when `immutable` is set")
    return errors


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """The label-selector forms the backends send: ``k=v``, ``k!=v`` and ``k in (a,b)``, comma-joined."""
    if not selector:
        return True
    for term in re.split(r",(?![^()]*\))", selector):
        term = term.strip()
        m = re.fullmatch(r"(\S+) in \(([^)]*)\)", term)
        if m:
            if labels.get(m.group(1)) not in m.group(2).split(","):
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif labels.get(term) is None:
            return False
    return True


class FakeKube:
    def __init__(self, *, scheduler_name: str = "scoretune-scheduler", namespace: str = "kube-system",
                 functions: tuple[str, ...] = ("fn-a", "fn-b"), fn_namespace: str = "default",
                 domain: str = "example.com", nodes: tuple[str, ...] = ("node-1", "node-2")) -> None:
        self.scheduler_name = scheduler_name
        self.ns = namespace
        self.fn_ns = fn_namespace
        self.functions = functions
        self.domain = domain
        self.nodes = nodes
        self.node_memory: dict[str, str] = {}
        """A node's allocatable memory when not the default 8Gi."""
        self.calls: list[str] = []
        self.ingress_requests: dict[str, int] = {}
        self.bodies: list[tuple[str, Any]] = []
        self.lock = threading.Condition()
        self.rv = 1000
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.configmaps: dict[str, dict[str, Any]] = {}
        self.created = 0
        self.deployments: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.lease_holder: str | None = None
        self.outcome: Callable[[str], str] = lambda text: "ready"
        self.observe_delay = 1
        self.drain_after = 0
        self.function_lists = 0
        self.fail_paths: dict[str, tuple[int, str]] = {}
        self.watch_errors: list[tuple[int, str, str]] = []
        """ERROR events (code, reason, message) the next watch requests answer with, one each."""
        self.node_of: Callable[[str], str] = lambda fn: nodes[sorted(functions).index(fn) % len(nodes)]
        self.lease_delay = 0
        self.lease_released = False
        self._lease_wait = 0
        self._lease_target: str | None = None
        self.pod_state: dict[str, str] = {}
        self.on_first_request: Callable[[], None] | None = None
        self.resolve_digests = True
        """Knative's tag-to-digest resolution (off: the registry is in registries-skipping-tag-resolving)."""
        self.revisions: dict[str, dict[str, Any]] = {fn: self._revision(fn) for fn in functions}
        self.pull_s: dict[str, str] = {n: "1.234s" for n in nodes}
        """Per node, the Go duration the kubelet's Pulled event reports for a pull there."""
        self.kube_events: list[dict[str, Any]] = []
        """Event objects the kubelets recorded (``Pulled`` of each container of each function pod)."""
        self.cri: dict[str, ImageStore] = {n: ImageStore() for n in nodes}
        """Each node's containerd image store (reported in status.images, changed by pods and image pods)."""
        for store in self.cri.values():
            store.pull(OLD_IMAGE)
        self.unpullable: set[str] = set()
        self.node_conditions: dict[str, dict[str, dict[str, str]]] = {}
        """Per node, conditions that replace the healthy ones (see :meth:`set_condition`)."""
        self.cordoned: set[str] = set()
        self.pod_logs: dict[str, str] = {}
        self.service_accounts: set[tuple[str, str]] = {("scoretune-system", "scoretune-driver")}
        self.knative_config: dict[str, dict[str, str]] = {
            "config-autoscaler": {"stable-window": "60s", "target-burst-capacity": "211"},
            "config-deployment": {"registries-skipping-tag-resolving": "kind.local,ko.local,dev.local"},
            "config-features": {"kubernetes.podspec-schedulername": "enabled"},
            "config-network": {"ingress-class": "kourier.ingress.networking.knative.dev"}}
        """knative-serving's ConfigMaps (name -> data); a test changes one to model an operator's edit."""
        self.image_pods: list[dict[str, Any]] = []
        """Every image-state pod created, as posted."""
        self.extra_routes: list[tuple[str, Callable[..., None]]] = []
        """(path pattern, handler) tried before the built-in routes (fakewhisk.py adds OpenWhisk's)."""
        self._pending_reads = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        for fn in functions:
            self.services[fn] = self._service(fn)
        for ns, name, labels, node in DATA_PLANE(nodes):
            self.add_infra_pod(ns, name, labels, node)

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing = True
        with self.lock:
            self.lock.notify_all()
        self._server.shutdown()
        self._server.server_close()

    _closing = False

    # --- objects ------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _service(self, fn: str) -> dict[str, Any]:
        return {
            "apiVersion": "serving.knative.dev/v1",
            "kind": "Service",
            "metadata": {"name": fn, "namespace": self.fn_ns, "labels": {"scoretune.io/function": fn}},
            "spec": {"template": {"spec": {"schedulerName": self.scheduler_name,
                                           "containers": [{"image": image_of(fn)}]}}},
            "status": {
                "url": f"http://{fn}.{self.fn_ns}.{self.domain}",
                "latestReadyRevisionName": f"{fn}-00001",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def _revision(self, fn: str) -> dict[str, Any]:
        return {"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
                "metadata": {"name": f"{fn}-00001", "namespace": self.fn_ns,
                             "labels": {"serving.knative.dev/service": fn}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "containerStatuses": [{"name": "user-container", "imageDigest": resolved(image_of(fn))}]}}

    def pod_image(self, fn: str) -> str:
        """The reference ``fn``'s pods run: the Revision's digest, or the Service's tag."""
        return resolved(image_of(fn)) if self.resolve_digests else image_of(fn)

    def held(self, node: str) -> set[str]:
        """Every image reference ``node`` holds (tags and digests)."""
        with self.lock:
            return self.cri[node].references()

    def fail_revision(self, fn: str, reason: str = "ContainerMissing",
                      message: str = "Unable to fetch image: failed to resolve image to digest") -> None:
        with self.lock:
            self.revisions[fn]["status"]["conditions"] = [
                {"type": "Ready", "status": "False", "reason": reason, "message": message}]

    def set_condition(self, node: str, kind: str, status: str, reason: str = "", message: str = "") -> None:
        """The kubelet (or the node lifecycle controller) reports ``kind`` as ``status`` on ``node``:
        ``("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")`` is a
        dead node, ``("DiskPressure", "True", ...)`` a full disk."""
        with self.lock:
            cond = {"type": kind, "status": status}
            cond.update({k: v for k, v in (("reason", reason), ("message", message)) if v})
            self.node_conditions.setdefault(node, {})[kind] = cond

    def heal(self, node: str) -> None:
        with self.lock:
            self.node_conditions.pop(node, None)
            self.cordoned.discard(node)

    def restart_scheduler(self, message: str = "leaderelection lost") -> None:
        """The running scheduler container exits and the kubelet restarts it."""
        with self.lock:
            for pod in self.pods.values():
                if pod["metadata"]["labels"].get("app.kubernetes.io/name") == self.scheduler_name:
                    for cs in pod["status"].get("containerStatuses", []):
                        cs["restartCount"] += 1
                        cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}

    def add_infra_pod(self, ns: str, name: str, labels: dict[str, str], node: str) -> None:
        """A running, Ready data-plane pod (Knative, Kourier, CoreDNS, kube-proxy, Flannel)."""
        with self.lock:
            self.pods[name] = {
                "metadata": {"name": name, "namespace": ns, "labels": dict(labels), "creationTimestamp": NOW,
                             "resourceVersion": self._next_rv()},
                "spec": {"nodeName": node, "containers": [{"name": name.split("-")[0], "image": "infra"}]},
                "status": {"phase": "Running",
                           "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}],
                           "containerStatuses": [{"name": name.split("-")[0], "image": "infra", "imageID": "",
                                                  "ready": True, "restartCount": 0,
                                                  "state": {"running": {"startedAt": NOW}}}]},
            }

    def restart_infra(self, name: str, reason: str = "OOMKilled", code: int = 137) -> None:
        """A data-plane container exits (an OOMKill by default) and the kubelet restarts it."""
        with self.lock:
            for cs in self.pods[name]["status"]["containerStatuses"]:
                cs["restartCount"] += 1
                cs["lastState"] = {"terminated": {"exitCode": code, "reason": reason}}

    def move_infra(self, name: str, node: str) -> str:
        """The pod is replaced by one on ``node`` (a rescheduled controller, an HPA scale)."""
        with self.lock:
            old = self.pods.pop(name)
        new = f"{name.rsplit('-', 1)[0]}-moved"
        self.add_infra_pod(old["metadata"]["namespace"], new, old["metadata"]["labels"], node)
        return new

    def unready_infra(self, name: str) -> None:
        with self.lock:
            self.pods[name]["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]

    def release_lease(self) -> None:
        """The holder gave the lease up (ReleaseOnCancel): ``holderIdentity`` is empty."""
        with self.lock:
            self.lease_holder = ""

    def install_scheduler(self, objects: list[dict[str, Any]]) -> None:
        """Seed the store with rendered objects (ConfigMap, Deployment) as Ansible would have."""
        for obj in objects:
            name = obj["metadata"]["name"]
            if obj["kind"] == "ConfigMap":
                self._store_configmap(obj)
            elif obj["kind"] == "Deployment":
                dep = copy.deepcopy(obj)
                dep["metadata"]["generation"] = 1
                digest = dep["spec"]["template"]["metadata"]["annotations"]["scoretune.dev/config-hash"]
                self.deployments[name] = dep
                self._settle(dep, digest, "ready")

    def _store_configmap(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A new ConfigMap as the API server stores it: resourceVersion, uid, creation time (one
        second after the previous one, so "newest" is well defined)."""
        cm = copy.deepcopy(obj)
        self.created += 1
        cm["metadata"].update(resourceVersion=self._next_rv(), uid=f"uid-{self.rv}",
                              creationTimestamp=f"2026-12-02T10:{self.created // 60:02d}:{self.created % 60:02d}Z")
        self.configmaps[cm["metadata"]["name"]] = cm
        return cm

    def _scheduler_pod(self, digest: str, *, state: str, volumes: list[dict[str, Any]]) -> dict[str, Any]:
        name = f"{self.scheduler_name}-{digest[:6]}-abcde"
        ready = "True" if state == "ready" else "False"
        status: dict[str, Any] = {"phase": "Running" if state != "pending" else "Pending",
                                  "conditions": [{"type": "Ready", "status": ready}]}
        if state == "ready":
            status["containerStatuses"] = [{
                "name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler", "imageID": "", "ready": True,
                "restartCount": 0, "state": {"running": {"startedAt": NOW}}}]
        if state == "crash":
            status["containerStatuses"] = [{
                "name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler", "imageID": "", "ready": False,
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "message": "couldn't create scheduler: invalid configuration"}},
            }]
        return {
            "metadata": {"name": name, "namespace": self.ns,
                         "labels": {"app.kubernetes.io/name": self.scheduler_name},
                         "annotations": {"scoretune.dev/config-hash": digest}},
            "spec": {"containers": [{"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler"}],
                     "volumes": copy.deepcopy(volumes)},
            "status": status,
        }

    def _settle(self, dep: dict[str, Any], digest: str, outcome: str) -> None:
        """The Deployment controller's end state for ``digest``."""
        gen = dep["metadata"]["generation"]
        old = {p["metadata"]["name"]: p for p in self.pods.values()
               if p["metadata"]["labels"].get("app.kubernetes.io/name") == self.scheduler_name}
        for name in old:
            self.pods.pop(name)
        volumes = dep["spec"]["template"]["spec"].get("volumes") or []
        if outcome == "ready":
            pod = self._scheduler_pod(digest, state="ready", volumes=volumes)
            self.pods[pod["metadata"]["name"]] = pod
            holder = pod["metadata"]["name"] + "_0f6e3b1c-uuid"
            if self.lease_delay and self.lease_holder is not None:
                self._lease_target, self._lease_wait = holder, self.lease_delay
                if self.lease_released:
                    self.lease_holder = ""
            else:
                self.lease_holder = holder
            dep["status"] = {"observedGeneration": gen, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                             "availableReplicas": 1,
                             "conditions": [{"type": "Available", "status": "True"},
                                            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}
        else:
            serving = [p for p in old.values() if p["status"]["conditions"][0]["status"] == "True"]
            for p in serving:
                self.pods[p["metadata"]["name"]] = p
            pod = self._scheduler_pod(digest, state=outcome, volumes=volumes)
            self.pods[pod["metadata"]["name"]] = pod
            dep["status"] = {"observedGeneration": gen, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1,
                             "availableReplicas": 1, "unavailableReplicas": 1,
                             "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}

    def add_function_pod(self, fn: str, *, ready: bool = True) -> str:
        """A pod of ``fn``'s revision: ADDED (pending), then scheduled, then Ready, as watch events."""
        with self.lock:
            name = f"{fn}-00001-deployment-{len(self.pods):05d}"
            pod = {
                "metadata": {"name": name, "namespace": self.fn_ns, "creationTimestamp": NOW,
                             "labels": {"serving.knative.dev/service": fn, "serving.knative.dev/revision": f"{fn}-00001"}},
                "spec": {"schedulerName": self.scheduler_name, "containers": [{"name": "user-container", "image": "x"}]},
                "status": {"phase": "Pending", "conditions": []},
            }
            self._emit("ADDED", pod)
            state = self.pod_state.get(fn)
            if state == "pending":
                pod = copy.deepcopy(pod)
                pod["status"]["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "no scheduler answered: scoretune-scheduler is not running"}]
                self._emit("MODIFIED", pod)
                self.pods[name] = pod
                return name
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = self.node_of(fn)
            self._kubelet_pull(name, self.node_of(fn), self.pod_image(fn))
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": NOW}]
            self._emit("MODIFIED", pod)
            if state in ("image-pull", "crash"):
                pod = copy.deepcopy(pod)
                reason, message = (("ImagePullBackOff", 'Back-off pulling image "x"') if state == "image-pull"
                                   else ("CrashLoopBackOff", "back-off 20s restarting failed container"))
                pod["status"]["containerStatuses"] = [{
                    "name": "user-container", "image": "x", "imageID": "", "ready": False,
                    "restartCount": 0 if state == "image-pull" else 2,
                    "state": {"waiting": {"reason": reason, "message": message}}}]
                self._emit("MODIFIED", pod)
                self.pods[name] = pod
                return name
            if ready:
                pod = copy.deepcopy(pod)
                pod["status"]["phase"] = "Running"
                pod["status"]["conditions"].append({"type": "Ready", "status": "True",
                                                    "lastTransitionTime": "2026-12-02T10:00:03Z"})
                pod["status"]["containerStatuses"] = [{
                    "name": "user-container", "image": "x", "imageID": "", "ready": True, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-12-02T10:00:02Z"}}}]
                self._emit("MODIFIED", pod)
            if state == "oom":  # the user container is OOMKilled once and runs again
                pod = copy.deepcopy(pod)
                cs = pod["status"]["containerStatuses"][0]
                cs["restartCount"] = 1
                cs["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
                self._emit("MODIFIED", pod)
            if state in ("evicted", "outofcpu"):  # phase Failed: the eviction manager, the kubelet's admission
                pod = copy.deepcopy(pod)
                pod["status"]["phase"] = "Failed"
                pod["status"]["reason"], pod["status"]["message"] = (
                    ("Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi.")
                    if state == "evicted" else
                    ("OutOfcpu", "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: "
                                 "3500, capacity: 4000"))
                self._emit("MODIFIED", pod)
            if state == "terminating":
                pod = copy.deepcopy(pod)
                pod["metadata"]["deletionTimestamp"] = NOW
                pod["metadata"]["deletionGracePeriodSeconds"] = 0
                self._emit("MODIFIED", pod)
            self.pods[name] = pod
            return name

    def _kubelet_pull(self, pod: str, node: str, image: str) -> None:
        """The kubelet's image pull for a new pod's containers, with the Events it records
        (``image_manager.go`` ``EnsureImageExists``): the user container's image pulled unless the
        node has it, queue-proxy's always present (the data plane pulled it long ago)."""
        store = self.cri.setdefault(node, ImageStore())
        present = store.find(image) is not None
        store.pull(image)
        took = self.pull_s.get(node, "1.234s")
        user = (f'Container image "{image}" already present on machine' if present else
                f'Successfully pulled image "{image}" in {took} ({took} including waiting). Image size: 58720256 bytes.')
        for container, message in (("user-container", user),
                                   ("queue-proxy", 'Container image "gcr.io/knative-releases/queue@sha256:0d1e" '
                                                   "already present on machine")):
            self.kube_events.append({
                "metadata": {"name": f"{pod}.{len(self.kube_events):x}", "namespace": self.fn_ns,
                             "creationTimestamp": NOW},
                "involvedObject": {"kind": "Pod", "namespace": self.fn_ns, "name": pod,
                                   "fieldPath": f"spec.containers{{{container}}}"},
                "reason": "Pulled", "message": message, "type": "Normal", "count": 1,
                "source": {"component": "kubelet", "host": node},
                "firstTimestamp": NOW, "lastTimestamp": NOW, "reportingComponent": "kubelet"})

    def _emit(self, kind: str, pod: dict[str, Any]) -> None:
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self.events.append((self.rv, kind, copy.deepcopy(pod)))
        self.lock.notify_all()

    def _function_pods(self, selector: str | None) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if p["metadata"]["namespace"] == self.fn_ns
                and "serving.knative.dev/service" in p["metadata"]["labels"]
                and selector_matches(selector, p["metadata"]["labels"])]

    # --- HTTP ---------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                return json.loads(raw) if raw else None

            def _send(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                                  "reason": reason, "code": code})

            def do_GET(self) -> None:
                fake._dispatch(self, "GET")

            def do_PATCH(self) -> None:
                fake._dispatch(self, "PATCH")

            def do_POST(self) -> None:
                fake._dispatch(self, "POST")

            def do_PUT(self) -> None:
                fake._dispatch(self, "PUT")

            def do_DELETE(self) -> None:
                fake._dispatch(self, "DELETE")

        return Handler

    def _dispatch(self, h: Any, method: str) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)  # the API server matches the decoded path (a service proxy's "name:port")
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        host = (h.headers.get("Host") or "").split(":")[0]
        if host.endswith(self.domain):
            return self._ingress(h, host)
        watch = query.get("watch") in ("true", "True", "1")
        self.calls.append(f"{method} {path}" + (" watch" if watch else ""))
        body = h._body() if method in ("PATCH", "POST", "PUT", "DELETE") else None
        if body is not None:
            self.bodies.append((f"{method} {path}", body, h.headers.get("Content-Type")))
        key = next((k for k in (f"{method} {path}", path) if k in self.fail_paths), None)
        if key is not None:
            code, msg = self.fail_paths[key]
            return h._status(code, "InternalError" if code >= 500 else "Forbidden", msg)
        ns_re = r"/namespaces/([^/]+)"
        routes = [
            (rf"/api/v1{ns_re}/configmaps", self._configmaps),
            (rf"/api/v1{ns_re}/configmaps/([^/]+)", self._configmap),
            (rf"/apis/apps/v1{ns_re}/deployments/([^/]+)", self._deployment),
            (rf"/api/v1{ns_re}/pods", self._pods),
            (rf"/api/v1{ns_re}/events", self._events),
            (rf"/api/v1{ns_re}/pods/([^/]+)/log", self._pod_log),
            (rf"/api/v1{ns_re}/pods/([^/]+)", self._pod),
            (rf"/apis/coordination.k8s.io/v1{ns_re}/leases/([^/]+)", self._lease),
            (rf"/apis/serving.knative.dev/v1{ns_re}/services(?:/([^/]+))?", self._ksvc),
            (rf"/apis/serving.knative.dev/v1{ns_re}/revisions", self._revisions),
            (rf"/apis/serving.knative.dev/v1{ns_re}/revisions/([^/]+)", self._revision_get),
            (rf"/api/v1{ns_re}/serviceaccounts/([^/]+)/token", self._token),
            (r"/api/v1/nodes", self._nodes),
            (r"/api/v1/pods", self._all_pods),
        ]
        for pattern, fn in [*self.extra_routes, *routes]:
            m = re.fullmatch(pattern, path)
            if m:
                return fn(h, method, *m.groups(), body=body, query=query)
        h._status(404, "NotFound", f"the server could not find the requested resource {path}")

    def _configmaps(self, h: Any, method: str, ns: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            if method == "POST":
                name = body["metadata"]["name"]
                if ns != self.ns:
                    return h._status(404, "NotFound", f'namespaces "{ns}" not found')
                if name in self.configmaps:
                    return h._status(409, "AlreadyExists", f'configmaps "{name}" already exists')
                return h._send(201, self._store_configmap(body | {"metadata": {**body["metadata"], "namespace": ns}}))
            items = [cm for cm in self.configmaps.values() if ns == self.ns
                     and selector_matches(query.get("labelSelector"), cm["metadata"].get("labels") or {})]
            h._send(200, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                          "items": copy.deepcopy(items)})

    def _configmap(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            if ns == "knative-serving":  # Knative's own ConfigMaps, read by every run
                if name not in self.knative_config or method != "GET":
                    return h._status(404, "NotFound", f'configmaps "{name}" not found')
                return h._send(200, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": ns, "resourceVersion": str(self.rv)},
                                     "data": dict(self.knative_config[name])})
            cm = self.configmaps.get(name)
            if cm is None or ns != self.ns:
                return h._status(404, "NotFound", f'configmaps "{name}" not found')
            if method in ("PATCH", "PUT"):
                new = merge(cm, body) if method == "PATCH" else copy.deepcopy(body)
                errors = configmap_update_errors(new, cm)
                if errors:
                    return h._status(422, "Invalid", f'ConfigMap "{name}" is invalid: [{", ".join(errors)}]'
                                     if len(errors) > 1 else f'ConfigMap "{name}" is invalid: {errors[0]}')
                new["metadata"] = {**cm["metadata"], **new.get("metadata", {}), "resourceVersion": self._next_rv()}
                self.configmaps[name] = cm = new
            elif method == "DELETE":
                self.configmaps.pop(name)
                return h._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                                     "details": {"name": name, "kind": "configmaps"}})
            h._send(200, cm)

    def _deployment(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            dep = self.deployments.get(name)
            if dep is None or ns != self.ns:
                return h._status(404, "NotFound", f'deployments.apps "{name}" not found')
            if method == "PATCH":
                before = json.dumps(dep["spec"], sort_keys=True)
                dep = merge(dep, body)
                if json.dumps(dep["spec"], sort_keys=True) != before:
                    dep["metadata"]["generation"] += 1
                    self._pending_reads = self.observe_delay
                    digest = dep["spec"]["template"]["metadata"]["annotations"]["scoretune.dev/config-hash"]
                    mounted = next((v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"]
                                    if v["name"] == "config-volume"), None)
                    cm = self.configmaps.get(mounted or "")
                    # no such ConfigMap: the kubelet's FailedMount, the pod never starts
                    self._target = (digest, self.outcome(cm["data"]["config.yaml"]) if cm else "pending")
                self.deployments[name] = dep
                return h._send(200, dep)
            if self._pending_reads > 0:
                self._pending_reads -= 1
                if self._pending_reads == 0:
                    self._settle(dep, *self._target)
                    stale = {**dep["status"], "observedGeneration": dep["metadata"]["generation"] - 1}
                    return h._send(200, {**dep, "status": stale})
            h._send(200, dep)

    def _lease(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            if self._lease_target is not None:
                if self._lease_wait > 0:
                    self._lease_wait -= 1
                else:
                    self.lease_holder, self._lease_target = self._lease_target, None
        if self.lease_holder is None:
            return h._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        h._send(200, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": name, "namespace": ns},
                      "spec": {"holderIdentity": self.lease_holder, "leaseDurationSeconds": 15}})

    def _token(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        """TokenRequest (POST .../serviceaccounts/NAME/token): a bound token for an account that exists."""
        if (ns, name) not in self.service_accounts:
            return h._status(404, "NotFound", f'serviceaccounts "{name}" not found')
        seconds = int((body.get("spec") or {}).get("expirationSeconds") or 3600)
        h._send(201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": name},
                      "spec": body.get("spec") or {},
                      "status": {"token": f"bound-token-{ns}-{name}-{seconds}", "expirationTimestamp": NOW}})

    def _nodes(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        info = {k: "x" for k in ("architecture", "bootID", "containerRuntimeVersion", "kernelVersion",
                                 "kubeProxyVersion", "machineID", "operatingSystem", "osImage", "systemUUID")}
        with self.lock:
            nodes = list(self.nodes)
            conditions = {n: [{"type": "Ready", "status": "True", "reason": "KubeletReady"},
                              *[{"type": t, "status": "False"} for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]]
                          for n in nodes}
            for n, overrides in self.node_conditions.items():
                if n in conditions:
                    conditions[n] = [c for c in conditions[n] if c["type"] not in overrides] + list(overrides.values())
        items = [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                  "spec": {"unschedulable": True} if n in self.cordoned else {},
                  "status": {"allocatable": {"cpu": "4", "memory": self.node_memory.get(n, "8Gi"), "pods": "110"},
                             "conditions": conditions[n],
                             "images": [{"names": sorted((*i["tags"], *i["digests"])), "sizeBytes": 139460608}
                                        for i in self.cri[n].images],
                             "nodeInfo": {**info, "kubeletVersion": "v1.36.0"}}}
                 for n in nodes]
        h._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                      "items": items})

    def _all_pods(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            h._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                          "items": list(self.pods.values())})

    def _ksvc(self, h: Any, method: str, ns: str, name: str | None, *, body: Any, query: dict[str, str]) -> None:
        if name is None:
            items = [s for s in self.services.values() if ns == self.fn_ns]
            return h._send(200, {"apiVersion": "serving.knative.dev/v1", "kind": "ServiceList",
                                 "metadata": {}, "items": items})
        svc = self.services.get(name)
        if svc is None or ns != self.fn_ns:
            return h._status(404, "NotFound", f'services.serving.knative.dev "{name}" not found')
        h._send(200, svc)

    def _revisions(self, h: Any, method: str, ns: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            items = [copy.deepcopy(r) for r in self.revisions.values() if ns == self.fn_ns
                     and selector_matches(query.get("labelSelector"), r["metadata"]["labels"])]
        h._send(200, {"apiVersion": "serving.knative.dev/v1", "kind": "RevisionList", "metadata": {}, "items": items})

    def _revision_get(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            rev = next((copy.deepcopy(r) for r in self.revisions.values() if r["metadata"]["name"] == name), None)
        if rev is None or ns != self.fn_ns:
            return h._status(404, "NotFound", f'revisions.serving.knative.dev "{name}" not found')
        if not self.resolve_digests:
            rev["status"].pop("containerStatuses", None)
        h._send(200, rev)

    def _run_image_pod(self, pod: dict[str, Any]) -> None:
        """The kubelet for an image-state pod: the pod's own script, in ``sh``, with fakecri as
        ``crictl`` on this node's store; its output is the pod's log."""
        from testbed.kube.render import IMAGE_STATE_SCRIPT

        node = pod["spec"]["nodeName"]
        container = pod["spec"]["containers"][0]
        script = container["command"][-1]
        assert script == IMAGE_STATE_SCRIPT
        store = self.cri.setdefault(node, ImageStore())
        store.unpullable = set(self.unpullable)
        with tempfile.TemporaryDirectory(prefix="fake-kubelet-") as tmp:
            crictl = Path(tmp) / "crictl"
            crictl.write_text(f"#!/bin/sh\nexec {sys.executable} -S {FAKECRI} \"$@\"\n")
            crictl.chmod(0o755)
            state = Path(tmp) / "state.json"
            state.write_text(store.to_json())
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": tmp, "FAKE_CRI_STATE": str(state),
                   **{e["name"]: e.get("value", "") for e in container["env"]}}
            done = subprocess.run(["sh", "-c", script.replace("/scoretune/crictl", str(crictl))], env=env,
                                  capture_output=True, text=True, timeout=60)
            self.cri[node] = ImageStore.from_json(state.read_text())
        self.pod_logs[pod["metadata"]["name"]] = done.stdout + done.stderr
        pod["status"] = {"phase": "Succeeded" if done.returncode == 0 else "Failed", "conditions": []}

    def _pod(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None or pod["metadata"]["namespace"] != ns:
                return h._status(404, "NotFound", f'pods "{name}" not found')
            if method == "DELETE":
                self.pods.pop(name)
            h._send(200, pod)

    def _pod_log(self, h: Any, method: str, ns: str, name: str, *, body: Any, query: dict[str, str]) -> None:
        text = self.pod_logs.get(name)
        if text is None:
            return h._status(404, "NotFound", f'pods "{name}" not found')
        data = text.encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _events(self, h: Any, method: str, ns: str, *, body: Any, query: dict[str, str]) -> None:
        """Events of a namespace; ``fieldSelector`` as the API server takes it for events
        (``reason=...``, ``involvedObject.name=...``, comma for and)."""
        wanted = dict(part.split("=", 1) for part in (query.get("fieldSelector") or "").split(",") if "=" in part)
        fields = {"reason": lambda e: e["reason"], "involvedObject.name": lambda e: e["involvedObject"]["name"],
                  "involvedObject.kind": lambda e: e["involvedObject"]["kind"], "type": lambda e: e["type"]}
        unknown = [k for k in wanted if k not in fields]
        if unknown:
            return h._status(400, "BadRequest", f'"{unknown[0]}" is not a known field selector')
        with self.lock:
            items = [e for e in self.kube_events if e["metadata"]["namespace"] == ns
                     and all(fields[k](e) == v for k, v in wanted.items())]
            h._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                          "items": copy.deepcopy(items)})

    def _pods(self, h: Any, method: str, ns: str, *, body: Any, query: dict[str, str]) -> None:
        if method == "POST":
            with self.lock:
                pod = copy.deepcopy(body)
                pod["metadata"]["uid"] = f"uid-{self._next_rv()}"
                self.image_pods.append(copy.deepcopy(body))
                self.pods[pod["metadata"]["name"]] = pod
                self._run_image_pod(pod)
            return h._send(201, pod)
        selector = query.get("labelSelector")
        if query.get("watch") in ("true", "True", "1"):
            return self._watch(h, ns, selector, int(query.get("resourceVersion") or 0),
                               float(query.get("timeoutSeconds") or 5))
        with self.lock:
            if ns == self.fn_ns and selector and "serving.knative.dev/service" in selector:
                self.function_lists += 1
                if self.drain_after and self.function_lists >= self.drain_after:
                    for p in self._function_pods(selector):
                        self.pods.pop(p["metadata"]["name"])
                        self._emit("DELETED", p)
            items = [p for p in self.pods.values() if p["metadata"]["namespace"] == ns
                     and selector_matches(selector, p["metadata"]["labels"])]
            h._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                          "items": items})

    def _watch(self, h: Any, ns: str, selector: str | None, since: int, timeout_s: float) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + timeout_s
        sent = since
        if self.watch_errors:
            code, reason, message = self.watch_errors.pop(0)
            line = json.dumps({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                           "code": code, "reason": reason, "message": message}})
            data = line.encode() + b"\n"
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
            h.wfile.flush()
            return
        try:
            while not self._closing:
                with self.lock:
                    fresh = [(rv, k, p) for rv, k, p in self.events if rv > sent and p["metadata"]["namespace"] == ns
                             and selector_matches(selector, p["metadata"]["labels"])]
                    if not fresh:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self.lock.wait(timeout=min(left, 0.2))
                        continue
                for rv, kind, pod in fresh:
                    line = json.dumps({"type": kind, "object": pod}).encode() + b"\n"
                    h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    sent = rv
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _ingress(self, h: Any, host: str) -> None:
        fn = host.split(".")[0]
        n = int(h.headers.get("Content-Length") or 0)
        if n:
            h.rfile.read(n)
        hook, self.on_first_request = self.on_first_request, None
        if hook is not None:
            hook()
        with self.lock:
            self.ingress_requests[fn] = self.ingress_requests.get(fn, 0) + 1
            existing = self._function_pods(f"serving.knative.dev/service={fn}")
        cold = not existing
        if cold:
            self.add_function_pod(fn)
        h._send(200, {"ok": True}, {"X-Scoretune-Node": self.node_of(fn), "X-Scoretune-Cold-Start": str(cold).lower()})


def squeeze(calls: list[str]) -> list[str]:
    """Consecutive repeats collapsed (polling loops repeat a read a timing-dependent number of times)."""
    out: list[str] = []
    for c in calls:
        if not out or out[-1] != c:
            out.append(c)
    return out


OLD_IMAGE = "ghcr.io/scoretune/fn-float-ops:0.1.0"
"""An image every node holds that is no function of the fake lab: never touched by a reset."""
FAKECRI = Path(__file__).with_name("fakecri.py")


def image_of(fn: str) -> str:
    """The image a function's Knative Service names (a tag, as users write it)."""
    return f"registry.example.com/scoretune/{fn}:0.1.0"


def make_backend(fake: FakeKube, **timeouts: float) -> KubeBackend:
    """A KubeBackend aimed at ``fake`` (its API and its ingress), with short polls and timeouts."""
    cfg = client.Configuration(host=fake.url)
    cfg.retries = 0
    base = {"poll_s": 0.01, "rollout_s": 5.0, "rollback_s": 5.0, "drain_s": 5.0, "api_s": 5.0, "watch_s": 1,
            "settle_s": 0.3}
    base.update(timeouts)
    return KubeBackend(api_client=client.ApiClient(cfg), functions=list(fake.functions), ingress_url=fake.url,
                       timeouts=KubeTimeouts(**base), start_lead_s=1.5)


def write_kubeconfig(fake: FakeKube, directory: Path) -> Path:
    """A kubeconfig whose current context points at ``fake`` (token auth), as a user's would."""
    import yaml

    path = Path(directory) / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": fake.url}}],
        "users": [{"name": "admin", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}}],
    }))
    return path
