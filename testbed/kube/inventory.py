"""Checks of a lab inventory before Ansible touches a machine: one line per problem, naming the
file and the host or group.

Why here and not in a playbook: Ansible reads a bad inventory without complaint (a missing group
is an empty play, a host listed under two roles gets both, a load generator without an address
makes every worker dial its inventory name) and fails much later on a half-built lab. The
inventory is read with Ansible's own parser (``ansible-inventory --list``), so what is checked is
what the playbooks will see.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed.errors import InputError

REQUIRED_GROUPS = ("control_plane", "workers", "loadgen")
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""A Kubernetes node name (a DNS-1123 subdomain): kubeadm registers each node under its inventory name."""


def read_inventory(path: Path) -> dict[str, Any]:
    """``ansible-inventory --list`` of ``path``: groups with their hosts, and every host's vars."""
    path = Path(path)
    if not path.exists():
        raise InputError("inventory file does not exist", file=path)
    exe = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent)) or shutil.which("ansible-inventory")
    if exe is None:
        raise InputError("ansible-inventory is not installed (make setup installs Ansible)", file=path)
    done = subprocess.run([exe, "-i", str(path), "--list"], capture_output=True, text=True, timeout=120,
                          env={"ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_INVENTORY_ENABLED": "ini,yaml",
                               "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "ERROR" in ln or "Failed" in ln), lines[-1] if lines else "unreadable")
        raise InputError(f"Ansible cannot parse it: {why.removeprefix('[WARNING]: ').removeprefix('ERROR! ')}",
                         file=path)
    return json.loads(done.stdout)


def _hosts(inv: dict[str, Any], group: str, seen: set[str] | None = None) -> list[str]:
    """Every host of ``group`` and its children, in order."""
    seen = set() if seen is None else seen
    if group in seen:
        return []
    seen.add(group)
    entry = inv.get(group) or {}
    out = list(entry.get("hosts", []))
    for child in entry.get("children", []):
        out += [h for h in _hosts(inv, child, seen) if h not in out]
    return out


def _address(value: Any) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def inventory_problems(path: Path) -> list[str]:
    """Every problem of the inventory at ``path``, one line each (empty: the playbooks may run)."""
    inv = read_inventory(path)
    hostvars = (inv.get("_meta") or {}).get("hostvars") or {}
    out: list[str] = []
    groups = {g: _hosts(inv, g) for g in REQUIRED_GROUPS}
    for g, hosts in groups.items():
        if not hosts:
            out.append(f"{path}: group [{g}] is missing or empty (needs at least one host)")
    both = sorted(set(groups["control_plane"]) & set(groups["workers"]))
    if both:
        out.append(f"{path}: host(s) {', '.join(both)} are in both [control_plane] and [workers]; list each node once")
    nodes = groups["control_plane"] + [h for h in groups["workers"] if h not in groups["control_plane"]]
    for h in nodes:
        if not NODE_NAME.fullmatch(h):
            out.append(f"{path}: host {h!r} is not a valid Kubernetes node name (lowercase letters, digits, '-' "
                       "and '.'; the nodes are registered under their inventory names)")
    by_address: dict[str, list[str]] = {}
    for h in dict.fromkeys(nodes + groups["loadgen"]):  # each machine once, whatever its groups
        v = hostvars.get(h, {})
        if v.get("scoretune_node_address"):
            key = str(v["scoretune_node_address"])
        else:  # several hosts behind one NAT address differ by their SSH port (Vagrant)
            key = f"{v.get('ansible_host') or h}:{v.get('ansible_port', 22)}"
        by_address.setdefault(key, []).append(h)
    for addr, hosts in by_address.items():
        if len(hosts) > 1:
            out.append(f"{path}: hosts {', '.join(hosts)} share the address {addr}; each machine is listed once "
                       "(a machine in several groups keeps one name)")
    for h in groups["loadgen"]:
        v = hostvars.get(h, {})
        if _address(v.get("ansible_host")) is None and _address(v.get("scoretune_node_address")) is None \
                and _address(h) is None:
            out.append(f"{path}: load generator {h} has no address (set ansible_host=IP or scoretune_node_address=IP: "
                       "the Locust workers connect to the first load generator at it)")
    declared = set((inv.get("all") or {}).get("children", [])) | set(inv)
    if "openwhisk_invokers" in declared:  # else the workers are OpenWhisk's invokers (roles/openwhisk)
        invokers = _hosts(inv, "openwhisk_invokers")
        if not invokers:
            out.append(f"{path}: group [openwhisk_invokers] is empty: OpenWhisk would have no invoker (list the "
                       "workers that run actions, or remove the group to use every worker)")
        for h in invokers:
            if h not in groups["workers"]:
                out.append(f"{path}: invoker {h} is not in [workers]: OpenWhisk's invokers and action pods run on "
                           "worker nodes (the control plane holds OpenWhisk's core components)")
    for h in nodes:
        v = hostvars.get(h, {})
        given = v.get("scoretune_node_address")
        if given is not None and _address(given) is None:
            out.append(f"{path}: host {h}: scoretune_node_address={given!r} is not an IP address")
    return out


__all__ = ["REQUIRED_GROUPS", "inventory_problems", "read_inventory"]
