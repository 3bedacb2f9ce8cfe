"""The embedded lab's controllers in process (the fast tier): each platform's controller, looked up in
testbed.platforms and served by aiohttp's test server, in front of fake node agents and a fake
function container in the same event loop (as Locust tests its runners with a mocked transport).
What the lab's own processes add -- real agents, real runtimes, Locust -- is the ``lab`` tier's."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from testbed.cluster import parse_cluster
from testbed.local import lab as labmod
from testbed.local.state import LabState
from testbed.platforms import platform_entry

CLUSTER = """\
name: two-nodes
groups:
  - {name: fast, count: 1, cpu: "2", memory: 4Gi, speed: 1.0, images: [ghcr.io/scoretune/fn-float-ops:0.1.0],
     taints: [{key: scoretune.io/spot, value: "true", effect: PreferNoSchedule}]}
  - {name: slow, count: 1, cpu: "2", memory: 4Gi, speed: 0.5}
"""
ACTION = "/api/v1/namespaces/_/actions/float-ops"


def _basic(user: str, key: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()}


class FakeLab:
    """The processes a controller talks to: one agent per node (``POST /instances`` starts an
    instance at once, ``DELETE`` removes it, ``POST /reset`` clears the node) and one container
    that answers Knative's ``POST /`` and OpenWhisk's ``/init`` and ``/run``."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []  # (node, pod)
        self.deleted: list[str] = []
        self.resets: list[str] = []
        self.calls: list[str] = []
        self.run_answers: list[tuple[int, dict[str, Any]]] = []
        self.init_s = 0.0
        """How long the container's ``/init`` takes."""
        self.start_failures: list[str] = []
        """Why the next instances fail to start (the agent's ``{"ok": false, "error"}``), then they start."""

    def agent(self, node: str, fn_url: Callable[[], str]) -> web.Application:
        async def start(request: web.Request) -> web.Response:
            body = await request.json()
            if self.start_failures:
                return web.json_response({"ok": False, "error": self.start_failures.pop(0)})
            self.started.append((node, body["pod"]))
            return web.json_response({"ok": True, "url": fn_url(), "image_pull_s": 0.0, "start_s": 0.01, "init_s": 0.02})

        async def delete(request: web.Request) -> web.Response:
            self.deleted.append(request.match_info["id"])
            return web.json_response({"ok": True})

        async def reset(request: web.Request) -> web.Response:
            self.resets.append(node)
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/instances", start)
        app.router.add_delete("/instances/{id}", delete)
        app.router.add_post("/reset", reset)
        return app

    def container(self) -> web.Application:
        async def knative(request: web.Request) -> web.Response:
            self.calls.append("/")
            return web.json_response({"ok": True})

        async def init(request: web.Request) -> web.Response:
            self.calls.append("init")
            await asyncio.sleep(self.init_s)
            return web.json_response({"ok": True})

        async def run(request: web.Request) -> web.Response:
            self.calls.append("run")
            if self.run_answers:  # (status, body) of the next activations, then the default
                status, body = self.run_answers.pop(0)
                return web.json_response(body, status=status)
            return web.json_response({"answer": 42})

        app = web.Application()
        app.router.add_post("/", knative)
        app.router.add_post("/init", init)
        app.router.add_post("/run", run)
        return app


def _with_lab(platform: str, tmp_path: Path, body: Callable[[TestClient, FakeLab, LabState], Awaitable[None]]) -> None:
    """The lab description ``lab.up`` writes (no process started), fake agents on their ports, the
    platform's controller from the registry behind a test client; ``body`` runs against it."""
    spec = parse_cluster(yaml.safe_load(CLUSTER), file="two-nodes.yaml")
    state = LabState(tmp_path / "state")
    labmod.prepare(spec, state, cpu_enforcement="duty-cycle", platform=platform_entry(platform).platform)
    fake = FakeLab()

    async def main() -> None:
        container = TestServer(fake.container())
        await container.start_server()
        agents = []
        for n in spec.nodes:
            server = TestServer(fake.agent(n.name, lambda: str(container.make_url("")).rstrip("/")))
            await server.start_server()
            state.write_port(f"agent-{n.name}", server.port)
            agents.append(server)
        controller = platform_entry(platform).lab_controller_class()(state)
        client = TestClient(TestServer(controller.app()))
        await client.start_server()
        try:
            await body(client, fake, state)
        finally:
            await client.close()
            for server in (*agents, container):
                await server.close()

    asyncio.run(main())


