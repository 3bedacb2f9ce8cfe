"""The kube backend on OpenWhisk (issue 36, items 3 and 6): the same profile rollout, node checks,
image state and fault watch as on Knative, with OpenWhisk's own run and reset.

- **Run**: every request is a blocking invocation through OpenWhisk's API (``loadgen.replay`` with
  ``platform="openwhisk"``: Basic auth with the lab's guest key, ``blocking=true&result=false``),
  and the action pods (label ``user-action-pod=true``, each function's by its image) are watched
  for the placements, as Knative's revision pods are.
- **Reset** (before every step, so every step starts from the same state): the scheduler is put
  on the reference profile (kube-scheduler's defaults) first, because each restarted invoker is
  health-tested upstream (``InvokerSupervision``: ``invokerHealthTestAction<N>``, the default
  nodejs kind, 128 MB) and with the KubernetesContainerFactory that test action is an action pod
  the tuned scheduler places, idle for 10 minutes after: placed by the reference, those pods sit
  in the same places at every step's start, whatever the profile under test (the loop rolls that
  out after the reset). Then the invokers are
  restarted (``kubectl rollout restart`` of the chart's invoker StatefulSet: on start each deletes
  its own action pods, ``KubernetesContainerFactory.cleanup``; deleting them behind its back would
  leave it believing in containers that are gone), then the backend waits until the StatefulSet
  is rolled out, no action pod of a function is left, and the controller reports every invoker
  ``up`` (``GET /invokers`` through the API server's service proxy), then checks the nodes and
  brings the image caches to the declared state, the health action's image pulled on every node
  with the suite's (the controller's info, ``GET /`` through the same proxy, names it: the
  runtimes manifest's default nodejs kind), so only an experiment's first reset may fetch it.
- **Void, never scored**: any 429 (throttled: the deployment's limits are below the workload) or
  503 (no invoker) answer, an activation with ``statusCode`` 2 or 3 (action developer error or
  whisk internal error: apache/openwhisk ActivationResponse.scala), an invoker not ``up`` after the
  run, and a restart or move of any OpenWhisk pod (controller, invokers, Kafka, CouchDB, ...:
  :data:`OPENWHISK_INFRA_PODS`, the data-plane rule of testbed.kube.faults).

What the weights can change on OpenWhisk: only where *new* containers go. An activation goes to
an invoker by the controller's hash and to a container by the invoker's pool; kube-scheduler is
asked only when a container is created (docs/lab.md, "OpenWhisk").
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from functions.platform import Platform
from loadgen.targets import OpenWhiskTarget
from testbed.errors import InputError, LabFault, TestbedError
from testbed.kube.backend import KubeBackend
from testbed.kube.images import FunctionImage, normalize
from testbed.kube.nodes import get_path as _get
from testbed.kube.openwhisk import action_record, log_collection_warning
from testbed.kube.watch import PodWatch
from testbed.openwhisk.faults import judge_run
from testbed.scheduler.config import default_profile

log = logging.getLogger(__name__)

ACTION_POD_SELECTOR = "user-action-pod=true"
"""The label WhiskPodBuilder puts on every action pod."""

OPENWHISK_INFRA_PODS: tuple[str, ...] = (
    "openwhisk/user-action-pod!=true",
    "kube-system/k8s-app=kube-dns",
    "kube-system/k8s-app=kube-proxy",
    "kube-flannel/app=flannel",
)
"""The pods every OpenWhisk run baselines (testbed.kube.faults): every OpenWhisk pod but the
action pods (controller, invokers, Kafka, ZooKeeper, CouchDB, Redis, nginx, ...), CoreDNS,
kube-proxy, Flannel."""



@dataclass
class OpenWhiskBackend(KubeBackend):
    """Backend ``kube`` with ``platform="openwhisk"`` (see the module docstring).

    api_url: OpenWhisk's API (the chart's nginx NodePort on the control plane,
        ``https://ADDRESS:31001``); auth: the guest key ``UUID:KEY`` (``.lab/openwhisk/auth.guest``);
    verify: TLS verification of the API for the backend's own calls (the chart's nginx serves a
        self-signed certificate: False, or a CA bundle's path); release: the Helm release (``owdev``).
    namespace: where OpenWhisk and its action pods run (``openwhisk``).
    """

    api_url: str = ""
    auth: str = ""
    verify: bool | str = False
    release: str = "owdev"
    namespace: str = "openwhisk"
    health_image: str | None = None
    """The invokers' health-test action's image (None: read from the controller's info at the first reset)."""
    infra_pods: Sequence[str] = OPENWHISK_INFRA_PODS
    platform: Platform = field(default=Platform.OPENWHISK, init=False)
    knative_objects: bool = field(default=False, init=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], common: Mapping[str, Any]) -> OpenWhiskBackend:
        """The backend from the CLI's options: ``openwhisk_api``, ``openwhisk_auth`` (the file of the
        guest key) and ``namespace`` (``default`` means OpenWhisk's own, ``openwhisk``)."""
        from testbed.kube.openwhisk import read_openwhisk_key

        api, auth = options.get("openwhisk_api"), options.get("openwhisk_auth")
        if not api or not auth:
            raise InputError("--platform openwhisk on the kube backend needs --openwhisk-api URL and "
                             "--openwhisk-auth FILE (the lab's guest key)", field="--openwhisk-api")
        namespace = options.get("namespace") or "default"
        return cls(api_url=api, auth=read_openwhisk_key(auth),
                   namespace=namespace if namespace != "default" else "openwhisk", **common)

    def __post_init__(self) -> None:
        if not self.api_url:
            raise TestbedError("OpenWhisk: the API's URL is required (--openwhisk-api, e.g. https://10.0.0.10:31001)")
        user, sep, key = self.auth.partition(":")
        if not sep or not user or not key:
            raise TestbedError("OpenWhisk: the key must be UUID:KEY (.lab/openwhisk/auth.guest)")
        super().__post_init__()
        self._images: dict[str, str] = {}
        self._by_image: dict[str, str] = {}
        """Normalised image -> function (how an action pod is known as one of ours)."""
        self._actions: dict[str, dict[str, Any]] = {}
        """Function -> the action's version and limits as the controller answered them (recorded
        in every run's summary: two experiments ran the same actions only if these agree)."""
        self._limits_checked = False

    # --- OpenWhisk's REST API -----------------------------------------------------------------

    def _rest(self, what: str, method: str, path: str, **kwargs: Any) -> Any:
        import requests

        user, _, key = self.auth.partition(":")
        url = f"{self.api_url.rstrip('/')}/api/v1/namespaces/_/{path}"
        try:
            answer = requests.request(method, url, auth=(user, key), timeout=self.timeouts.api_s, verify=self.verify,
                                      **kwargs)
        except requests.RequestException as err:
            raise LabFault(f"OpenWhisk at {self.api_url}: {what} failed: {err}") from None
        if answer.status_code == 401:
            raise TestbedError(f"OpenWhisk at {self.api_url}: {what}: the key was refused (HTTP 401): give the "
                               "lab's guest key (.lab/openwhisk/auth.guest)")
        if answer.status_code >= 500 or answer.status_code == 429:
            raise LabFault(f"OpenWhisk at {self.api_url}: {what}: HTTP {answer.status_code}")
        if answer.status_code != 200:
            raise TestbedError(f"OpenWhisk at {self.api_url}: {what}: HTTP {answer.status_code}: {answer.text[:300]}")
        try:
            return answer.json()
        except ValueError:
            raise TestbedError(f"OpenWhisk at {self.api_url}: {what}: the answer is not JSON") from None

    def _function_names(self) -> list[str]:
        """The suite's actions (annotated ``scoretune.io/function``), with each one's image."""
        listed = self._rest("listing actions", "GET", "actions", params={"limit": 200})
        found = [a["name"] for a in (listed if isinstance(listed, list) else [])
                 if any(n.get("key") == "scoretune.io/function" for n in a.get("annotations") or [])]
        names = sorted(self.functions) if self.functions is not None else sorted(found)
        if not names:
            raise TestbedError(f"no scoretune function is an action of OpenWhisk at {self.api_url}: run "
                               "ansible/openwhisk.yml (it deploys the suite's actions) first")
        for name in names:
            if name not in self._images:
                action = self._rest(f"reading action {name}", "GET", f"actions/{name}")
                image = (action.get("exec") or {}).get("image")
                if not image:
                    raise TestbedError(f"OpenWhisk action {name} is not a blackbox action of the suite's image")
                self._images[name] = image
                self._actions[name] = action_record(action)
                warning = log_collection_warning(name, self._actions[name])
                if warning:
                    log.warning(warning)
        self._by_image = {normalize(img): fn for fn, img in self._images.items()}
        return names

    def _function_images(self, names: Sequence[str]) -> list[FunctionImage]:
        """Each action's image (blackbox actions are pulled by the reference they name)."""
        return [FunctionImage(fn, self._images[fn]) for fn in names]

    def invokers(self) -> dict[str, str]:
        """The controller's view of its invokers (``GET /invokers``: name -> up, unhealthy, down,
        unresponsive), read through the API server's service proxy."""
        service = f"{self.release}-controller:http"
        answer = self._call(f"reading the invokers' state from {self.namespace}/{service}",
                            self._core.connect_get_namespaced_service_proxy_with_path, service, self.namespace,
                            "invokers", _preload_content=False)
        text = answer.data  # raw: the client would turn a JSON object into its Python repr
        try:
            state = json.loads(text)
        except ValueError:
            raise LabFault(f"the controller's /invokers answer is not JSON: {text[:200]!r}") from None
        if not isinstance(state, dict):
            raise LabFault(f"the controller's /invokers answer is not an object: {str(state)[:200]}")
        return {str(k): str(v) for k, v in state.items()}

    # --- reset --------------------------------------------------------------------------------

    def reset(self) -> None:
        names = self._function_names()
        self.apply(default_profile())  # the health-test pods of the restart go where the reference puts them
        self._restart_invokers()
        self._wait_invokers_up()
        self._drain(names)
        unhealthy = self.node_problems()
        if unhealthy:
            from testbed.kube.nodes import describe

            raise LabFault(f"node health: {describe(unhealthy)}")
        self._image_record = self._restore_images(names)

    def _platform_images(self) -> list[str]:
        """The invokers' health-test action's image (pre-pulled on every node at each reset)."""
        if self.health_image is None:
            self.health_image = self._health_image_from_controller()
        return [self.health_image] if self.health_image else []

    def _health_image_from_controller(self) -> str:
        """The default nodejs kind's image from the controller's info (``Controller.info``:
        ``runtimes`` as ``ExecManifest.runtimesManifest.toJson``, each kind with its resolved
        ``image``), which ``InvokerPool.healthAction`` resolves ``nodejs:default`` to; "" (nothing
        pre-pulled, said once) when the controller does not name one."""
        service = f"{self.release}-controller:http"
        answer = self._call(f"reading the controller's info from {self.namespace}/{service}",
                            self._core.connect_get_namespaced_service_proxy_with_path, service, self.namespace,
                            "", _preload_content=False)
        try:
            info = json.loads(answer.data)
            kinds = info["runtimes"]["nodejs"]
            image = next(str(k["image"]) for k in kinds if k.get("default"))
        except (ValueError, KeyError, TypeError, StopIteration):
            log.warning("the controller's info names no default nodejs runtime: the invokers' health-test image "
                        "is not pre-pulled (each node fetches it at its first health test)")
            return ""
        return image

    def _invoker_set(self) -> Any:
        name = f"{self.release}-invoker"
        return self._call(f"reading StatefulSet {self.namespace}/{name}", self._apps.read_namespaced_stateful_set,
                          name, self.namespace)

    def _restart_invokers(self) -> None:
        name = f"{self.release}-invoker"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) + f"-{self._resets}"
        patch = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
        self._call(f"restarting the invokers ({self.namespace}/{name})", self._apps.patch_namespaced_stateful_set,
                   name, self.namespace, patch)
        deadline = time.monotonic() + self.timeouts.rollout_s
        while True:
            sts = self._invoker_set()
            want = int(_get(sts, "spec", "replicas") or 0)
            status = sts.status
            done = (status is not None and (status.observed_generation or 0) >= (sts.metadata.generation or 0)
                    and (status.updated_replicas or 0) == want and (status.ready_replicas or 0) == want
                    and (status.current_revision == status.update_revision))
            if done:
                return
            if time.monotonic() >= deadline:
                raise LabFault(f"timed out after {self.timeouts.rollout_s:.0f} s restarting the invokers "
                               f"({status.ready_replicas if status else 0}/{want} ready on the new revision)")
            time.sleep(self.timeouts.poll_s)

    def _wait_invokers_up(self) -> None:
        want = int(_get(self._invoker_set(), "spec", "replicas") or 0)
        deadline = time.monotonic() + self.timeouts.rollout_s
        while True:
            state = self.invokers()
            up = sorted(k for k, v in state.items() if v == "up")
            if len(up) >= want > 0 and len(up) == len(state):
                return
            if time.monotonic() >= deadline:
                shown = ", ".join(f"{k}: {v}" for k, v in sorted(state.items())) or "none reported"
                raise LabFault(f"timed out after {self.timeouts.rollout_s:.0f} s waiting for {want} invoker(s) up "
                               f"({shown})")
            time.sleep(self.timeouts.poll_s)

    def _drain(self, names: Sequence[str]) -> None:
        """Wait until no action pod of a function is left (the restarted invokers delete theirs)."""
        deadline = time.monotonic() + self.timeouts.drain_s
        while True:
            pods = self._call(f"listing action pods in {self.namespace}", self._core.list_namespaced_pod,
                              self.namespace, label_selector=ACTION_POD_SELECTOR).items or []
            ours = [p for p in pods if self._function_of(p) in names]
            if not ours:
                return
            if time.monotonic() >= deadline:
                left = ", ".join(sorted(p.metadata.name for p in ours))
                raise LabFault(f"timed out after {self.timeouts.drain_s:.0f} s waiting for the invokers to remove "
                               f"their action pods; {len(ours)} remain: {left}")
            time.sleep(self.timeouts.poll_s)

    # --- run ----------------------------------------------------------------------------------

    def limits(self) -> dict[str, int]:
        """The controller's invocation limits (openwhisk-deploy-kube's ``openwhisk.limitsEnvVars``
        on the controller StatefulSet): ``per_minute`` and ``concurrent``, those it sets."""
        name = f"{self.release}-controller"
        sts = self._call(f"reading StatefulSet {self.namespace}/{name}", self._apps.read_namespaced_stateful_set,
                         name, self.namespace)
        env = {_get(e, "name"): _get(e, "value") for c in _get(sts, "spec", "template", "spec", "containers") or []
               for e in _get(c, "env") or []}
        out: dict[str, int] = {}
        for key, var in (("per_minute", "LIMITS_ACTIONS_INVOKES_PERMINUTE"),
                         ("concurrent", "LIMITS_ACTIONS_INVOKES_CONCURRENT")):
            try:
                out[key] = int(str(env[var]))
            except (KeyError, ValueError):
                continue
        return out

    def check_limits(self, workload: Any) -> None:
        """Refuse a workload whose busiest minute asks more invocations than the controller allows
        (each would answer 429 and void every run): one line naming the limit and the peak."""
        per_minute = self.limits().get("per_minute")
        t = np.sort(workload.frame["t_s"].to_numpy(dtype=float))
        peak = int((np.searchsorted(t, t + 60.0, side="left") - np.arange(len(t))).max()) if len(t) else 0
        if per_minute is not None and peak > per_minute:
            raise TestbedError(f"OpenWhisk at {self.api_url} allows {per_minute} invocations a minute "
                               f"(LIMITS_ACTIONS_INVOKES_PERMINUTE) and the workload's busiest minute has {peak}: "
                               "raise openwhisk_invokes_per_minute (ansible/roles/openwhisk) above the peak")

    def run(self, workload: Any, out_dir: Any, *, seed: int = 0) -> Any:
        if not self._limits_checked:
            self.check_limits(workload)
            self._limits_checked = True
        return super().run(workload, out_dir, seed=seed)

    def _function_of(self, pod: Any) -> str | None:
        """The function an action pod runs, by its ``user-action`` container's image."""
        for c in _get(pod, "spec", "containers") or []:
            if _get(c, "name") == "user-action":
                return self._by_image.get(normalize(str(_get(c, "image") or "")))
        return None

    def _replay_target(self, functions: Sequence[str]) -> dict[str, Any]:
        return {"targets": OpenWhiskTarget(self.api_url, self.auth)}

    def _pod_watch(self, functions: Sequence[str]) -> PodWatch:
        return PodWatch(self._core, self.namespace, functions, self.timeouts, selector=ACTION_POD_SELECTOR,
                        function_of=self._function_of, container="user-action")

    def _platform_info(self, functions: Sequence[str]) -> dict[str, Any]:
        """The action pods at the run's start that are not the suite's (the controller's health
        test actions, prewarm stem cells if the deployment keeps them): not measured, but on the
        invoker nodes, taking memory the scheduler counts; recorded with their node and memory
        (the run's cluster snapshot subtracts their requests too)."""
        pods = self._call(f"listing action pods in {self.namespace}", self._core.list_namespaced_pod,
                          self.namespace, label_selector=ACTION_POD_SELECTOR).items or []
        others = []
        for p in pods:
            if self._function_of(p) is not None or _get(p, "status", "phase") in ("Succeeded", "Failed"):
                continue
            memory = next((_get(c, "resources", "requests", "memory") for c in _get(p, "spec", "containers") or []
                           if _get(c, "resources", "requests", "memory")), None)
            others.append({"pod": p.metadata.name, "node": _get(p, "spec", "node_name"), "memory": memory})
        return {"openwhisk": {"api": self.api_url, "other_action_pods": sorted(others, key=lambda o: o["pod"]),
                              "actions": {fn: self._actions[fn] for fn in sorted(functions) if fn in self._actions}}}

    def _judge_faults(self, seen: list[dict[str, Any]],
                      requests: pd.DataFrame) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """OpenWhisk's one fault rule (:mod:`testbed.openwhisk.faults`, as on the simulator and the
        embedded lab): an action pod's trouble that placement caused (Pending with no node, an OOM
        kill, an eviction) is scored, as the activations it failed are; the platform failing (a core
        pod restarted, an invoker not up, a 503 or statusCode 3 without a pod-start cause, an image
        that cannot be pulled) voids."""
        placement = [f for f in seen if f.get("kind") == "pod" and placement_consequence(str(f.get("reason", "")))]
        platform = [f for f in seen if f not in placement]
        try:
            state: dict[str, str] | None = self.invokers()
        except TestbedError as err:
            state = None
            platform.append({"kind": "invoker", "object": self.api_url, "t": time.time(),
                             "reason": f"the invokers' state after the run is unknown: {err}"})
        judged = judge_run(requests, invokers=state,
                       platform_faults=[f"{f.get('kind')} {f.get('object')}: {f.get('reason')}" for f in platform])
        now = time.time()
        voids = list(platform) + [{"kind": "openwhisk", "object": self.api_url, "t": now, "reason": why}
                                  for why in judged.void_observed]
        record = judged.record()
        record["placement_faults"] = [f"{f.get('object')}: {f.get('reason')}" for f in placement]
        return voids, record


def placement_consequence(reason: str) -> bool:
    """Whether a fault the watch saw on an action pod is the placement's doing (scored under the
    rule): Pending with no node (no capacity), an OOM kill, a pod the kubelet evicted or rejected
    for want of memory or CPU. An image that cannot be pulled or a container that cannot be created
    is not."""
    return (reason.startswith("Pending with no node") or "OOMKilled" in reason
            or (reason.startswith("the pod failed") and any(k in reason for k in ("Evicted", "OutOfmemory", "OutOfcpu"))))


__all__ = ["ACTION_POD_SELECTOR", "OPENWHISK_INFRA_PODS", "OpenWhiskBackend", "placement_consequence"]
