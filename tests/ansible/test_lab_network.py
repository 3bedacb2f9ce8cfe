"""The lab's network as the roles compute it, for a lab of three machines (issue 35, items 4-5):
the host firewall's rules (the ports each group needs, from the inventory's addresses only unless
a lab network is set, nothing etcd or the controllers listen on, the pod network trusted), one
flanneld --iface per node address, and the overlay MTU check run for real with a fake ``ip`` and
a fake sysfs, and the clock check with a fake ``chronyc``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
HOSTS = {"cp": "10.0.0.10", "w1": "10.0.0.11", "gen": "10.0.0.20"}


def _inventory(tmp_path: Path) -> Path:
    inventory = {"all": {"children": {
        "control_plane": {"hosts": {"cp": {}}}, "workers": {"hosts": {"w1": {}}}, "loadgen": {"hosts": {"gen": {}}},
        "k8s_cluster": {"children": {"control_plane": {}, "workers": {}}}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    for host, address in HOSTS.items():
        for group in inventory["all"]["children"].values():
            if host in group.get("hosts", {}):
                group["hosts"][host] = {"scoretune_node_address": address}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _play(tmp_path: Path, role: str, msg: dict, extra: dict | None = None, hosts: str = "all") -> dict[str, dict]:
    """What ``msg`` evaluates to on each host, with the role's defaults and the lab's settings."""
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": hosts, "gather_facts": False,
        "vars_files": [str(ANSIBLE / "group_vars" / "all.yml"), str(ANSIBLE / "roles" / role / "defaults" / "main.yml")],
        "tasks": [{"ansible.builtin.debug": {"msg": msg}}],
    }]))
    done = _run(tmp_path, "play.yml", extra or {})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout[done.stdout.index("{"):])
    return {host: r["msg"] for host, r in out["plays"][0]["tasks"][0]["hosts"].items()}


def _run(tmp_path: Path, playbook: str, extra: dict, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ) | {"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
                               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), **(env or {})}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(_inventory(tmp_path)), str(tmp_path / playbook),
                           "-e", json.dumps(extra)], capture_output=True, text=True, env=full, timeout=300)


def _rules(tmp_path: Path, **extra: str) -> dict[str, dict]:
    return _play(tmp_path, "lab_firewall", {"rules": "{{ lab_firewall_rules }}",
                                            "trusted": "{{ lab_firewall_trusted_interfaces + lab_firewall_trusted_cidrs }}"},
                 extra)


def test_ports_are_opened_to_the_lab_machines_only_and_the_pod_network_is_trusted(tmp_path):
    rules = _rules(tmp_path)
    addresses = sorted(HOSTS.values())
    cp = {tuple(r) for r in rules["cp"]["rules"]}
    assert {p for p, _ in cp} == {"6443/tcp", "10250/tcp", "8472/udp", "31080/tcp"}  # no 2379-2380, 10257, 10259
    assert cp == {(p, a) for p in ("6443/tcp", "10250/tcp", "8472/udp", "31080/tcp") for a in addresses}
    assert {p for p, _ in map(tuple, rules["w1"]["rules"])} == {"10250/tcp", "10256/tcp", "30000:32767/tcp", "8472/udp"}
    assert {tuple(r) for r in rules["gen"]["rules"]} == {("5557/tcp", a) for a in addresses}
    assert "any" not in {s for r in rules.values() for _, s in r["rules"]}
    assert rules["cp"]["trusted"] == ["cni0", "flannel.1", "10.244.0.0/16", "10.96.0.0/12"]


def test_a_lab_network_replaces_the_addresses(tmp_path):
    rules = _rules(tmp_path, scoretune_lab_network="10.0.0.0/24")
    assert {s for r in rules.values() for _, s in r["rules"]} == {"10.0.0.0/24"}


def test_flanneld_gets_one_iface_per_node_address(tmp_path):
    ifaces = _play(tmp_path, "cni_flannel", {"ifaces": "{{ cni_flannel_ifaces }}"}, hosts="cp")["cp"]["ifaces"]
    assert ifaces == ["10.0.0.10", "10.0.0.11"]  # the cluster's nodes; the load generator is not one
    tasks = yaml.safe_load((ANSIBLE / "roles" / "cni_flannel" / "tasks" / "main.yml").read_text())
    patch = next(t for t in tasks if t["name"].startswith("Point flanneld"))
    args = patch["kubernetes.core.k8s"]["definition"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--iface=" in args and "iface-can-reach" not in args


FAKE_IP = """#!/bin/sh
# ip -o -4 addr show to ADDR: the interface holding ADDR, as iproute2 prints it
echo "2: ens3    inet $6/24 brd 10.0.0.255 scope global ens3\\       valid_lft forever preferred_lft forever"
"""


@pytest.mark.parametrize(("overlay", "ok"), [(1450, True), (65486, False)])
def test_the_overlay_mtu_check_catches_flannel_on_lo(tmp_path, overlay, ok):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ip").write_text(FAKE_IP)
    (bindir / "ip").chmod(0o755)
    sysfs = tmp_path / "net"
    for iface, mtu in (("ens3", 1500), ("flannel.1", overlay)):
        (sysfs / iface).mkdir(parents=True)
        (sysfs / iface / "mtu").write_text(f"{mtu}\n")
    (tmp_path / "check.yml").write_text(yaml.safe_dump([{
        "hosts": "w1", "gather_facts": False,
        "vars_files": [str(ANSIBLE / "group_vars" / "all.yml")],
        "tasks": [{"ansible.builtin.include_role": {"name": "cni_flannel", "tasks_from": "check_mtu"}}]}]))
    done = _run(tmp_path, "check.yml", {"cni_flannel_sysfs_net": str(sysfs), "scoretune_node_address": "10.0.0.11"},
                env={"PATH": f"{bindir}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert (done.returncode == 0) == ok, done.stdout[-3000:]
    if not ok:
        assert "w1: flannel.1 has MTU 65486, expected 1450 (ens3" in done.stdout


FAKE_CHRONYC = """#!/bin/sh
# chronyc -c tracking: Ref-ID,name,stratum,ref time,system time (the offset, s),last offset,...
echo "C0A80001,ntp.lab,2,1796500000.123,$FAKE_OFFSET,0.000001,0.000010,-3.210,0.001,0.010,0.002,0.001,64.2,Normal"
"""


@pytest.mark.parametrize(("offset", "ok"), [("0.000021", True), ("-0.000400", True), ("-0.350000", False)])
def test_the_clock_check_refuses_a_host_past_the_bound(tmp_path, offset, ok):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "chronyc").write_text(FAKE_CHRONYC)
    (bindir / "chronyc").chmod(0o755)
    (tmp_path / "check.yml").write_text(yaml.safe_dump([{
        "hosts": "gen", "gather_facts": False, "vars_files": [str(ANSIBLE / "group_vars" / "all.yml")],
        "tasks": [{"ansible.builtin.include_role": {"name": "lab_clock", "tasks_from": "check"}}]}]))
    done = _run(tmp_path, "check.yml", {}, env={"PATH": f"{bindir}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
                                                 "FAKE_OFFSET": offset})
    assert (done.returncode == 0) == ok, done.stdout[-3000:]
    if not ok:
        assert "gen: the clock is -0.35 s off NTP time (bound 0.05 s" in done.stdout


def test_every_host_gets_chrony_before_anything_else():
    for playbook, first in (("site.yml", "Prepare every node"), ("loadgen.yml", "Install the load generators")):
        plays = yaml.safe_load((ANSIBLE / playbook).read_text())
        play = next(p for p in plays if p["name"].startswith(first))
        assert play["roles"][0] == "lab_clock", playbook


CHART_KEYS = {"789c46b1-71f6-4ed5-8c54-816aa4f8c502:abczO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP",
              "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"}
"""openwhisk-deploy-kube's helm/openwhisk/values.yaml whisk.auth: published, so anyone could use them."""