def test_knative_schedules_a_cold_instance_with_the_profile_and_serves_warm_after(tmp_path):
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        assert (await (await client.get("/_lab/healthz")).json())["platform"] == "knative"
        t0 = (await (await client.post("/_lab/run/begin", json={})).json())["t0"]
        first = await client.post("/", json={}, headers={"X-Scoretune-Function": "float-ops"})
        assert first.status == 200 and first.headers["X-Scoretune-Cold-Start"] == "true"
        # the default profile (TaintToleration 3 against ImageLocality 1): away from the tainted node
        assert fake.started and first.headers["X-Scoretune-Node"] == fake.started[0][0] == "slow-0"
        second = await client.post("/fn/float-ops", json={})
        assert second.status == 200 and second.headers["X-Scoretune-Cold-Start"] == "false"
        assert fake.calls == ["/", "/"]  # (the KPA may have started a second instance meanwhile)
        end = await (await client.post("/_lab/run/end", json={"t0": t0})).json()
        assert [p["pod"] for p in end["placements"]] == [pod for _, pod in fake.started]
        placed = end["placements"][0]
        assert placed["node"] == "slow-0" and placed["function"] == "float-ops"
        assert placed["created_s"] >= 0 and placed["ready_s"] >= placed["scheduled_s"] >= placed["created_s"]
        assert (await client.post("/", json={}, headers={"X-Scoretune-Function": "nope"})).status == 404
        # a reset asks every agent to clear its node and forgets every instance
        assert (await (await client.post("/_lab/reset", json={})).json())["ok"]
        assert sorted(fake.resets) == ["fast-0", "slow-0"]
        status = await (await client.get("/_lab/status")).json()
        assert status["instances"] == [] and status["platform"] == "knative"

    _with_lab("knative", tmp_path, body)


def test_a_profile_posted_to_the_controller_decides_where_the_next_pod_goes(tmp_path):
    """ImageLocality 100 against TaintToleration 1: the same request lands on the tainted node that
    holds the image, where the default profile keeps it off (the test above)."""
    from testbed.local.placement import profile_to_config_dict
    from testbed.scheduler.config import profile_from_weights

    profile = profile_from_weights({"ImageLocality": 100, "TaintToleration": 1})

    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        bad = await client.post("/_lab/profile", json={"config": {"kind": "nonsense"}})
        assert bad.status == 400 and "error" in await bad.json()
        ok = await client.post("/_lab/profile", json={"config": profile_to_config_dict(profile),
                                                      "scheduler_name": profile.scheduler_name})
        assert ok.status == 200
        placed = await client.post("/", json={}, headers={"X-Scoretune-Function": "float-ops"})
        assert placed.status == 200 and placed.headers["X-Scoretune-Node"] == fake.started[0][0] == "fast-0"

    _with_lab("knative", tmp_path, body)


def test_openwhisk_answers_with_the_activation_record_behind_its_key(tmp_path):
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        assert (await client.post(f"{ACTION}?blocking=true", json={})).status == 401
        assert (await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, "no"))).status == 401
        cold = await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))
        record = await cold.json()
        assert cold.status == 200 and record["response"]["statusCode"] == 0 and record["response"]["result"] == {"answer": 42}
        notes = {a["key"]: a["value"] for a in record["annotations"]}
        # a new container: scheduled, seen Ready at the invoker's poll, /init, then /run
        assert "initTime" in notes and notes["waitTime"] >= 0 and fake.calls == ["init", "run"]
        warm = await (await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))).json()
        assert "initTime" not in {a["key"] for a in warm["annotations"]} and fake.calls == ["init", "run", "run"]
        assert len(fake.started) == 1
        invokers = await (await client.get("/invokers")).json()
        assert sorted(invokers.values()) == ["up", "up"]

    _with_lab("openwhisk", tmp_path, body)


