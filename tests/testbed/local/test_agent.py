"""Node agents as real processes: image pulls cost real time, instances die with their agent,
memory limits kill, and `down` leaves nothing behind."""

from __future__ import annotations

import time

import psutil
import pytest
import requests

from functions.spec import discover_specs
from testbed.cluster import load_cluster
from testbed.local import lab as labmod
from testbed.local.state import LabState

pytestmark = pytest.mark.lab


@pytest.fixture
def agents(cluster_file, state_dir):
    spec = load_cluster(cluster_file)
    state = LabState(state_dir)
    labmod.prepare(spec, state)
    ports = labmod.start_agents(spec, state)
    return spec, state, {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}


def _start(url: str, iid: str, function: str) -> dict:
    return requests.post(f"{url}/instances", json={"id": iid, "function": function}, timeout=120).json()


def test_pull_waits_size_over_bandwidth_then_caches(agents):
    spec, _, urls = agents
    slow = spec.node("slow-0")
    fn = discover_specs()["float-ops"]
    first = _start(urls["slow-0"], "a", "float-ops")
    assert first["ok"], first
    assert first["image_pull_s"] >= fn.image_size_bytes / slow.image_pull_bytes_per_s
    assert fn.image in first["images"]
    second = _start(urls["slow-0"], "b", "float-ops")
    assert second["ok"] and second["image_pull_s"] == 0.0, "a cached image costs nothing"
    cached = _start(urls["fast-0"], "c", "float-ops")
    assert cached["ok"] and cached["image_pull_s"] == 0.0, "fast-0 has float-ops in its spec"
    r = requests.post(first["url"] + "/", json={"n": 1000}, timeout=30)
    assert r.status_code == 200 and r.headers["X-Scoretune-Node"] == "slow-0"
    status = requests.get(f"{urls['slow-0']}/status", timeout=5).json()
    assert {i["id"] for i in status["instances"]} == {"a", "b"}
    # reset: instances gone, cache back to the spec (empty for slow-0)
    reset = requests.post(f"{urls['slow-0']}/reset", json={"images": list(slow.images)}, timeout=30).json()
    assert reset["instances"] == [] and reset["images"] == []


def test_instances_die_with_their_agent(agents):
    _, state, urls = agents
    info = _start(urls["fast-0"], "x", "float-ops")
    assert info["ok"], info
    inst = next(r for r in state.procs("instance") if r.name == "x")
    agent = next(r for r in state.procs("agent") if r.name == "fast-0")
    psutil.Process(agent.pid).kill()
    deadline = time.monotonic() + 10
    while inst.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not inst.alive(), "PDEATHSIG must take the instance down with its agent"
    with pytest.raises(requests.ConnectionError):
        requests.post(info["url"] + "/", json={}, timeout=5)


def test_memory_limit_kills_the_instance(agents):
    _, _, urls = agents
    fn = discover_specs()["trace-driven"]
    info = _start(urls["fast-0"], "m", "trace-driven")
    assert info["ok"], info
    over = int(fn.memory_limit_bytes * 1.2)
    with pytest.raises(requests.ConnectionError):
        requests.post(info["url"] + "/", json={"memory_bytes": over, "cpu_s": 5.0}, timeout=60)
    status = requests.get(f"{urls['fast-0']}/status", timeout=5).json()
    (m,) = [i for i in status["instances"] if i["id"] == "m"]
    assert m["exit_reason"].startswith("OOMKilled"), m


def test_unknown_function_is_refused(agents):
    _, _, urls = agents
    info = _start(urls["fast-0"], "u", "no-such-function")
    assert not info["ok"] and "unknown function" in info["error"]
