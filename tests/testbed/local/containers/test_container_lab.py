"""The embedded lab on real containers (root, runc, Debian's registry, skopeo, umoci, mmdebstrap):
real pulls through shaped links, layers shared between images, pods in the node's namespace and
cgroups, the kernel's OOM killer, both platforms, and nothing left behind -- not even after the
controller is killed. `make setup-containers` installs the packages; `make test-rest` runs these."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
import requests

from testbed.local import lab as labmod
from testbed.local.containers import network, pods, tools
from testbed.local.state import LabState

WHY = tools.unavailable()
pytestmark = [pytest.mark.containers, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

CLUSTER = """\
name: ct-lab
description: a warm node holding float-ops, a cold one behind a 20Mi/s link (hardware file)
groups:
  - {name: warm, count: 1, cpu: "1", memory: 2Gi, images: [ghcr.io/scoretune/fn-float-ops:0.1.0]}
  - {name: cold, count: 1, cpu: "1", memory: 2Gi}
"""
HARDWARE = """\
cluster: ct-lab
nodes:
  cold: {link: 20Mi}
"""
LINK = 20 * 2**20


def _files(tmp: Path) -> tuple[Path, Path]:
    (tmp / "ct-lab.yaml").write_text(CLUSTER)
    (tmp / "hw.yaml").write_text(HARDWARE)
    return tmp / "ct-lab.yaml", tmp / "hw.yaml"


def leftovers(state_root: Path, lab: dict) -> list[str]:
    """Everything of this lab still on the machine: containers, namespaces, links, mounts, processes, cgroups."""
    out = []
    out += [f"container {c['id']}" for c in pods.Runc(state_root / "containers" / "runc").list()]
    netns, links = network.lab_objects(lab["containers"]["lab_id"])
    out += [f"netns {n}" for n in netns] + [f"link {x}" for x in links]
    out += [f"mount {m}" for m in pods.lab_mounts(state_root)]
    group = lab["cpu"]["lab_group"]
    out += [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{group}")]
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if str(state_root) in cmd and p.info["pid"] != os.getpid():
            out.append(f"process {p.info['pid']}: {cmd[:120]}")
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One container lab for the module (Knative), torn down (and checked clean) at its end."""
    tmp = tmp_path_factory.mktemp("ct")
    cluster, hw = _files(tmp)
    root = tmp / "state"
    handle = labmod.up(cluster, state_dir=root, port=0, runtime="containers", hardware=hw)
    info = LabState(root).read_lab()
    yield handle, root, info
    labmod.down(root)
    assert not leftovers(root, info)


def _agent(root: Path, node: str) -> str:
    return f"http://127.0.0.1:{LabState(root).read_port(f'agent-{node}')}"


def _start(root: Path, node: str, iid: str, function: str, **limits) -> dict:
    body = {"id": iid, "function": function, **({"limits": limits} if limits else {})}
    return requests.post(f"{_agent(root, node)}/instances", json=body, timeout=180).json()


def test_a_cold_start_pulls_through_the_nodes_link_and_shares_layers(lab):
    _, root, info = lab
    sizes = {e["function"]: e["size"] for e in info["containers"]["images"].values()}
    first = _start(root, "cold-0", "ct-float", "float-ops")
    assert first["ok"], first
    # the whole image crossed the 20Mi/s token bucket: not faster than the link allows
    assert first["bytes_pulled"] > 0.9 * sizes["float-ops"]
    assert first["download_s"] >= 0.8 * first["bytes_pulled"] / LINK
    assert first["unpack_s"] > 0 and first["image_pull_s"] == pytest.approx(first["download_s"] + first["unpack_s"])
    # dynamic-html shares the base and runtime layers: only its own layers come down
    second = _start(root, "cold-0", "ct-html", "dynamic-html")
    assert second["ok"], second
    assert 0 < second["bytes_pulled"] < 0.1 * sizes["dynamic-html"]
    assert second["image_pull_s"] < first["image_pull_s"]
    # the warm node holds float-ops: no pull at all
    warm = _start(root, "warm-0", "ct-warm", "float-ops")
    assert warm["ok"] and warm["bytes_pulled"] == 0 and warm["image_pull_s"] == 0


