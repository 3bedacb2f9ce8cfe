"""The suite's functions as OpenWhisk actions (functions/openwhisk.py): the action proxy protocol of
apache/openwhisk docs/actions-new.md, checked as its canonical harness
(tests/.../actionContainers/BasicActionRunnerTests.scala) does: initialise then run, no
re-initialisation, run before init refused, errors as {"error": ...} with a non-200 status, the
result a JSON object; plus what scoretune reads: the node, pod and cold start in the result and
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


def test_errors_are_an_error_object_with_a_non_200_status():
    with action() as port:
        assert _post(port, "/init", b"not json")[0] == 400
        assert _post(port, "/init", {"value": {"name": "float-ops"}})[0] == 200
        status, body = _post(port, "/run", {"value": ["not", "an", "object"]})
        assert status == 400 and "value" in body["error"]
        status, body = _post(port, "/run", {"value": {"n": "many"}})  # a payload the handler refuses
        assert status == 502 and set(body) == {"error"}


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