def test_openwhisk_credentials_are_generated_once_owner_only_and_never_the_charts(tmp_path):
    import re
    import stat

    auth = tmp_path / "lab" / "openwhisk"
    (tmp_path / "creds.yml").write_text(yaml.safe_dump([{
        "hosts": "cp", "gather_facts": False, "vars_files": [str(ANSIBLE / "group_vars" / "all.yml")],
        "tasks": [{"ansible.builtin.include_role": {"name": "openwhisk", "tasks_from": "credentials"}},
                  {"ansible.builtin.debug": {"msg": "{{ openwhisk_auth | length }}"}}]}]))
    for _ in range(2):  # a rerun keeps the lab's credentials
        done = _run(tmp_path, "creds.yml", {"openwhisk_auth_dir": str(auth)})
        assert done.returncode == 0, done.stdout[-3000:]
        keys = {n: (auth / f"auth.{n}").read_text().strip() for n in ("system", "guest")}
        if _ == 0:
            first = keys
    assert keys == first and keys["system"] != keys["guest"] and not set(keys.values()) & CHART_KEYS
    for name, key in keys.items():
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[A-Za-z0-9]{64}", key), key
        assert stat.S_IMODE((auth / f"auth.{name}").stat().st_mode) == 0o600
    assert stat.S_IMODE(auth.stat().st_mode) == 0o700
    assert key not in done.stdout  # no_log: the credentials never reach the log


