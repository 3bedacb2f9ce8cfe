"""A fake OpenWhisk on the fake API server (fakeapi.FakeKube): its pods, the invoker StatefulSet and
the controller's ``/invokers`` behind the API server's service proxy, and a REST controller on
127.0.0.1 that speaks apache/openwhisk's API (docs/rest_api.md) and creates action pods the way
the invoker does: one pod per new container (label ``user-action-pod=true``, container
``user-action`` running the action's image), reused warm by the next activation of the same
action, all deleted when the invokers restart (KubernetesContainerFactory.cleanup).

Faults a test can set: ``throttle`` (every invocation answers 429), ``internal_error`` (an action
whose activations end with statusCode 3), ``invoker_state`` (what ``/invokers`` reports).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

from fakeapi import NOW, FakeKube, ImageStore, image_of
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from functions.process import serving

NS = "openwhisk"
KEY = "0f8c5a3e-6b1d-4c2a-9e7f-3d5b8a1c2e4f:" + "K" * 64
CORE = ("owdev-controller-0", "owdev-kafka-0", "owdev-zookeeper-0", "owdev-couchdb-6f7d9c-x4k2m",
        "owdev-nginx-5d8f7b-p9q2w")


HEALTH_IMAGE = "openwhisk/action-nodejs-v14:1.20.0"
"""The default nodejs kind's image in openwhisk-deploy-kube's runtimes.json at 108f327."""


class FakeWhisk:
    def __init__(self, fake: FakeKube, functions: tuple[str, ...] = ("aes", "float-ops")) -> None:
        self.fake = fake
        self.functions = functions
        self.actions: dict[str, dict[str, Any]] = {}
        self.throttle = False
        self.per_minute = 600000
        """The controller's LIMITS_ACTIONS_INVOKES_PERMINUTE (the role's openwhisk_invokes_per_minute)."""
        self.on_first_invoke: Any = None
        """Called once, at the next invocation (a fault that happens during the run)."""
        self.internal_error: set[str] = set()
        self.not_ready: set[str] = set()
        """Actions whose new pod is never Ready: upstream's statusCode 3 with KubernetesContainer's
        "Failed to run container with image" (a consequence of placement)."""
        self.invocations = 0
        self.restarts = 0
        self.restarted_under: list[str] = []
        """The scheduler's configuration hash at each invoker restart (what placed the health-test pods)."""
        self.generation = 1
        self.invoker_names = ["owdev-invoker-0", "owdev-invoker-1"]
        self.invoker_state: dict[str, str] = {}
        for fn in functions:
            self.actions[fn] = {"name": fn, "namespace": "guest", "version": "0.0.1",
                                "exec": {"kind": "blackbox", "image": image_of(fn)},
                                "limits": {"memory": 256, "timeout": 60000, "concurrency": 1, "logs": 0},
                                "annotations": [{"key": "scoretune.io/function", "value": fn}]}
        first = fake.nodes[0]
        for name in CORE:
            fake.add_infra_pod(NS, name, {"name": name.rsplit("-", 2)[0] if "-" in name else name}, first)
        self._start_invokers()
        fake.extra_routes += [
            (rf"/apis/apps/v1/namespaces/{NS}/statefulsets/owdev-invoker", self._statefulset),
            (rf"/api/v1/namespaces/{NS}/services/owdev-controller:http/proxy/invokers", self._invokers),
            (rf"/api/v1/namespaces/{NS}/services/owdev-controller:http/proxy/?", self._info),
            (rf"/apis/apps/v1/namespaces/{NS}/statefulsets/owdev-controller", self._controller),
        ]
        self._serving = serving(Starlette(routes=[
            Route("/api/v1/namespaces/_/actions", self.list_actions, methods=["GET"]),
            Route("/api/v1/namespaces/_/actions/{name}", self.action, methods=["GET", "PUT", "POST"]),
        ]))

    # --- the kube side ------------------------------------------------------------------------

    def _start_invokers(self) -> None:
        for i, name in enumerate(self.invoker_names):
            pod = f"{name}-r{self.restarts}"
            self.fake.add_infra_pod(NS, pod, {"name": "owdev-invoker"}, self.fake.nodes[i % len(self.fake.nodes)])
        self.invoker_state = {f"invoker{i}/{n}": "up" for i, n in enumerate(self.invoker_names)}

    def _statefulset(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            if method == "PATCH":
                dep = fake.deployments[fake.scheduler_name]
                self.restarted_under.append(dep["spec"]["template"]["metadata"]["annotations"]["scoretune.dev/config-hash"])
                self.generation += 1
                self.restarts += 1
                # the old invokers go; each new one deletes its action pods on start (cleanup)
                for name in [n for n, p in fake.pods.items() if p["metadata"]["namespace"] == NS
                             and (p["metadata"]["labels"].get("user-action-pod") == "true"
                                  or p["metadata"]["labels"].get("name") == "owdev-invoker")]:
                    pod = fake.pods.pop(name)
                    if pod["metadata"]["labels"].get("user-action-pod") == "true":
                        fake._emit("DELETED", pod)
        if method == "PATCH":
            self._start_invokers()
        n = len(self.invoker_names)
        rev = f"owdev-invoker-{self.generation}"
        h._send(200, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                      "metadata": {"name": "owdev-invoker", "namespace": NS, "generation": self.generation},
                      "spec": {"replicas": n, "selector": {"matchLabels": {"name": "owdev-invoker"}},
                               "serviceName": "owdev-invoker",
                               "template": {"metadata": {"labels": {"name": "owdev-invoker"}},
                                            "spec": {"containers": [{"name": "invoker", "image": "invoker"}]}}},
                      "status": {"observedGeneration": self.generation, "replicas": n, "readyReplicas": n,
                                 "updatedReplicas": n, "currentRevision": rev, "updateRevision": rev}})

    def _controller(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        env = [{"name": "LIMITS_ACTIONS_INVOKES_PERMINUTE", "value": str(self.per_minute)},
               {"name": "LIMITS_ACTIONS_INVOKES_CONCURRENT", "value": "10000"}]
        h._send(200, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                      "metadata": {"name": "owdev-controller", "namespace": NS, "generation": 1},
                      "spec": {"replicas": 1, "selector": {"matchLabels": {"name": "owdev-controller"}},
                               "serviceName": "owdev-controller",
                               "template": {"metadata": {"labels": {"name": "owdev-controller"}},
                                            "spec": {"containers": [{"name": "controller", "image": "controller",
                                                                     "env": env}]}}}})

    def _info(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        """The controller's ``GET /`` (Controller.info at ef725a6): its runtimes with their images."""
        h._send(200, {"description": "OpenWhisk", "runtimes": {"nodejs": [
            {"kind": "nodejs:14", "image": HEALTH_IMAGE, "default": True, "deprecated": False, "attached": True,
             "requireMain": False},
            {"kind": "nodejs:18", "image": "openwhisk/action-nodejs-v18:1.20.0", "default": False,
             "deprecated": False, "attached": True, "requireMain": False}]}})

    def _invokers(self, h: Any, method: str, *, body: Any, query: dict[str, str]) -> None:
        h._send(200, dict(self.invoker_state))

    def action_pods(self, fn: str | None = None) -> list[dict[str, Any]]:
        image = image_of(fn) if fn else None
        return [p for p in self.fake.pods.values() if p["metadata"]["namespace"] == NS
                and p["metadata"]["labels"].get("user-action-pod") == "true"
                and (image is None or p["spec"]["containers"][0]["image"] == image)]

    def _new_container(self, fn: str) -> dict[str, Any]:
        fake = self.fake
        with fake.lock:
            seq = len(fake.pods)
            name = re.sub(r"[^a-z0-9-]", "-", f"wskowdev-invoker-00-{seq}-guest-{fn}")
            node = fake.node_of(fn) if fn in fake.functions else fake.nodes[seq % len(fake.nodes)]
            pod = {"metadata": {"name": name, "namespace": NS, "creationTimestamp": NOW,
                                "labels": {"name": name, "user-action-pod": "true", "invoker": "invoker0"}},
                   "spec": {"schedulerName": fake.scheduler_name,
                            "containers": [{"name": "user-action", "image": image_of(fn)}]},
                   "status": {"phase": "Pending", "conditions": []}}
            fake._emit("ADDED", pod)
            pod = copy.deepcopy(pod)
            pod["spec"]["nodeName"] = node
            fake.cri.setdefault(node, ImageStore()).pull(image_of(fn))
            pod["status"] = {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": NOW},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-02T10:00:03Z"}],
                "containerStatuses": [{"name": "user-action", "image": image_of(fn), "imageID": "", "ready": True,
                                       "restartCount": 0, "state": {"running": {"startedAt": "2026-12-02T10:00:02Z"}}}]}
            fake._emit("MODIFIED", pod)
            fake.pods[name] = pod
            return pod

    # --- the REST controller ------------------------------------------------------------------

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == "Basic " + base64.b64encode(KEY.encode()).decode()

    async def list_actions(self, request: Request) -> JSONResponse:
        if not self._authorised(request):
            return JSONResponse({"error": "The supplied authentication is invalid."}, status_code=401)
        return JSONResponse([{k: a[k] for k in ("name", "namespace", "version", "annotations")}
                             for a in self.actions.values()])

    async def action(self, request: Request) -> JSONResponse:
        if not self._authorised(request):
            return JSONResponse({"error": "The supplied authentication is invalid."}, status_code=401)
        name = request.path_params["name"]
        if request.method == "PUT":
            body = json.loads(await request.body())
            self.actions[name] = {"name": name, "namespace": "guest", "version": "0.0.2", **body}
            return JSONResponse(self.actions[name])
        if name not in self.actions:
            return JSONResponse({"error": "The requested resource does not exist."}, status_code=404)
        if request.method == "GET":
            return JSONResponse(self.actions[name])
        self.invocations += 1
        hook, self.on_first_invoke = self.on_first_invoke, None
        if hook is not None:
            hook()
        if self.throttle:
            return JSONResponse({"error": "Too many requests in the last minute (count: 61, allowed: 60)."},
                                status_code=429)
        await request.body()
        existing = self.action_pods(name)
        pod = existing[0] if existing else self._new_container(name)
        cold = not existing
        notes = [{"key": "waitTime", "value": 3}] + ([{"key": "initTime", "value": 250}] if cold else [])
        if name in self.not_ready:
            response = {"status": "whisk internal error", "statusCode": 3, "success": False,
                        "result": {"error": f"Failed to run container with image '{image_of(name)}'."}}
            return JSONResponse({"activationId": f"a{self.invocations}", "annotations": notes, "duration": 0,
                                 "response": response}, status_code=502)
        if name in self.internal_error:
            response = {"status": "whisk internal error", "statusCode": 3, "success": False,
                        "result": {"error": "the action did not initialize or run"}}
            return JSONResponse({"activationId": f"a{self.invocations}", "annotations": notes, "duration": 2,
                                 "response": response}, status_code=502)
        result = {"scoretune": {"node": pod["spec"]["nodeName"], "pod": pod["metadata"]["name"], "cold": cold}}
        return JSONResponse({"activationId": f"a{self.invocations}", "annotations": notes, "duration": 20,
                             "response": {"status": "success", "statusCode": 0, "success": True, "result": result}})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeWhisk:
        self.port = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(*exc)
