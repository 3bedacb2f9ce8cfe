"""Load for OpenWhisk (issue 36, item 2): the same open-loop Locust replay, each request a blocking
invocation (``POST /api/v1/namespaces/_/actions/NAME?blocking=true&result=false``, Basic auth) of
a controller on 127.0.0.1 that answers as apache/openwhisk's does: the activation record with its
waitTime/initTime annotations, duration and response (statusCode 0 success, 1 application error),
a 202 with only the activation id when the blocking wait runs out, 401 without the key."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from functions.errors import InputError
from functions.process import serving
from loadgen.replay import replay
from loadgen.targets import OpenWhiskTarget
from loadgen.workload import make_workload

KEY = "23bc46b1-0000-4ed5-8c54-816aa4f8c502:k" + "x" * 63


class FakeController:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.served: dict[str, int] = {}
        app = Starlette(routes=[Route("/api/v1/namespaces/_/actions/{name}", self.invoke, methods=["POST"])])
        self._serving = serving(app)

    async def invoke(self, request: Request) -> JSONResponse:
        name = request.path_params["name"]
        expected = "Basic " + base64.b64encode(KEY.encode()).decode()
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "The supplied authentication is invalid."}, status_code=401)
        params = json.loads(await request.body() or b"{}")
        self.calls.append((name, dict(request.query_params)))
        if name == "slow":
            return JSONResponse({"activationId": "a-slow"}, status_code=202)
        first = self.served.get(name, 0) == 0
        self.served[name] = self.served.get(name, 0) + 1
        notes = [{"key": "waitTime", "value": 12}] + ([{"key": "initTime", "value": 340}] if first else [])
        if name == "broken":
            response = {"status": "application error", "statusCode": 1, "success": False,
                        "result": {"error": "boom"}}
            return JSONResponse({"activationId": f"a-{name}", "annotations": notes, "duration": 5,
                                 "response": response}, status_code=502)
        result = {"ok": True, "echo": params,
                  "scoretune": {"node": "worker-2", "pod": f"wskowdev-invoker-00-1-guest-{name}", "cold": first}}
        return JSONResponse({"activationId": f"a-{name}-{self.served[name]}", "annotations": notes, "duration": 25,
                             "response": {"status": "success", "statusCode": 0, "success": True, "result": result}})

    def __enter__(self) -> FakeController:
        self.port = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(*exc)


@pytest.mark.integration
def test_a_replay_against_openwhisk_records_each_activation(tmp_path):
    wl = make_workload(np.linspace(0.0, 0.8, 8), ["float-ops", "aes", "slow", "broken"] * 2)
    with FakeController() as ow:
        result = replay(wl, OpenWhiskTarget(f"http://127.0.0.1:{ow.port}", KEY), tmp_path / "run", timeout_s=5.0)
    req = result.requests.set_index("request_id")
    assert {q["blocking"] for _, q in ow.calls} == {"true"} and {q["result"] for _, q in ow.calls} == {"false"}
    fo = req[req["function"] == "float-ops"].sort_values("scheduled_s")
    assert list(fo["status"]) == ["ok", "ok"] and list(fo["node"]) == ["worker-2", "worker-2"]
    assert list(fo["cold_start"]) == [True, False] and list(fo["pod"].unique()) == ["wskowdev-invoker-00-1-guest-float-ops"]
    assert fo["wait_s"].tolist() == [0.012, 0.012] and fo["init_s"].iloc[0] == 0.34 and np.isnan(fo["init_s"].iloc[1])
    assert fo["duration_s"].tolist() == [0.025, 0.025] and fo["activation_id"].tolist() == ["a-float-ops-1", "a-float-ops-2"]
    slow = req[req["function"] == "slow"]
    assert (slow["status"] == "timeout").all() and slow["error"].str.contains("HTTP 202").all()
    broken = req[req["function"] == "broken"]
    assert (broken["status"] == "error").all()
    assert broken["error"].eq("activation statusCode 1 (application error): boom").all()  # upstream's message kept
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["replay"]["platform"] == "openwhisk"
    assert KEY not in (tmp_path / "run" / "summary.json").read_text()  # the key stays out of the results


def test_openwhisk_needs_its_key_and_one_base_url():
    with pytest.raises(InputError, match="field auth: OpenWhisk needs its API key"):
        OpenWhiskTarget("http://127.0.0.1:1", "")
    with pytest.raises(InputError, match="field targets: OpenWhisk takes one API base URL"):
        OpenWhiskTarget({"float-ops": "http://127.0.0.1:1"}, "u:k")

