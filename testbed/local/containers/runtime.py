"""The container runtime of a node agent: real pulls, runc pods, the kernel's limits.

Per node (all under ``<state>/containers/nodes/<node>``): an image store (:mod:`.store`), a pod
directory per instance (overlay root + ``config.json``), a CPU group (the agent's node group,
with the hardware's quota) and a memory group of the node's memory; every pod's cgroup is a child
of both, so the node's quota caps its pods, pulls and unpacks, and the kernel's OOM killer acts
on a pod above its limit or on the node when its pods together exceed it -- as on a kubelet.
A pod listens on the node's address (its namespace's ``eth0``), one port per pod.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from testbed.local import cpu
from testbed.local.containers import pods
from testbed.local.containers.network import LabNetwork
from testbed.local.containers.store import NodeStore
from testbed.local.hardware import NodeHardware
from testbed.local.node_runtime import Fetched, Instance

log = logging.getLogger(__name__)

FIRST_POD_PORT = 8080


def _v1_mount(controller: str) -> Path | None:
    """The v1 hierarchy holding ``controller`` (the mount table as :mod:`testbed.local.cpu` reads it)."""
    return next((Path(mnt) for mnt, fstype, opts in cpu.mounts() if fstype == "cgroup" and controller in opts), None)


def _v2_mount() -> Path:
    mount = next((Path(mnt) for mnt, fstype, _ in cpu.mounts() if fstype == "cgroup2"), None)
    if mount is None:
        raise RuntimeError("no cgroup v2 mount")
    return mount


def cgroup_relpath(mode: cpu.CpuMode, path: Path) -> str:
    """``path`` (a directory in the cpu hierarchy) as runc's ``cgroupsPath`` (from the hierarchy's root)."""
    mount = _v1_mount("cpu") if mode.mode == "cgroup-v1" else _v2_mount()
    if mount is None:
        raise RuntimeError(f"no {mode.mode} mount holds {path}")
    return "/" + path.relative_to(mount).as_posix()


def memory_group(mode: cpu.CpuMode, relpath: str) -> Path:
    """The memory cgroup directory at ``relpath`` (v1: the memory hierarchy; v2: the same directory)."""
    if mode.mode == "cgroup-v1":
        mount = _v1_mount("memory")
        if mount is None:
            raise RuntimeError("no cgroup v1 memory hierarchy")
        return mount / relpath.lstrip("/")
    return _v2_mount() / relpath.lstrip("/")  # v2: one hierarchy, the node's own directory (not run here)


def oom_kills(group: Path) -> int:
    """The kernel's count of OOM kills in a memory cgroup (v1 ``memory.oom_control``, v2 ``memory.events``)."""
    for name in ("memory.oom_control", "memory.events"):
        try:
            for line in (group / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0


def memory_usage(group: Path) -> int:
    for name in ("memory.usage_in_bytes", "memory.current"):
        try:
            return int((group / name).read_text())
        except (OSError, ValueError):
            continue
    return 0


class ContainerRuntime:
    """See the module docstring; one per node agent."""

    kind = "containers"

    def __init__(self, *, node: Any, hardware: NodeHardware, mode: cpu.CpuMode, node_group_path: Path,
                 state_root: Path, lab: dict[str, Any], on_cgroup: Any, log_path: Any) -> None:
        info = lab["containers"]
        self.node = node
        self.hardware = hardware
        self.mode = mode
        self.net = LabNetwork.from_dict(info["network"])
        self.link = self.net.nodes[node.name]
        self.images_table: dict[str, dict[str, Any]] = info["images"]
        self.build_layout = Path(info["layout"])
        self.root = state_root / "containers" / "nodes" / node.name
        self.runc = pods.Runc(state_root / "containers" / "runc")
        self.log_path = log_path
        self.node_cpu = node_group_path
        self.node_rel = cgroup_relpath(mode, node_group_path)
        self.node_mem = memory_group(mode, self.node_rel)
        self.node_mem.mkdir(parents=True, exist_ok=True)
        on_cgroup(str(self.node_mem))
        if mode.mode == "cgroup-v1":
            (self.node_mem / "memory.limit_in_bytes").write_text(str(node.memory_bytes))
        else:  # v2 (not run on this project's machines): memory delegated to the node's pods, its limit
            for group in (self.node_mem.parent, self.node_mem):
                try:
                    (group / "cgroup.subtree_control").write_text("+memory\n")
                except OSError as err:
                    log.warning("cannot enable the memory controller in %s: %s", group, err.strerror)
            (self.node_mem / "memory.max").write_text(str(node.memory_bytes))
        self._node_ooms = oom_kills(self.node_mem)
        procs = self.node_cpu / "cgroup.procs"

        def enter_node() -> None:
            procs.write_text("0\n")  # "0": the writing process itself

        self.store = NodeStore(self.root / "store", netns=self.link.netns, registry=self.net.registry, enter_node=enter_node)
        self._ports: set[int] = set()

    @property
    def images(self) -> set[str]:
        return set(self.store.images)

    def _entry(self, image: str) -> dict[str, Any]:
        entry = self.images_table.get(image)
        if entry is None:
            raise RuntimeError(f"image {image} was not built for this lab")
        return entry

    async def preload(self, images: list[str]) -> None:
        """The images a node starts with (its spec's ``images``), copied from the build without
        crossing the link and unpacked, outside any measurement (a node image baked with them)."""
        for image in images:
            if image not in self.images_table or image in self.store.images:
                continue
            entry = self.images_table[image]
            self.store.root.mkdir(parents=True, exist_ok=True)
            proc = await asyncio.create_subprocess_exec(
                "skopeo", "copy", "--quiet", f"oci:{self.build_layout}:{entry['tag']}", f"oci:{self.store.layout}:{entry['tag']}",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"preloading {image} on {self.node.name}: {err.decode(errors='replace').strip()}")
            # the layout now holds the image; unpacking it is the store's fetch with nothing to download
            await self.store.fetch(image, entry["ref"], entry["tag"])

    async def fetch(self, image: str) -> Fetched:
        entry = self._entry(image)
        f = await self.store.fetch(image, entry["ref"], entry["tag"])
        return Fetched(f.pull_s, f.unpack_s, f.bytes_pulled)

    def _pod_dir(self, inst: Instance) -> Path:
        return self.root / "pods" / inst.id

    def _pod_mem(self, inst: Instance) -> Path:
        return self.node_mem / f"pod-{inst.id}"

    async def launch(self, inst: Instance, env: dict[str, str]) -> None:
        entry = self._entry(inst.image)
        port = FIRST_POD_PORT
        while port in self._ports:
            port += 1
        self._ports.add(port)
        inst.port = port
        inst.url = f"http://{self.link.address}:{port}"
        pod_dir = self._pod_dir(inst)
        pods.mount_overlay(self.store.lowerdirs(inst.image), pod_dir)
        spec = pods.runtime_spec(
            self.store.config(entry["tag"]),
            args=["--host", self.link.address, "--port", str(port)],
            env={k: v for k, v in env.items() if k in ("NODE_NAME", "POD_NAME", "CONTAINER_CONCURRENCY", "SCORETUNE_PROTOCOL")}
            | {"PORT": str(port)},
            netns_path=self.net.netns_path(self.node.name),
            cgroups_path=f"{self.node_rel}/pod-{inst.id}",
            cpu_quota_milli=cpu.pod_quota_milli(inst.cpu_limit_milli, self.hardware.core_speed, self.hardware.cpu_milli),
            memory_limit_bytes=inst.memory_limit_bytes,
            hostname=inst.pod or inst.id,
        )
        (pod_dir / "config.json").write_text(json.dumps(spec))
        inst.extra["cid"] = f"{self.net.lab_id}-{inst.id}"
        inst.pid = await self.runc.run_detached(inst.extra["cid"], pod_dir, self.log_path(f"instance-{inst.id}"))

    async def ready(self, inst: Instance) -> None:
        return None  # the pod ran in the node's group from its first instruction

    def exited(self, inst: Instance) -> str | None:
        if inst.pid is None or pods.pid_alive(inst.pid):
            return None
        return self._exit_reason(inst)

    def _exit_reason(self, inst: Instance) -> str:
        if oom_kills(self._pod_mem(inst)) > 0:
            return "OOMKilled (container memory limit)"
        node_ooms = oom_kills(self.node_mem)
        if node_ooms > self._node_ooms:
            self._node_ooms = node_ooms
            return "OOMKilled (node memory)"
        return "exited"

    def check(self, instances: list[Instance]) -> None:
        for inst in instances:
            if inst.pid is None or inst.state == "stopped":
                continue
            if not pods.pid_alive(inst.pid):
                if inst.state != "exited":
                    inst.state = "exited"
                    inst.exit_reason = inst.exit_reason or self._exit_reason(inst)
                continue
            inst.rss_bytes = memory_usage(self._pod_mem(inst))

    async def stop(self, inst: Instance) -> None:
        cid = inst.extra.get("cid")
        if cid:
            await self.runc.delete(cid)
        pod_dir = self._pod_dir(inst)
        pods.unmount(pod_dir / "rootfs")
        await asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, pod_dir, True)
        self._ports.discard(inst.port)

    async def reset(self, images: list[str]) -> None:
        """Between steps: the node's store emptied of everything but the images its spec lists
        (what the kube backend's image reset does), so every step starts from the same caches."""
        await self.store.reset_when_idle(set(images))
        await self.preload(images)

    def status(self) -> dict[str, Any]:
        return {"runtime": self.kind, "address": self.link.address, "link_bytes_per_s": self.link.rate_bytes_per_s}

    async def close(self) -> None:
        for m in pods.lab_mounts(self.root):
            pods.unmount(m)
        cpu.remove_cgroup(self.node_mem)


__all__ = ["ContainerRuntime", "cgroup_relpath", "memory_group", "oom_kills"]
