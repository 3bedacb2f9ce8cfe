"""The host firewall's rules as the lab_firewall role computes them, for a lab of three machines:
the ports each group needs, from the inventory's addresses only unless a lab network is set,
nothing etcd or the controllers listen on, and the pod network trusted (issue 35, item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
HOSTS = {"cp": "10.0.0.10", "w1": "10.0.0.11", "gen": "10.0.0.20"}


def _rules(tmp_path: Path, **extra: str) -> dict[str, dict]:
    inventory = {"all": {"children": {
        "control_plane": {"hosts": {"cp": {}}}, "workers": {"hosts": {"w1": {}}}, "loadgen": {"hosts": {"gen": {}}},
        "k8s_cluster": {"children": {"control_plane": {}, "workers": {}}}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}
    for host, address in HOSTS.items():
        for group in inventory["all"]["children"].values():
            if host in group.get("hosts", {}):
                group["hosts"][host] = {"scoretune_node_address": address}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "vars_files": [str(ANSIBLE / "group_vars" / "all.yml"), str(ANSIBLE / "roles" / "lab_firewall" / "defaults" / "main.yml")],
        "tasks": [{"ansible.builtin.debug": {"msg": {"rules": "{{ lab_firewall_rules }}",
                                                     "trusted": "{{ lab_firewall_trusted_interfaces + lab_firewall_trusted_cidrs }}"}}}],
    }]))
    env = dict(os.environ) | {"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
                              "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"),
                           "-e", json.dumps(extra)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(done.stdout[done.stdout.index("{"):])
    return {host: r["msg"] for host, r in out["plays"][0]["tasks"][0]["hosts"].items()}


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
