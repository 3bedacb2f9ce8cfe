"""The container lab's network: a bridge, a namespace per node and one for the registry, shaped links.

Topology (every name carries the lab's id, so ``down`` finds them after a crash)::

    root namespace                     stb<id>  10.213.X.1/24   (the lab's bridge; the controller
      |- st<id>r   (veth) ------------- netns st-<id>-reg : eth0 10.213.X.254 (docker-registry)
      |- st<id>n0  (veth, tbf) -------- netns st-<id>-n0  : eth0 10.213.X.10  (node 0's pods)
      |- st<id>n1  (veth, tbf) -------- netns st-<id>-n1  : eth0 10.213.X.11  ...

A node's pods share its namespace (one address per node, one port per pod, as hostNetwork pods),
so everything the node receives -- image layers from the registry and requests from the lab's
ingress -- crosses its veth. The link is shaped where the bridge sends into the node (the host
end's egress) with a token bucket (``tc qdisc ... tbf``; this kernel has no ``netem``, and a
bucket is what a NIC's line rate is). The /24 is the first of 10.213.0.0/16 that overlaps no
address or route of this machine. Nothing here sends a packet anywhere but to those addresses.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SUPERNET = ipaddress.ip_network("10.213.0.0/16")
REGISTRY_HOST = 254
NODE_HOST0 = 10
REGISTRY_PORT = 5000


class NetworkError(RuntimeError):
    """A step of building the lab's network failed; the message names the command."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _cmd(["ip", *args], check=check)


