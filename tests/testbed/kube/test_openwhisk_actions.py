"""The suite's functions as OpenWhisk actions (testbed/kube/openwhisk.py): the PUT each function
becomes, against a controller on 127.0.0.1 that answers as apache/openwhisk's does (the action
with its version, bumped on each overwrite; 401 for a refused key; 400 for a limit out of bounds)."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from functions.process import serving
from functions.spec import discover_specs
from testbed.errors import TestbedError
from testbed.kube.openwhisk import action_body, deploy_actions

KEY = "23bc46b1-0000-4ed5-8c54-816aa4f8c502:" + "k" * 64


class Controller:
    def __init__(self, max_memory_mb: int = 512) -> None:
        self.actions: dict[str, dict] = {}
        self.max_memory_mb = max_memory_mb
        app = Starlette(routes=[Route("/api/v1/namespaces/_/actions/{name}", self.put, methods=["PUT"])])
        self._serving = serving(app)

    async def put(self, request: Request) -> JSONResponse:
        import base64

        if request.headers.get("authorization") != "Basic " + base64.b64encode(KEY.encode()).decode():
            return JSONResponse({"error": "The supplied authentication is invalid."}, status_code=401)
        name = request.path_params["name"]
        if name in self.actions and request.query_params.get("overwrite") != "true":
            return JSONResponse({"error": "resource already exists"}, status_code=409)
        body = json.loads(await request.body())
        if body["limits"]["memory"] > self.max_memory_mb:
            return JSONResponse({"error": f"memory {body['limits']['memory']} MB exceeds allowed threshold of "
                                          f"{self.max_memory_mb} MB"}, status_code=400)
        old = self.actions.get(name, {}).get("version")
        version = "0.0.1" if old is None else f"0.0.{int(old.split('.')[-1]) + 1}"
        self.actions[name] = {**body, "name": name, "namespace": "guest", "version": version}
        return JSONResponse(self.actions[name])

    def __enter__(self) -> Controller:
        self.port = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(*exc)


def test_each_function_becomes_a_blackbox_action_with_its_limits_and_a_version():
    specs = discover_specs()
    chosen = [specs["float-ops"], specs["aes"]]
    with Controller() as ow:
        url = f"http://127.0.0.1:{ow.port}"
        assert deploy_actions(url, KEY, chosen) == {"float-ops": "0.0.1", "aes": "0.0.1"}
        assert deploy_actions(url, KEY, chosen[:1]) == {"float-ops": "0.0.2"}  # overwrite: a new revision
        stored = ow.actions["float-ops"]
    assert stored["exec"] == {"kind": "blackbox", "image": specs["float-ops"].image}
    body = action_body(specs["float-ops"])
    assert stored["limits"] == body["limits"] and body["limits"]["timeout"] == 60000
    assert body["limits"]["memory"] >= max(128, specs["float-ops"].memory_limit_bytes // 2**20)
    assert body["limits"]["concurrency"] == (specs["float-ops"].container_concurrency or 1)


def test_a_refused_key_or_limit_is_one_line_naming_the_action():
    specs = discover_specs()
    with Controller(max_memory_mb=1) as ow:
        url = f"http://127.0.0.1:{ow.port}"
        with pytest.raises(TestbedError, match="creating action float-ops failed: HTTP 401: The supplied"):
            deploy_actions(url, "x:y", [specs["float-ops"]])
        with pytest.raises(TestbedError, match="creating action float-ops failed: HTTP 400: memory .* exceeds"):
            deploy_actions(url, KEY, [specs["float-ops"]])
    with pytest.raises(TestbedError, match="UUID:KEY"):
        deploy_actions(url, "nokey", [specs["float-ops"]])