def test_openwhisk_answers_the_reads_a_wsk_client_makes_first(tmp_path):
    """GET action, GET activations (newest first; limit/skip/since/name; 400 with upstream's message on
    a bad limit), GET namespaces, and upstream's error bodies ({error, code}): the calls behind
    ``wsk action get``, ``wsk activation list`` and ``wsk namespace list``."""
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        auth = _basic(user, key)
        base = "/api/v1/namespaces/guest"
        assert await (await client.get("/api/v1/namespaces", headers=auth)).json() == ["guest"]
        assert (await client.get("/api/v1/namespaces")).status == 401
        action = await (await client.get(f"{base}/actions/float-ops", headers=auth)).json()
        assert action["name"] == "float-ops" and action["exec"]["kind"] == "blackbox" and action["limits"]["memory"] > 0
        assert action["limits"]["logs"] == 0  # what the kube backend deploys: no log collection (issue 45, item 3)
        missing = await client.get(f"{base}/actions/nope", headers=auth)
        err = await missing.json()
        assert missing.status == 404 and err["error"] == "The requested resource does not exist." and err["code"]
        ids = []
        for _ in range(3):
            ids.append((await (await client.post(f"{ACTION}?blocking=true", json={}, headers=auth)).json())["activationId"])
        listed = await (await client.get(f"{base}/activations", headers=auth)).json()
        assert [a["activationId"] for a in listed] == ids[::-1]  # newest first
        assert "response" not in listed[0] and "logs" not in listed[0]
        full = await (await client.get(f"{base}/activations?docs=true&limit=1&skip=1", headers=auth)).json()
        assert [a["activationId"] for a in full] == [ids[1]] and full[0]["response"]["statusCode"] == 0
        limits = next(n["value"] for n in full[0]["annotations"] if n["key"] == "limits")
        assert limits["logs"] == 0 and limits["memory"] == action["limits"]["memory"]
        assert await (await client.get(f"{base}/activations?name=other", headers=auth)).json() == []
        later = await (await client.get(f"{base}/activations?since={listed[0]['start'] + 1}", headers=auth)).json()
        assert later == []
        bad = await client.get(f"{base}/activations?limit=300", headers=auth)
        assert bad.status == 400 and (await bad.json())["error"].endswith(
            "The value '300' is not in the range of 0 to 200 for activations.")
        assert (await client.get(f"{base}/activations?skip=x", headers=auth)).status == 400

    _with_lab("openwhisk", tmp_path, body)


@pytest.mark.parametrize(("answer", "code", "kept"), [
    ((200, {"answer": 42}), 0, True),
    ((200, {"error": "ValueError: bad n"}), 1, True),  # the action's own error: the container stays warm
    ((502, {"error": "the action is not initialised"}), 2, False),  # any other status: destroyed
    ((500, {}), 2, False),
])
def test_an_activations_status_code_is_upstreams_table_and_a_developer_error_destroys_the_container(
        tmp_path, answer, code, kept):
    """apache/openwhisk ActivationResult.processRunResponseContent (ef725a6): 200 without error is
    0, 200 with error is 1, any other status is 2; ContainerProxy destroys the container on 2, so
    the next activation is a cold start on a new container."""
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        fake.run_answers.append(answer)
        first = await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))
        record = await first.json()
        assert record["response"]["statusCode"] == code
        assert first.status == (200 if code == 0 else 502)
        again = await (await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))).json()
        assert again["response"]["statusCode"] == 0
        assert len(fake.started) == (1 if kept else 2)

    _with_lab("openwhisk", tmp_path, body)


