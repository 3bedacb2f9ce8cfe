"""Pure parts of the container runtime: a pod's OCI runtime spec, the network plan, whiteouts,
the runtime's choice (no root or packages needed)."""

from __future__ import annotations

import ipaddress
import os
import stat
from pathlib import Path

import pytest

from testbed.local import lab as labmod
from testbed.local.containers import network, pods, tools
from testbed.local.containers.store import convert_whiteouts

IMAGE_CONFIG = {"config": {"Entrypoint": ["python3", "-m", "functions.runtime"], "Cmd": ["--function", "matmul"],
                           "Env": ["PATH=/usr/bin", "OMP_NUM_THREADS=1"], "User": "10001", "WorkingDir": "/app"}}


def spec(**kw):
    args = dict(args=["--host", "10.213.1.10", "--port", "8080"], env={"POD_NAME": "p", "OMP_NUM_THREADS": "2"},
                netns_path="/var/run/netns/st-x-n0", cgroups_path="/scoretune-lab-x/node-a/pod-1",
                cpu_quota_milli=500, memory_limit_bytes=384 * 2**20, hostname="p")
    args.update(kw)
    return pods.runtime_spec(IMAGE_CONFIG, **args)


def test_a_pod_runs_the_images_command_with_the_agents_arguments():
    s = spec()
    assert s["process"]["args"] == ["python3", "-m", "functions.runtime", "--function", "matmul", "--host", "10.213.1.10", "--port", "8080"]
    env = dict(e.split("=", 1) for e in s["process"]["env"])
    assert env["OMP_NUM_THREADS"] == "2" and env["PATH"] == "/usr/bin" and env["POD_NAME"] == "p"
    assert s["process"]["user"] == {"uid": 10001, "gid": 0} and s["process"]["cwd"] == "/app"
    assert s["process"]["terminal"] is False and s["process"]["noNewPrivileges"] is True


def test_a_pod_joins_its_nodes_namespace_and_cgroup_with_its_own_limits():
    s = spec(cpu_quota_milli=250, memory_limit_bytes=100 * 2**20)
    net = [n for n in s["linux"]["namespaces"] if n["type"] == "network"]
    assert net == [{"type": "network", "path": "/var/run/netns/st-x-n0"}]
    assert s["linux"]["cgroupsPath"].startswith("/scoretune-lab-x/node-a/")
    assert s["linux"]["resources"]["cpu"] == {"quota": 25_000, "period": 100_000}
    assert s["linux"]["resources"]["memory"]["limit"] == 100 * 2**20
    assert {"type": "pid"} in s["linux"]["namespaces"] and {"type": "mount"} in s["linux"]["namespaces"]


def test_the_network_plan_fits_interface_names_and_its_subnet():
    net = network.LabNetwork.plan("0123abcd", {"fast-0": 5e7, "fast-1": 5e7, "a-very-long-node-name-indeed": 1e6},
                                  subnet=ipaddress.ip_network("10.213.7.0/24"))
    names = [net.bridge, net.registry_veth, *(n.host_veth for n in net.nodes.values())]
    assert all(len(x) <= 15 for x in names), names  # IFNAMSIZ
    addrs = [net.bridge_address, net.registry_address, *(n.address for n in net.nodes.values())]
    assert len(set(addrs)) == len(addrs)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("10.213.7.0/24") for a in addrs)
    assert all(n.netns.startswith("st-0123abcd-") for n in net.nodes.values())
    assert network.LabNetwork.from_dict(net.to_dict()) == net


def test_the_lab_subnet_overlaps_nothing_the_machine_has():
    used = [ipaddress.ip_network("10.213.0.0/23"), ipaddress.ip_network("10.213.3.0/24")]
    assert network.free_subnet(0, used) == ipaddress.ip_network("10.213.2.0/24")
    with pytest.raises(network.NetworkError):
        network.free_subnet(0, [ipaddress.ip_network("10.213.0.0/16")])


@pytest.mark.skipif(os.geteuid() != 0, reason="overlay whiteouts are character devices: mknod needs root")
def test_oci_whiteouts_become_overlay_whiteouts(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / ".wh.passwd").write_text("")
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / ".wh..wh..opq").write_text("")
    assert convert_whiteouts(tmp_path) == 2
    st = (tmp_path / "etc" / "passwd").lstat()
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(0, 0)
    assert not (tmp_path / "opt" / ".wh..wh..opq").exists()


