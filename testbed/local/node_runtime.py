"""The node agent's seam: how a node gets an image and runs, watches and stops an instance.

Two implementations, chosen per lab (``testbed up --runtime``):

- :class:`ProcessRuntime` (here): an instance is a ``python -m functions.runtime`` process on this
  machine; a pull is a wait of ``image size / link rate``; start-up runs outside the node's quota
  and the instance joins its CPU group once ready; memory limits are enforced by polling the
  resident set. Needs nothing but Python, so it runs anywhere (no root).
- :class:`testbed.local.containers.runtime.ContainerRuntime`: a real image pulled from the lab's
  registry through the node's shaped link and unpacked, a pod run by runc in the node's
  namespace and CPU group from its first instruction, memory limits enforced by the kernel.

The agent owns the instance table, readiness and the HTTP API; a runtime owns what differs.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from testbed.local import cpu
from testbed.local.hardware import NodeHardware

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_setup() -> None:
    """Runs in a child process before exec: die with the agent (``PR_SET_PDEATHSIG``)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the agent died between fork and prctl
        os._exit(1)


@dataclass
class Instance:
    """One function instance (a pod) on this node, as the agent tracks it."""

    id: str
    function: str
    image: str
    memory_limit_bytes: int
    cpu_limit_milli: int
    pod: str = ""
    port: int = 0
    url: str = ""
    state: str = "pulling"
    pid: int | None = None
    proc: subprocess.Popen | None = None
    group: str | None = None
    rss_bytes: int = 0
    image_pull_s: float = 0.0
    unpack_s: float = 0.0
    bytes_pulled: int = 0
    start_s: float = 0.0
    init_s: float = 0.0
    exit_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "function": self.function,
            "state": self.state,
            "port": self.port,
            "url": self.url,
            "pid": self.pid,
            "rss_bytes": self.rss_bytes,
            "exit_reason": self.exit_reason,
        }


@dataclass(frozen=True)
class Fetched:
    """How an image came to the node: seconds pulling, seconds unpacking, bytes downloaded."""

    pull_s: float = 0.0
    unpack_s: float = 0.0
    bytes_pulled: int = 0


class NodeRuntime(Protocol):
    """What a node agent asks of its runtime (pull, start, watch, stop, reset, status)."""

    kind: str

    @property
    def images(self) -> set[str]: ...

    async def fetch(self, image: str) -> Fetched: ...

    async def launch(self, inst: Instance, env: dict[str, str]) -> None:
        """Start the instance; sets ``inst.url``, ``inst.port``, ``inst.pid``."""

    async def ready(self, inst: Instance) -> None:
        """The instance answered ``/readyz``: its start-up is over."""

    def exited(self, inst: Instance) -> str | None:
        """Why the instance is gone (an exit, an OOM kill), or None while it runs."""

    def check(self, instances: list[Instance]) -> None:
        """Note exits (with the reason, OOM kills named as the platform names them) and memory."""

    async def stop(self, inst: Instance) -> None: ...

    async def reset(self, images: list[str]) -> None: ...

    def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class ProcessRuntime:
    """Instances as local processes; pulls as waits (see the module docstring)."""

    kind = "process"

    def __init__(self, *, node: Any, hardware: NodeHardware, limiter: cpu.Limiter, node_group: str,
                 image_sizes: dict[str, int], log_path: Any, on_spawn: Any) -> None:
        self.node = node
        self.hardware = hardware
        self.limiter = limiter
        self.node_group = node_group
        self.image_sizes = image_sizes
        self.log_path = log_path
        self.on_spawn = on_spawn
        self._images: set[str] = set(node.images)
        self._pull_lock = asyncio.Lock()

    @property
    def images(self) -> set[str]:
        return self._images

    async def fetch(self, image: str) -> Fetched:
        t0 = time.monotonic()
        if image in self._images:
            return Fetched()
        async with self._pull_lock:
            if image not in self._images:
                size = self.image_sizes.get(image, 0)
                await asyncio.sleep(size / self.hardware.link_bytes_per_s)
                self._images.add(image)
                return Fetched(time.monotonic() - t0, 0.0, size)
        return Fetched(time.monotonic() - t0)

    async def launch(self, inst: Instance, env: dict[str, str]) -> None:
        quota = cpu.pod_quota_milli(inst.cpu_limit_milli, self.hardware.core_speed, self.hardware.cpu_milli, one_process=True)
        inst.group = self.limiter.create(f"i-{inst.id}", quota, parent=self.node_group)
        inst.port = free_port()
        inst.url = f"http://127.0.0.1:{inst.port}"
        logf = open(self.log_path(f"instance-{inst.id}"), "ab")
        inst.proc = subprocess.Popen(
            [sys.executable, "-m", "functions.runtime", "--function", inst.function, "--port", str(inst.port)],
            env={**os.environ, **env, "PORT": str(inst.port)},
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            preexec_fn=child_setup,
            close_fds=True,
        )
        logf.close()
        inst.pid = inst.proc.pid
        self.on_spawn(inst)

    async def ready(self, inst: Instance) -> None:
        # Start-up ran outside the node's quota (the process lab keeps the simulator's fixed start
        # and init times); from now on the instance's work runs under it.
        assert inst.group is not None and inst.pid is not None
        self.limiter.add(inst.group, inst.pid)

    def check(self, instances: list[Instance]) -> None:
        """Exits, and the kernel's OOM killer done by hand: an instance above its limit, or the
        largest one when the node's total is above the node's memory, is killed."""
        total = 0
        live = []
        for inst in instances:
            if inst.proc is None or inst.state == "stopped":
                continue
            if inst.proc.poll() is not None:
                inst.state = "exited"
                inst.exit_reason = inst.exit_reason or f"exited with status {inst.proc.returncode}"
                continue
            try:
                inst.rss_bytes = psutil.Process(inst.proc.pid).memory_info().rss
            except psutil.NoSuchProcess:
                continue
            if inst.rss_bytes > inst.memory_limit_bytes:
                log.warning("instance %s: rss %d > limit %d: OOM-killed", inst.id, inst.rss_bytes, inst.memory_limit_bytes)
                inst.exit_reason = "OOMKilled (container memory limit)"
                inst.proc.kill()
                continue
            total += inst.rss_bytes
            live.append(inst)
        if live and total > self.node.memory_bytes:
            victim = max(live, key=lambda i: i.rss_bytes)
            log.warning("node %s: rss %d > memory %d: OOM-killed %s", self.node.name, total, self.node.memory_bytes, victim.id)
            victim.exit_reason = "OOMKilled (node memory)"
            if victim.proc is not None:
                victim.proc.kill()

    def exited(self, inst: Instance) -> str | None:
        if inst.proc is not None and inst.proc.poll() is not None:
            return f"exited with status {inst.proc.returncode}"
        return None

    async def stop(self, inst: Instance) -> None:
        if inst.proc is not None and inst.proc.poll() is None:
            try:
                inst.proc.send_signal(signal.SIGCONT)
                inst.proc.kill()
            except ProcessLookupError:
                pass
            await asyncio.get_running_loop().run_in_executor(None, inst.proc.wait)
        if inst.group is not None:
            self.limiter.remove(inst.group)

    async def reset(self, images: list[str]) -> None:
        self._images = set(images)

    def status(self) -> dict[str, Any]:
        return {"runtime": self.kind}

    async def close(self) -> None:
        return None


__all__ = ["Fetched", "Instance", "NodeRuntime", "ProcessRuntime", "child_setup", "free_port"]