@pytest.mark.parametrize(("failure", "code", "fault"), [
    ("the function server exited before it answered", 3, "pod-not-ready"),  # scored: the placement's doing
    ("image pull failed: connection refused", 2, "image-pull-failed"),  # void: the registry's
])
def test_a_container_that_cannot_start_answers_upstreams_status_and_message(tmp_path, failure, code, fault):
    """Every failure of the lab carries upstream's statusCode and message (KubernetesContainer.create:
    "Failed to run container with image 'I'." for a pod that does not come up, "Failed to pull
    container image 'I'." for a pull), so the one fault rule (testbed.openwhisk.faults) reads the
    lab's runs as it reads a real cluster's; run/end reports the invokers' state for it."""
    from testbed.openwhisk.faults import classify

    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        fake.start_failures.append(failure)
        answer = await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))
        record = await answer.json()
        assert record["response"]["statusCode"] == code and answer.status == (500 if code == 3 else 502)
        error = f"activation statusCode {code} (x): {record['response']['result']['error']}"
        assert classify(answer.status, error) == fault
        again = await (await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))).json()
        assert again["response"]["statusCode"] == 0  # the next activation gets a new container
        end = await (await client.post("/_lab/run/end", json={"t0": 0.0})).json()
        assert sorted(end["invokers"].values()) == ["up", "up"]

    _with_lab("openwhisk", tmp_path, body)


def test_activations_queued_on_a_cold_concurrent_container_wait_through_its_init(tmp_path):
    """ContainerProxy buffers the runs that arrive during a cold container's ``/init`` and starts
    them after it ("Run during cold init"): the first activation's waitTime ends where ``/init``
    starts and it carries the initTime; the others' waitTime runs to their own run's start, so it
    includes ``/init``, and they carry no initTime (issue 45, item 7)."""
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        fake.init_s = 0.6
        url = "/api/v1/namespaces/_/actions/json-serde?blocking=true"  # concurrency 4: one container takes both
        first = asyncio.ensure_future(client.post(url, json={}, headers=_basic(user, key)))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(client.post(url, json={}, headers=_basic(user, key)))
        records = [await (await r).json() for r in (first, second)]
        notes = [{n["key"]: n["value"] for n in r["annotations"]} for r in records]
        assert len(fake.started) == 1 and fake.calls.count("init") == 1
        assert "initTime" in notes[0] and "initTime" not in notes[1]
        arrived = [r["start"] - n["waitTime"] for r, n in zip(records, notes, strict=True)]
        assert arrived[1] < records[0]["start"], "the second arrived while the container was still cold"
        # its run, and so the end of its waitTime, came after the first's /init (0.6 s)
        assert records[1]["start"] >= records[0]["start"] + 590  # the fake /init sleeps 0.6 s
        assert records[1]["duration"] < 500  # its run only, not the init

    _with_lab("openwhisk", tmp_path, body)


def test_an_invokers_system_errors_turn_it_unhealthy_until_its_health_test(tmp_path):
    """InvokerSupervision (testbed.openwhisk.health): a whisk error (a pod that did not start) is a
    system error of its invoker; just after a (re)start one is enough (the buffer holds the two
    health tests), the invoker is unhealthy and takes nothing, and the health-test action sent at
    once brings it back."""
    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        user, key = (state.read_guest_key() or "").split(":")
        fake.start_failures.append("the function server exited before it answered")
        record = await (await client.post(f"{ACTION}?blocking=true", json={}, headers=_basic(user, key))).json()
        assert record["response"]["statusCode"] == 3
        states = await (await client.get("/invokers")).json()
        assert sorted(states.values()) == ["unhealthy", "up"], states
        await asyncio.sleep(0.3)  # the health test (50 ms) succeeded: healthy again
        assert sorted((await (await client.get("/invokers")).json()).values()) == ["up", "up"]

    _with_lab("openwhisk", tmp_path, body)