def _cmd(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetworkError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 prefix this machine has an address or a route in (so the lab's /24 overlaps none)."""
    nets: list[ipaddress.IPv4Network] = []
    for args in (["-j", "-4", "addr"], ["-j", "-4", "route", "show", "table", "all"]):
        try:
            data = json.loads(ip(*args).stdout or "[]")
        except (NetworkError, ValueError):
            continue
        for entry in data:
            for a in entry.get("addr_info", []):
                nets.append(ipaddress.ip_network(f"{a['local']}/{a.get('prefixlen', 32)}", strict=False))
            dst = entry.get("dst")
            if dst and dst != "default":
                try:
                    nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
                except ValueError:
                    pass
    return [n for n in nets if n.version == 4]


def free_subnet(start: int = 0, used: list[ipaddress.IPv4Network] | None = None) -> ipaddress.IPv4Network:
    used = used_networks() if used is None else used
    subnets = list(SUPERNET.subnets(new_prefix=24))
    for k in range(len(subnets)):
        net = subnets[(start + k) % len(subnets)]
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetworkError(f"every /24 of {SUPERNET} overlaps an address or route of this machine")


@dataclass
class NodeLink:
    node: str
    netns: str
    host_veth: str
    address: str
    rate_bytes_per_s: float


@dataclass
class LabNetwork:
    """Names and addresses of one lab's network (written to the state directory as it is built)."""

    lab_id: str
    subnet: str
    bridge: str
    bridge_address: str
    registry_netns: str
    registry_veth: str
    registry_address: str
    nodes: dict[str, NodeLink] = field(default_factory=dict)

    @property
    def registry(self) -> str:
        return f"{self.registry_address}:{REGISTRY_PORT}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabNetwork:
        nodes = {k: NodeLink(**v) for k, v in d.get("nodes", {}).items()}
        return cls(**{**d, "nodes": nodes})

    @classmethod
    def plan(cls, lab_id: str, links: dict[str, float], subnet: ipaddress.IPv4Network | None = None) -> LabNetwork:
        """Names and addresses for nodes ``links`` (node -> link bytes/s), nothing created yet."""
        sid = lab_id[:8]
        net = subnet or free_subnet(int(sid, 16) % 256)
        hosts = list(net.hosts())
        if len(links) > REGISTRY_HOST - NODE_HOST0 - 1:
            raise NetworkError(f"a lab network holds at most {REGISTRY_HOST - NODE_HOST0 - 1} nodes, got {len(links)}")
        out = cls(sid, str(net), f"stb{sid}", str(hosts[0]), f"st-{sid}-reg", f"st{sid}r", str(hosts[REGISTRY_HOST - 1]))
        for i, (node, rate) in enumerate(links.items()):
            out.nodes[node] = NodeLink(node, f"st-{sid}-n{i}", f"st{sid}n{i}", str(hosts[NODE_HOST0 + i - 1]), float(rate))
        return out

    def netns_path(self, node: str) -> str:
        return f"/var/run/netns/{self.nodes[node].netns}"


def _attach(net: LabNetwork, netns: str, veth: str, address: str) -> None:
    ip("netns", "add", netns)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("link", "set", veth, "master", net.bridge, "up")
    prefix = net.subnet.split("/")[1]
    ip("-n", netns, "link", "set", "lo", "up")
    ip("-n", netns, "addr", "add", f"{address}/{prefix}", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")


def shape(dev: str, rate_bytes_per_s: float) -> None:
    """A token bucket on ``dev``'s egress: ``rate`` sustained, a burst of 10 ms at that rate (at
    least 64 KiB, so the bucket holds a TCP segment train at any rate), at most 200 ms queued."""
    rate_bit = max(8_000, int(rate_bytes_per_s * 8))
    burst = max(65_536, int(rate_bytes_per_s / 100))
    _cmd(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_bit}bit", "burst", str(burst), "latency", "200ms"])


def create(net: LabNetwork, on_step: Any = None) -> None:
    """Build ``net``: the bridge, the registry's namespace, each node's namespace and shaped link.
    ``on_step`` is called after each object exists, so a crash half-way leaves a record of it."""
    ip("link", "add", net.bridge, "type", "bridge")
    if on_step:
        on_step()
    ip("addr", "add", f"{net.bridge_address}/{net.subnet.split('/')[1]}", "dev", net.bridge)
    ip("link", "set", net.bridge, "up")
    _attach(net, net.registry_netns, net.registry_veth, net.registry_address)
    for link in net.nodes.values():
        _attach(net, link.netns, link.host_veth, link.address)
        shape(link.host_veth, link.rate_bytes_per_s)


def lab_objects(lab_id: str) -> tuple[list[str], list[str]]:
    """The namespaces and links of this machine that carry ``lab_id`` in their lab-owned names."""
    sid = lab_id[:8]
    netns = [line.split()[0] for line in ip("netns", "list", check=False).stdout.splitlines() if line.split()]
    links = []
    try:
        for entry in json.loads(ip("-j", "link", check=False).stdout or "[]"):
            links.append(entry.get("ifname", ""))
    except ValueError:
        pass
    return ([n for n in netns if n.startswith(f"st-{sid}-")], [x for x in links if x.startswith((f"stb{sid}", f"st{sid}"))])


def destroy(lab_id: str) -> int:
    """Remove every namespace and link of ``lab_id`` (a namespace's removal takes its veth end and
    so the pair; the bridge goes last). Returns how many objects were removed."""
    netns, links = lab_objects(lab_id)
    n = 0
    for ns in netns:
        if ip("netns", "delete", ns, check=False).returncode == 0:
            n += 1
    for link in sorted(set(lab_objects(lab_id)[1]) | set(links), key=lambda x: x.startswith("stb")):
        if ip("link", "delete", link, check=False).returncode == 0:
            n += 1
    return n


def all_lab_ids() -> set[str]:
    """Ids of every lab network on this machine (``stb<id>`` bridges and ``st-<id>-`` namespaces)."""
    ids = set()
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("st-") and name.count("-") >= 2:
            ids.add(name.split("-")[1])
    try:
        for entry in json.loads(ip("-j", "link", check=False).stdout or "[]"):
            name = entry.get("ifname", "")
            if name.startswith("stb") and len(name) == 11:
                ids.add(name[3:])
    except ValueError:
        pass
    return ids


def write(net: LabNetwork, path: Path) -> None:
    path.write_text(json.dumps(net.to_dict(), indent=1))


__all__ = ["LabNetwork", "NetworkError", "NodeLink", "all_lab_ids", "create", "destroy", "free_subnet", "shape"]
