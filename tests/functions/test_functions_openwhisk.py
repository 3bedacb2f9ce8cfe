"""The suite's functions as OpenWhisk actions (functions/openwhisk.py): the action proxy protocol of
apache/openwhisk docs/actions-new.md, checked as its canonical harness
(tests/.../actionContainers/BasicActionRunnerTests.scala) does: initialise then run, no
re-initialisation, run before init refused, the action's own errors as 200 with {"error": ...}
and the proxy's as a non-200 (upstream's table), the result a JSON object; plus what scoretune reads: the node, pod and cold start in the result and
the end-of-activation log markers."""

from __future__ import annotations

import contextlib
import http.client
import json

import pytest

from functions.errors import FunctionsError
from functions.openwhisk import END_MARKER, ActionProxy
from functions.process import free_port, serving
from functions.runtime import build_app, serve


def _post(port: int, path: str, body: dict | bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def action(name: str = "float-ops") -> contextlib.AbstractContextManager[int]:
    instance = build_app(name, environ={"NODE_NAME": "worker-2", "POD_NAME": "wskowdev-invoker-00-17-guest-x"})
    return serving(ActionProxy(instance).app)


def test_init_then_runs_return_the_result_with_where_it_ran(capfd):
    with action() as port:
        assert _post(port, "/run", {"value": {}})[0] == 502  # not initialised yet
        status, body = _post(port, "/init", {"value": {"name": "float-ops", "main": "main", "code": "", "binary": False}})
        assert (status, body) == (200, {"ok": True})
        status, again = _post(port, "/init", {"value": {"name": "float-ops"}})
        assert status == 403 and "more than once" in again["error"]  # no re-initialisation
        first = _post(port, "/run", {"value": {"n": 1000}, "activation_id": "a1", "namespace": "guest",
                                     "action_name": "/guest/float-ops", "deadline": 0, "api_key": "k"})
        second = _post(port, "/run", {"value": {"n": 1000}, "activation_id": "a2"})
    assert first[0] == 200 and second[0] == 200
    assert first[1]["scoretune"] == {"node": "worker-2", "pod": "wskowdev-invoker-00-17-guest-x", "cold": True,
                                     "activation_id": "a1"}
    assert second[1]["scoretune"]["cold"] is False
    assert set(first[1]) - {"scoretune"}  # the handler's own result is there too
    out, err = capfd.readouterr()
    assert out.count(END_MARKER) == 2 and err.count(END_MARKER) == 2


def test_the_actions_own_error_is_200_with_error_and_a_broken_proxy_is_not():
    """Upstream's table (ActivationResult.processRunResponseContent, ef725a6): the handler refusing
    its payload is the action's error -- 200 with ``error`` (statusCode 1, the container stays warm),
    as the actionloop/Python runtime answers; a body the proxy cannot read is not (non-200, a
    developer error)."""
    with action() as port:
        assert _post(port, "/init", b"not json")[0] == 400
        assert _post(port, "/init", {"value": {"name": "float-ops"}})[0] == 200
        status, body = _post(port, "/run", {"value": ["not", "an", "object"]})
        assert status == 400 and "value" in body["error"]
        status, body = _post(port, "/run", {"value": {"n": "many"}})  # a payload the handler refuses
        assert status == 200 and set(body) == {"error", "scoretune"} and body["scoretune"]["node"] == "worker-2"
        assert _post(port, "/run", {"value": {"n": 1000}})[0] == 200  # and the next activation runs


class _SlowLoad:
    """A runtime still importing its handler when /init arrives (a real pod is Ready before that)."""

    node_name, pod_name, served, in_flight = "n", "p", 0, 0

    def __init__(self, error: str | None = None) -> None:
        import threading

        self.calls = 0
        self.done = threading.Event()
        self.error = error

    async def loaded(self) -> str | None:
        import anyio

        await anyio.to_thread.run_sync(self.done.wait, 30)
        return self.error

    async def call(self, overrides):
        self.calls += 1
        return 200, {"ran": True}

    async def readyz(self, request):
        from starlette.responses import JSONResponse

        return JSONResponse({}, status_code=200 if self.done.is_set() else 503)

    async def healthz(self, request):
        from starlette.responses import JSONResponse

        return JSONResponse({})

    @contextlib.asynccontextmanager
    async def _lifespan(self, app):
        yield


@pytest.mark.parametrize("error", [None, "ImportError('numpy')"])
def test_init_during_a_slow_load_waits_and_never_runs_the_handler(error):
    """``/init`` arriving while the handler imports waits for the import and answers from it, without
    calling the handler (the proxy once ran it with the default payload: one extra execution per real
    cold start); a load that failed is a non-200 /init (developer error)."""
    import threading
    import time

    fake = _SlowLoad(error)
    answer: list[tuple[int, dict]] = []
    with serving(ActionProxy(fake).app) as port:
        t = threading.Thread(target=lambda: answer.append(_post(port, "/init", {"value": {"name": "float-ops"}})))
        t.start()
        time.sleep(0.3)
        assert t.is_alive() and not answer  # still waiting for the import
        fake.done.set()
        t.join(30)
    status, body = answer[0]
    assert fake.calls == 0
    if error is None:
        assert (status, body) == (200, {"ok": True})
    else:
        assert status == 502 and "did not load" in body["error"] and "numpy" in body["error"]


def test_serve_refuses_an_unknown_protocol():
    with pytest.raises(FunctionsError, match="--protocol 'grpc'"):
        serve("float-ops", protocol="grpc")


def test_one_image_serves_both_platforms(tmp_path):
    """The default protocol (auto): the runtime process answers Knative's POST / and OpenWhisk's
    /init and /run, so the function images need no OpenWhisk build of their own."""
    import subprocess
    import sys

    from functions.process import wait_ready

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "functions.runtime", "--function", "float-ops", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc, 30)
        assert _post(port, "/", {"n": 1000})[0] == 200
        assert _post(port, "/init", {"value": {"name": "float-ops"}})[0] == 200
        status, body = _post(port, "/run", {"value": {"n": 1000}})
        assert status == 200 and "scoretune" in body
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_action_pod_is_whiskpodbuilders():
    """WhiskPodBuilder at ef725a6 sets no imagePullPolicy and the labels name, user-action-pod and
    (KubernetesContainerFactory) invoker and release; memory request = limit, no CPU (issue 45, item 7)."""
    import dataclasses

    import pytest

    from functions.errors import InputError
    from functions.openwhisk_action import action_memory_mb, action_pod
    from functions.spec import discover_specs

    spec = discover_specs()["float-ops"]
    pod = action_pod(spec, name="wsk0-1-guest-float-ops", invoker="invoker0", release="owdev")
    container = pod["spec"]["containers"][0]
    assert "imagePullPolicy" not in container
    assert pod["metadata"]["labels"] == {"name": "wsk0-1-guest-float-ops", "user-action-pod": "true",
                                         "invoker": "invoker0", "release": "owdev"}
    memory = f"{action_memory_mb(spec)}Mi"
    assert container["resources"] == {"limits": {"memory": memory}, "requests": {"memory": memory}}
    # with no pull policy Kubernetes pulls :latest (or an untagged image) on every cold start: refused
    for image in ("ghcr.io/me/fn:latest", "ghcr.io/me/fn", "localhost:5000/fn"):
        with pytest.raises(InputError, match=f"function float-ops: image {image} is .*every cold start"):
            action_pod(dataclasses.replace(spec, image=image), name="p")
    for image in ("localhost:5000/fn:1", "ghcr.io/me/fn@sha256:" + "a" * 64):
        action_pod(dataclasses.replace(spec, image=image), name="p")