@pytest.mark.parametrize("platform", ["knative", "openwhisk"])
def test_the_lab_description_picks_the_controller(tmp_path, platform):
    from testbed.local.controllers.__main__ import controller_for

    spec = parse_cluster(yaml.safe_load(CLUSTER), file="two-nodes.yaml")
    state = LabState(tmp_path / "state")
    labmod.prepare(spec, state, cpu_enforcement="duty-cycle", platform=platform_entry(platform).platform)
    for n in spec.nodes:
        state.write_port(f"agent-{n.name}", 1)
    assert controller_for(state).platform == platform
    lab: dict[str, Any] = {**(state.read_lab() or {}), "platform": "lambda"}
    state.write_lab(lab)
    with pytest.raises(Exception, match="lab.json: field platform: unknown platform 'lambda'"):
        controller_for(state)


@pytest.mark.parametrize("port", [-1, 65536, 99999])
def test_a_port_out_of_range_is_one_line_before_anything_starts(tmp_path, port):
    from testbed.errors import InputError

    with pytest.raises(InputError, match=r"field --port: must be a TCP port in 0\.\.65535"):
        labmod.up("lab-small", state_dir=tmp_path / "state", port=port)
    assert LabState(tmp_path / "state").procs() == []


OPENWHISK_JS = "openwhisk@3.21.9"
"""The official JavaScript client (apache/openwhisk-client-js), as `wsk` users script OpenWhisk."""

CLIENT_SCRIPT = """
const openwhisk = require('openwhisk');
const [apihost, apiKey] = process.argv.slice(2);
const ow = openwhisk({apihost, api_key: apiKey, namespace: 'guest'});
(async () => {
  const out = {};
  out.actions = (await ow.actions.list()).map(a => a.name).sort();
  out.action = (await ow.actions.get({name: 'float-ops'})).name;
  out.result = await ow.actions.invoke({name: 'float-ops', blocking: true, result: true});
  const queued = await ow.actions.invoke({name: 'float-ops'});
  out.queued = typeof queued.activationId;
  const listed = await ow.activations.list({limit: 5});
  out.listed = listed.length;
  out.activation = (await ow.activations.get({name: listed[0].activationId})).activationId === listed[0].activationId;
  out.namespaces = await ow.namespaces.list();
  try { await ow.actions.get({name: 'nope'}); out.missing = 'found'; } catch (e) { out.missing = e.statusCode; }
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e.message); process.exit(1); });
"""


@pytest.mark.integration
def test_the_official_javascript_client_drives_the_embedded_openwhisk(tmp_path):
    """npm's `openwhisk` client against the lab's controller with the guest key: list, get, invoke
    (blocking with the result, and non-blocking), list and get activations, list namespaces, and a
    404 for an action that does not exist -- what `wsk action get`, `wsk activation list` and `wsk
    namespace list` do first."""
    import shutil
    import subprocess

    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed")
    js = tmp_path / "js"
    js.mkdir()
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(js), OPENWHISK_JS],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (js / "client.js").write_text(CLIENT_SCRIPT)

    async def body(client: TestClient, fake: FakeLab, state: LabState) -> None:
        key = state.read_guest_key() or ""
        proc = await asyncio.create_subprocess_exec(
            "node", str(js / "client.js"), str(client.make_url("")).rstrip("/"), key, cwd=js,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        seen = json.loads(out)
        assert seen["actions"] == sorted(seen["actions"]) and "float-ops" in seen["actions"]
        assert seen["action"] == "float-ops" and seen["result"] == {"answer": 42}
        assert seen["queued"] == "string" and seen["listed"] >= 1 and seen["activation"] is True
        assert seen["namespaces"] == ["guest"] and seen["missing"] == 404

    _with_lab("openwhisk", tmp_path, body)