def test_a_reset_empties_the_store_but_for_the_nodes_own_images(lab):
    _, root, info = lab
    sizes = {e["function"]: e["size"] for e in info["containers"]["images"].values()}
    warm_image = next(img for img, e in info["containers"]["images"].items() if e["function"] == "float-ops")
    assert _start(root, "cold-0", "r-1", "aes")["ok"]
    requests.delete(f"{_agent(root, 'cold-0')}/instances/r-1", timeout=60)
    requests.post(f"{_agent(root, 'cold-0')}/reset", json={"images": []}, timeout=120).raise_for_status()
    again = _start(root, "cold-0", "r-2", "aes")
    assert again["ok"] and again["bytes_pulled"] > 0.9 * sizes["aes"]  # gone: pulled whole again
    assert again["unpack_s"] > 0
    status = requests.post(f"{_agent(root, 'warm-0')}/reset", json={"images": [warm_image]}, timeout=120).json()
    assert status["images"] == [warm_image]
    kept = _start(root, "warm-0", "r-3", "float-ops")
    assert kept["ok"] and kept["bytes_pulled"] == 0 and kept["image_pull_s"] == 0


def test_a_pod_serves_on_its_nodes_address_from_the_nodes_cgroup(lab):
    _, root, info = lab
    got = _start(root, "warm-0", "ct-addr", "float-ops")
    assert got["ok"], got
    node_addr = info["containers"]["network"]["nodes"]["warm-0"]["address"]
    assert got["url"] == f"http://{node_addr}:{got['port']}"
    assert requests.get(f"{got['url']}/healthz", timeout=5).json()["function"] == "float-ops"
    status = requests.get(f"{_agent(root, 'warm-0')}/status", timeout=5).json()
    pid = next(i["pid"] for i in status["instances"] if i["id"] == "ct-addr")
    cg = Path(f"/proc/{pid}/cgroup").read_text()
    assert f"{info['cpu']['lab_group']}/node-warm-0/pod-ct-addr" in cg  # start-up ran under the node's quota
    netns = info["containers"]["network"]["nodes"]["warm-0"]["netns"]
    assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/var/run/netns/{netns}").st_ino


def test_a_pod_above_its_memory_limit_is_oom_killed_by_the_kernel(lab):
    _, root, _ = lab
    got = _start(root, "warm-0", "ct-oom", "float-ops", memory_bytes=12 * 2**20)
    assert not got["ok"]
    assert "OOMKilled (container memory limit)" in got["error"], got


def test_requests_go_through_the_ingress_to_container_pods(lab):
    handle, _, _ = lab
    for fn in ("float-ops", "dynamic-html", "float-ops"):
        r = requests.post(handle.url, headers={"X-Scoretune-Function": fn}, data=b"{}", timeout=120)
        assert r.status_code == 200, r.text


def test_the_lab_shows_the_scheduler_the_real_image_sizes(lab):
    from functions.spec import discover_specs
    from testbed.local.controllers.base import with_image_sizes

    _, _, info = lab
    specs = with_image_sizes(discover_specs(), info["containers"]["images"])
    built = {e["function"]: e["size"] for e in info["containers"]["images"].values()}
    assert {n: s.image_size_bytes for n, s in specs.items()} == built
    assert built["matmul"] > built["float-ops"]  # numpy's layer


def test_a_failed_pull_and_a_killed_controller_leave_nothing_behind(tmp_path):
    cluster, hw = _files(tmp_path)
    root = tmp_path / "state"
    handle = labmod.up(cluster, state_dir=root, port=0, runtime="containers", hardware=hw)
    state = LabState(root)
    info = state.read_lab()
    try:
        assert _start(root, "cold-0", "k-1", "dynamic-html")["ok"]
        registry = state.procs("registry")[0]
        os.kill(registry.pid, signal.SIGKILL)
        failed = _start(root, "cold-0", "k-2", "matmul")  # not on the node: needs the registry
        assert not failed["ok"] and "image pull failed" in failed["error"], failed
        ctrl = state.procs("controller")[0]
        os.kill(ctrl.pid, signal.SIGKILL)
        # the agents outlive the controller for its grace period, then take the whole lab down
        deadline = time.monotonic() + 90
        while leftovers(root, info) and time.monotonic() < deadline:
            time.sleep(1)
        assert not leftovers(root, info)
        assert state.read_lab() is None
    finally:
        labmod.down(root)
    assert not leftovers(root, info)
    del handle


def test_openwhisk_runs_on_containers(tmp_path):
    cluster, hw = _files(tmp_path)
    root = tmp_path / "state"
    handle = labmod.up(cluster, state_dir=root, port=0, runtime="containers", hardware=hw, platform="openwhisk")
    info = LabState(root).read_lab()
    try:
        user, key = handle.guest_key.split(":")
        r = requests.post(f"{handle.url}/api/v1/namespaces/_/actions/float-ops?blocking=true&result=true",
                          json={}, auth=(user, key), timeout=120)
        assert r.status_code == 200, r.text
        assert json.loads(r.text)["n"] > 0
        status = handle.client.status()
        assert any(i["state"] in ("ready", "idle", "busy", "warm") or i.get("url") for i in status["instances"])
    finally:
        labmod.down(root)
    assert not leftovers(root, info)