def test_the_runtime_choice_says_why(monkeypatch):
    monkeypatch.setattr(tools, "unavailable", lambda: "the container runtime needs root")
    assert tools.choose("auto") == ("process", "the container runtime needs root")
    assert tools.choose("process") == ("process", "asked for")
    with pytest.raises(RuntimeError, match="needs root"):
        tools.choose("containers")
    monkeypatch.setattr(tools, "unavailable", lambda: None)
    assert tools.choose("auto")[0] == "containers"


def test_a_missing_package_is_named(monkeypatch):
    monkeypatch.setattr(tools.os, "geteuid", lambda: 0)
    monkeypatch.setattr(tools.shutil, "which", lambda exe: None if exe == "skopeo" else f"/usr/bin/{exe}")
    why = tools.unavailable()
    assert "skopeo" in why and "make setup-containers" in why and "\n" not in why


def test_containers_asked_for_where_they_cannot_run_is_one_line(tmp_path, monkeypatch):
    from testbed.errors import TestbedError

    monkeypatch.setattr(tools, "unavailable", lambda: "the container runtime needs Debian's skopeo: `make setup-containers`")
    cluster = tmp_path / "c.yaml"
    cluster.write_text("name: c\ngroups: [{name: n, cpu: '1', memory: 1Gi}]\n")
    with pytest.raises(TestbedError) as err:
        labmod.up(cluster, state_dir=tmp_path / "s", port=0, runtime="containers")
    assert "skopeo" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "s" / "lab.json").exists()


def test_a_pod_the_lab_failed_to_start_voids_the_run_an_oom_kill_does_not():
    from testbed.local.backend import lab_faults

    events = [
        {"event": "instance_failed", "node": "a", "reason": "image pull failed: skopeo: connection refused"},
        {"event": "instance_failed", "node": "b", "reason": "instance did not start: runc could not start x: ..."},
        {"event": "instance_failed", "node": "b", "reason": "instance did not become ready: OOMKilled (container memory limit) during readyz"},
        {"event": "node_lost", "node": "c"},
        {"event": "instance_failed", "node": "c", "reason": "agent unreachable: ConnectionRefusedError()"},
    ]
    assert lab_faults(events) == ["a: image pull failed: skopeo: connection refused",
                                  "b: instance did not start: runc could not start x: ..."]
    assert lab_faults(events[2:]) == []  # an OOM kill, a node lost: the profile's outcome, recorded


def test_a_reset_waits_for_a_pull_in_flight_so_no_image_is_left_without_its_layers(tmp_path: Path, monkeypatch):
    """The agent resets a node's store between steps while the task that was starting a pod may still
    be unpacking its image. The reset must not delete layers under that fetch: after both, every
    image the store says is complete has every layer unpacked (the container lab once voided a whole
    experiment on "python3 not found" and "special device overlay does not exist" from this race)."""
    import asyncio

    from testbed.local.containers import store as store_mod

    layers = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
    node = store_mod.NodeStore(tmp_path / "node", netns="none", registry="none", enter_node=lambda: None)
    second_layer = asyncio.Event()
    go_on = asyncio.Event()

    async def fake_exec(self, args, what, *, netns):
        if args[0] == "tar" and "b" * 64 in args[-4] + args[-3]:  # unpacking the second layer
            second_layer.set()
            await go_on.wait()

    monkeypatch.setattr(store_mod.NodeStore, "_exec", fake_exec)
    monkeypatch.setattr(store_mod.NodeStore, "_manifest_layers", lambda self, tag: layers)
    monkeypatch.setattr(store_mod, "blob_path", lambda layout, digest: tmp_path / digest.split(":")[1])

    async def race() -> None:
        fetch = asyncio.create_task(node.fetch("fn", "reg/fn:1", "fn"))
        await second_layer.wait()  # the first layer is unpacked, the second in progress
        reset = asyncio.create_task(node.reset_when_idle(set()))
        await asyncio.sleep(0.05)
        go_on.set()
        await asyncio.gather(fetch, reset)

    asyncio.run(race())
    for image, digests in node.images.items():
        assert all(node.layer_dir(d).is_dir() for d in digests), image
    assert node.images == {}  # the reset came after the fetch: nothing is left registered