def test_openwhisk_blackbox_actions_may_use_every_invoker():
    """The suite's actions are blackbox actions; the chart's blackboxFraction 10 % gives them
    max(1, floor(n * 0.1)) invokers (ShardingContainerPoolBalancerState.updateInvokers): one of
    up to nine. The role's default must let every invoker take them."""
    from testbed.openwhisk.balancer import partition

    role = ANSIBLE / "roles" / "openwhisk"
    tasks = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    helm = next(t for t in tasks if "kubernetes.core.helm" in t)
    assert helm["kubernetes.core.helm"]["values"]["whisk"]["loadbalancer"]["blackboxFraction"] \
        == "{{ openwhisk_blackbox_fraction }}"
    fraction = yaml.safe_load((role / "defaults" / "main.yml").read_text())["openwhisk_blackbox_fraction"]
    share = float(fraction.rstrip("%")) / 100
    assert all(partition(n, 0.9, share)[1] == n for n in range(1, 21))
    assert partition(3, 0.9, 0.1)[1] == 1  # what the chart's default would have given three invokers


def test_knative_manifests_are_pinned_on_first_download_and_a_changed_one_refused(tmp_path):
    """knative_serving's download tasks against a server on 127.0.0.1: the first download records
    each file's SHA-256 in the lab's lock, a rerun with the same files passes, a changed file (a
    re-tagged release asset) stops the playbook naming it, and a pin in knative_serving_sha256 that
    the file does not match stops it even on the first download."""
    import hashlib
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    for name in ("serving-crds.yaml", "serving-core.yaml", "kourier.yaml"):
        (served / name).write_text(f"# {name}\n")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    lab = tmp_path / "lab"
    (tmp_path / "dl.yml").write_text(yaml.safe_dump([{
        "hosts": "cp", "gather_facts": False, "vars_files": [str(ANSIBLE / "group_vars" / "all.yml")],
        "tasks": [{"ansible.builtin.include_role": {"name": "knative_serving", "tasks_from": "download"}}]}]))
    extra = {"scoretune_lab_dir": str(lab), "knative_serving_release_url": base,
             "knative_serving_kourier_url": f"{base}/kourier.yaml"}
    try:
        done = _run(tmp_path, "dl.yml", extra)
        assert done.returncode == 0, done.stdout[-3000:]
        lock = json.loads((lab / "manifests.lock.json").read_text())
        core = "knative-v1.23.0-serving-core.yaml"
        assert lock[core] == hashlib.sha256(b"# serving-core.yaml\n").hexdigest() and len(lock) == 3
        assert _run(tmp_path, "dl.yml", extra).returncode == 0  # the same files again
        (served / "serving-core.yaml").write_text("# serving-core.yaml, altered\n")
        again = _run(tmp_path, "dl.yml", extra)
        assert again.returncode != 0 and core in again.stdout
        assert json.loads((lab / "manifests.lock.json").read_text()) == lock  # the lock is never rewritten
        (lab / "manifests.lock.json").unlink()
        pinned = _run(tmp_path, "dl.yml", {**extra, "knative_serving_sha256": {core: "0" * 64}})
        assert pinned.returncode != 0 and core in pinned.stdout
    finally:
        server.shutdown()
