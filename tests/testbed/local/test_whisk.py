"""The embedded lab on OpenWhisk (testbed.local.controllers.openwhisk): real action containers behind OpenWhisk's
REST API, run through Locust like a real deployment, and the API's contract: the key, the answers
a client relies on (401, 404, 202 then the record), the invokers' health when a node dies."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import write_workload
from testbed.errors import InputError, TestbedError
from testbed.local import lab as labmod
from testbed.local.backend import LocalBackend
from testbed.local.state import LabState
from testbed.scheduler.config import default_profile

pytestmark = pytest.mark.lab

ACTIONS = "/api/v1/namespaces/_/actions"



def test_a_run_on_the_openwhisk_lab_is_recorded_from_its_activations(small_workload, cluster_file, state_dir, tmp_path):
    wl = small_workload(8.0)
    backend = LocalBackend(cluster_file, state_dir=state_dir, platform="openwhisk")
    key_file = Path(state_dir) / "openwhisk" / "auth.guest"
    try:
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        assert backend.handle.guest_key.count(":") == 1
        backend.reset()
        backend.apply(default_profile())
        result = backend.run(wl, tmp_path / "run")
    finally:
        backend.close()
    assert not key_file.exists(), "down forgets the lab's key"
    s, req, pl = result.summary, result.requests, result.placements
    assert s["ok"] == s["lab_scale"]["requests_replayed"], s
    assert s["platform"] == "openwhisk" and s["backend"] == "local"
    # every request was an activation: its id and waitTime recorded, its node and pod from the result
    assert req["activation_id"].notna().all() and (req["wait_s"] >= 0).all()
    assert req["pod"].str.startswith("wsk").all()
    placed = dict(zip(pl["pod"], pl["node"], strict=True))
    assert all(placed[p] == n for p, n in zip(req["pod"], req["node"], strict=True))
    # both actions start with no container: each one's first activation is cold, with an initTime,
    # and waited at least for its pod to be seen Ready (the invoker polls once a second)
    cold = req[req["cold_start"].astype(bool)]
    assert set(cold["function"]) == {"float-ops", "dynamic-html"}
    assert cold["init_s"].notna().all() and (cold["wait_s"] >= 0.9).all()
    assert req.loc[~req["cold_start"].astype(bool), "init_s"].isna().all()
    # one pod per container: the action pods the invokers created, each placed once
    assert pl["pod"].is_unique and set(pl["function"]) == {"float-ops", "dynamic-html"}
    assert not LabState(state_dir).live_procs()


def test_the_api_answers_as_openwhisk_does(cluster_file, state_dir):
    handle = labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk")
    user, key = handle.guest_key.split(":")
    url = handle.url
    s = requests.Session()
    assert s.post(f"{url}{ACTIONS}/float-ops?blocking=true", json={}, auth=(user, "wrong")).status_code == 401
    assert s.post(f"{url}{ACTIONS}/float-ops?blocking=true", json={}).status_code == 401
    assert s.post(f"{url}{ACTIONS}/no-such-fn?blocking=true", json={}, auth=(user, key)).status_code == 404
    assert s.post(f"{url}{ACTIONS}/float-ops?blocking=true", data=b"[1]", auth=(user, key)).status_code == 400
    listed = s.get(f"{url}{ACTIONS}", auth=(user, key)).json()
    assert "float-ops" in {a["name"] for a in listed}
    # non-blocking: 202 and the id at once; the record is there once the activation ended
    r = s.post(f"{url}{ACTIONS}/float-ops", json={}, auth=(user, key))
    assert r.status_code == 202
    act = r.json()["activationId"]
    deadline = time.monotonic() + 60
    while (got := s.get(f"{url}/api/v1/namespaces/_/activations/{act}", auth=(user, key))).status_code == 404:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    record = got.json()
    assert record["response"]["statusCode"] == 0 and record["response"]["success"]
    notes = {a["key"]: a["value"] for a in record["annotations"]}
    assert notes["initTime"] >= 0 and notes["waitTime"] >= 900 and notes["kind"] == "blackbox"
    assert record["duration"] >= notes["initTime"]
    # result=true answers the result only
    r = s.post(f"{url}{ACTIONS}/float-ops?blocking=true&result=true", json={}, auth=(user, key))
    assert r.status_code == 200 and r.json()["scoretune"]["cold"] is False
    # the invokers run one per node; a node that dies takes its invoker down and its containers
    invokers = s.get(f"{url}/invokers").json()
    assert sorted(invokers.values()) == ["up", "up"]
    status = handle.client.status()
    assert status["platform"] == "openwhisk"
    node = status["instances"][0]["node"]
    agent = next(n for n in status["nodes"] if n["name"] == node)
    os.kill(agent["agent_pid"], 9)
    deadline = time.monotonic() + 30
    while "down" not in s.get(f"{url}/invokers").json().values():
        assert time.monotonic() < deadline, "the invoker on the lost node stays up"
        time.sleep(0.2)
    status = handle.client.status()
    assert not status["instances"] and any(e["event"] == "node_lost" for e in status["events"])
    # the other invoker takes the activations; a new container goes to the node that is left
    r = s.post(f"{url}{ACTIONS}/float-ops?blocking=true", json={}, auth=(user, key))
    assert r.status_code == 200, r.text
    assert r.json()["response"]["result"]["scoretune"]["node"] != node


def test_attaching_to_a_lab_of_another_platform_is_refused(cluster_file, state_dir):
    labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk")
    with pytest.raises(TestbedError, match="serves the functions with openwhisk, not knative"):
        LocalBackend(cluster_file, state_dir=state_dir, attach=True)
    with pytest.raises(InputError, match="unknown platform 'lambda'"):
        labmod.up(cluster_file, state_dir=Path(state_dir).parent / "other", port=0, platform="lambda")


def test_tune_on_the_openwhisk_lab_end_to_end(small_workload, cluster_file, tmp_path, monkeypatch):
    wl = small_workload(duration_s=6.0)
    write_workload(wl, tmp_path / "wl.parquet")
    out = tmp_path / "exp"
    monkeypatch.setenv("SCORETUNE_LAB_DIR", str(tmp_path / "lab"))
    result = CliRunner().invoke(app, ["tune", "--backend", "local", "--platform", "openwhisk", "--cluster",
                                      str(cluster_file), "--workload", str(tmp_path / "wl.parquet"), "--method",
                                      "random", "--steps", "1", "--confirm", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "runs" / "step-001" / "cand-0" / "summary.json").read_text())
    assert run["platform"] == "openwhisk" and run["ok"] == run["lab_scale"]["requests_replayed"]
    assert json.loads((out / "config.json").read_text())["platform"] == "openwhisk"


def test_a_reset_ends_every_open_activation_and_leaves_no_container(cluster_file, state_dir):
    """An activation still waiting for its container when the lab resets ends as a whisk error,
    and nothing of the old state comes back afterwards: no container, no pod bound."""
    handle = labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk")
    user, key = handle.guest_key.split(":")
    s = requests.Session()
    ids = [s.post(f"{handle.url}{ACTIONS}/{fn}", json={}, auth=(user, key)).json()["activationId"]
           for fn in ("float-ops", "dynamic-html")]
    handle.client.reset()
    time.sleep(2.5)  # longer than a container's start and the invoker's readiness poll
    status = handle.client.status()
    assert status["instances"] == [] and status["buffered"] == 0
    # the records are gone with the reset; a fresh activation runs cold on a fresh container
    for act in ids:
        assert s.get(f"{handle.url}/api/v1/namespaces/_/activations/{act}", auth=(user, key)).status_code == 404
    r = s.post(f"{handle.url}{ACTIONS}/float-ops?blocking=true", json={}, auth=(user, key))
    assert r.status_code == 200 and r.json()["response"]["result"]["scoretune"]["cold"] is True
    assert len(handle.client.status()["instances"]) == 1


def test_cli_up_status_down_on_openwhisk(cluster_file, state_dir):
    runner = CliRunner()
    up = runner.invoke(app, ["testbed", "up", "--platform", "openwhisk", "--cluster", str(cluster_file), "--port", "0",
                             "--state-dir", str(state_dir)])
    assert up.exit_code == 0, up.output
    assert "(openwhisk)" in up.output and "auth.guest" in up.output
    st = runner.invoke(app, ["testbed", "status", "--state-dir", str(state_dir)])
    assert st.exit_code == 0, st.output
    assert "(openwhisk)" in st.output and "invoker0/0 up" in st.output
    bad = runner.invoke(app, ["testbed", "up", "--platform", "lambda", "--cluster", str(cluster_file),
                              "--state-dir", str(Path(state_dir).parent / "x")])
    assert bad.exit_code == 2 and "lambda" in bad.output
    down = runner.invoke(app, ["testbed", "down", "--state-dir", str(state_dir)])
    assert down.exit_code == 0 and "stopped 1 controller, 2 agent(s)" in down.output
    assert not (Path(state_dir) / "openwhisk" / "auth.guest").exists()


def test_a_full_invoker_buffers_and_recreates_as_openwhisks_pool_does(cluster_file, state_dir):
    """One invoker with room for one 128 MB container (ContainerPool.scala): a second action's
    activation while the first runs waits in the invoker's buffer; once the first ends, its idle
    container is removed (its pod deleted) to make room, and the second runs cold in a new one."""
    import threading

    handle = labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk",
                       openwhisk={"invokers": 1, "user_memory_mb": 128})
    user, key = handle.guest_key.split(":")
    answers: dict[str, dict] = {}

    def invoke(fn: str, params: dict) -> None:
        r = requests.post(f"{handle.url}{ACTIONS}/{fn}?blocking=true", json=params, auth=(user, key), timeout=90)
        answers[fn] = {"status": r.status_code, **r.json()}

    first = threading.Thread(target=invoke, args=("float-ops", {"n": 2_000_000}))
    first.start()
    time.sleep(0.5)  # float-ops holds the invoker's only memory slot
    invoke("dynamic-html", {})
    first.join(timeout=90)
    a, b = answers["float-ops"], answers["dynamic-html"]
    assert a["status"] == b["status"] == 200, answers
    notes = {x["key"]: x["value"] for x in b["annotations"]}
    assert "initTime" in notes and b["response"]["result"]["scoretune"]["cold"] is True
    assert b["start"] >= a["end"] - 5, "the second started only once the first had ended"
    status = handle.client.status()
    assert [i["function"] for i in status["instances"]] == ["dynamic-html"] and status["buffered"] == 0
    placed = handle.client.end_run(0.0)["placements"]
    gone = [p for p in placed if p["function"] == "float-ops"]
    assert len(gone) == 1 and gone[0]["deleted_s"] is not None, placed


def test_bad_openwhisk_settings_are_refused_before_anything_starts(cluster_file, state_dir):
    with pytest.raises(InputError, match="unknown OpenWhisk setting"):
        labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk", openwhisk={"prewarm": 2})
    with pytest.raises(Exception, match="user memory >= 128 MB"):
        labmod.up(cluster_file, state_dir=state_dir, port=0, platform="openwhisk", openwhisk={"user_memory_mb": 64})
    assert LabState(state_dir).procs() == []
