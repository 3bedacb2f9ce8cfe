"""The node agent: one process per lab node, running that node's function instances.

The agent is the lab's kubelet. It serves a small control API on 127.0.0.1 (the lab controller is
its only client) and runs each instance as a real ``python -m functions.runtime`` process:

- **image cache**: a node starts with the images its spec lists; an instance whose image is not
  cached first waits ``image size / the node's pull bandwidth`` (pulls are serialised per node,
  as kubelet's ``serializeImagePulls`` default does), then the image is cached;
- **CPU**: the node's capacity and speed are enforced by :mod:`testbed.local.cpu` (a cgroup quota
  per node and per instance, or the duty-cycle limiter). An instance joins its quota group once it
  is ready: process start-up is a cold-start part with its own measured time (``start_s``,
  ``init_s``, as the simulator models it), the requests' work is what the node's capacity limits;
- **memory**: every 0.25 s the agent reads each instance's resident set; an instance above its
  memory limit is killed (as the kernel's OOM killer would kill the container), and when the
  node's total goes above the node's memory the largest instance is killed;
- **lifetime**: instances get ``PR_SET_PDEATHSIG = SIGKILL``, so killing the agent kills its
  instances with it (their in-flight requests fail, as on a node that dies).

API: ``GET /healthz``, ``GET /status``, ``POST /instances`` ``{"id", "function", "pod"}`` (answers once
the instance is ready or failed, with its cold-start parts), ``DELETE /instances/{id}``,
``POST /reset`` ``{"images": [...]}`` (kill every instance, restore the image cache).

Entry point: ``python -m testbed.local.node_agent --state-dir DIR --node NAME``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from aiohttp import ClientSession, ClientTimeout, web

from testbed.local import cpu
from testbed.local.state import LabState, ProcRecord, record_for

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
READY_TIMEOUT_S = 120.0
MEMORY_POLL_S = 0.25


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_setup() -> None:
    """Runs in the instance process before exec: die with the agent (``PR_SET_PDEATHSIG``)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the agent died between fork and prctl
        os._exit(1)


@dataclass
class Instance:
    id: str
    function: str
    image: str
    memory_limit_bytes: int
    port: int = 0
    state: str = "pulling"
    proc: subprocess.Popen | None = None
    group: str | None = None
    rss_bytes: int = 0
    image_pull_s: float = 0.0
    start_s: float = 0.0
    init_s: float = 0.0
    exit_reason: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "function": self.function,
            "state": self.state,
            "port": self.port,
            "pid": self.proc.pid if self.proc else None,
            "rss_bytes": self.rss_bytes,
            "exit_reason": self.exit_reason,
        }


class NodeAgent:
    def __init__(self, state: LabState, node_name: str) -> None:
        from functions.spec import discover_specs
        from testbed.cluster import parse_cluster

        self.state = state
        lab = state.read_lab()
        if lab is None:
            raise SystemExit(f"no lab description in {state.lab_file}")
        self.lab = lab
        cluster = parse_cluster(lab["cluster"], file=lab.get("cluster_file", "<cluster>"))
        self.node = cluster.node(node_name)
        self.max_speed = max(n.speed for n in cluster.nodes)
        self.specs = discover_specs()
        self.images: set[str] = set(self.node.images)
        self.instances: dict[str, Instance] = {}
        self._pull_lock = asyncio.Lock()
        mode = cpu.CpuMode(lab["cpu"]["mode"], lab["cpu"]["base"], lab["cpu"]["reason"])
        self.cpu_mode = mode
        if mode.mode == "duty-cycle":
            self.limiter: cpu.Limiter = cpu.DutyCycleLimiter()
        else:
            self.limiter = cpu.CgroupLimiter(mode, lab["cpu"]["lab_group"], on_create=state.add_cgroup)
        self.speed_scale = self.node.speed / self.max_speed
        self.node_group = self.limiter.create(
            f"node-{self.node.name}", cpu.quota_milli(self.node.cpu_milli, self.node.speed, self.max_speed)
        )
        self._session: ClientSession | None = None

    # --- instances ---
    async def _pull(self, image: str) -> float:
        """Wait for ``image`` (size / bandwidth) unless cached; returns the seconds waited."""
        t0 = time.monotonic()
        if image in self.images:
            return 0.0
        async with self._pull_lock:
            if image not in self.images:
                size = next((s.image_size_bytes for s in self.specs.values() if s.image == image), 0)
                await asyncio.sleep(size / self.node.image_pull_bytes_per_s)
                self.images.add(image)
        return time.monotonic() - t0

    async def start_instance(self, iid: str, function: str, *, pod: str | None = None) -> dict[str, Any]:
        spec = self.specs.get(function)
        if spec is None:
            return {"id": iid, "ok": False, "error": f"unknown function {function!r}"}
        inst = Instance(iid, function, spec.image, spec.memory_limit_bytes)
        self.instances[iid] = inst
        inst.image_pull_s = await self._pull(spec.image)
        if inst.state == "stopped":
            return {"id": iid, "ok": False, "error": "stopped while pulling"}
        quota = cpu.quota_milli(min(spec.cpu_limit_milli, 1000), self.node.speed, self.max_speed)
        inst.group = self.limiter.create(f"i-{iid}", quota, parent=self.node_group)
        inst.port = free_port()
        env = {
            **os.environ,
            "NODE_NAME": self.node.name,
            "POD_NAME": pod or iid,
            "CONTAINER_CONCURRENCY": str(spec.container_concurrency),
            "PORT": str(inst.port),
            "PYTHONUNBUFFERED": "1",
        }
        logf = open(self.state.log_path(f"instance-{iid}"), "ab")
        t_spawn = time.monotonic()
        inst.state = "starting"
        inst.proc = subprocess.Popen(
            [sys.executable, "-m", "functions.runtime", "--function", function, "--port", str(inst.port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            preexec_fn=_child_setup,
            close_fds=True,
        )
        logf.close()
        self.state.add_proc(record_for("instance", iid, inst.proc.pid))
        ok, phase = await self._wait_ready(inst, t_spawn)
        if not ok:
            reason = inst.exit_reason or phase
            await self.stop_instance(iid, reason=reason)
            return {"id": iid, "ok": False, "error": f"instance did not become ready: {reason}"}
        # Start-up ran outside the node's quota (the simulator's start/init times are fixed, not
        # CPU work on the node); from now on the instance's work runs under it.
        self.limiter.add(inst.group, inst.proc.pid)
        inst.state = "ready"
        return {
            "id": iid,
            "ok": True,
            "port": inst.port,
            "url": f"http://127.0.0.1:{inst.port}",
            "image_pull_s": inst.image_pull_s,
            "start_s": inst.start_s,
            "init_s": inst.init_s,
            "images": sorted(self.images),
        }

    async def _wait_ready(self, inst: Instance, t_spawn: float) -> tuple[bool, str]:
        """Poll /healthz (start done: the process serves) then /readyz (init done: handler loaded)."""
        assert self._session is not None and inst.proc is not None
        base = f"http://127.0.0.1:{inst.port}"
        deadline = t_spawn + READY_TIMEOUT_S
        phase, t_phase = "healthz", t_spawn
        while time.monotonic() < deadline:
            if inst.proc.poll() is not None:
                return False, f"exited with status {inst.proc.returncode} during {phase}"
            if inst.state == "stopped":
                return False, "stopped"
            try:
                async with self._session.get(f"{base}/{phase}", timeout=ClientTimeout(total=1.0)) as r:
                    if r.status == 200:
                        now = time.monotonic()
                        if phase == "healthz":
                            inst.start_s = now - t_phase
                            phase, t_phase = "readyz", now
                            continue
                        inst.init_s = now - t_phase
                        return True, "ready"
            except (TimeoutError, OSError):
                pass
            except Exception:  # aiohttp client errors while the server comes up
                pass
            await asyncio.sleep(0.02)
        return False, f"timeout during {phase}"

    async def stop_instance(self, iid: str, *, reason: str = "deleted") -> bool:
        inst = self.instances.pop(iid, None)
        if inst is None:
            return False
        inst.state = "stopped"
        inst.exit_reason = inst.exit_reason or reason
        if inst.proc is not None and inst.proc.poll() is None:
            try:
                inst.proc.send_signal(signal.SIGCONT)
                inst.proc.kill()
            except ProcessLookupError:
                pass
            await asyncio.get_running_loop().run_in_executor(None, inst.proc.wait)
        self.state.remove_proc("instance", iid)
        if inst.group is not None:
            self.limiter.remove(inst.group)
        return True

    async def reset(self, images: list[str]) -> None:
        for iid in list(self.instances):
            await self.stop_instance(iid, reason="reset")
        self.images = set(images)

    # --- memory watch ---
    async def _memory_watch(self) -> None:
        while True:
            await asyncio.sleep(MEMORY_POLL_S)
            total = 0
            live = []
            for inst in list(self.instances.values()):
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

    # --- HTTP ---
    def status(self) -> dict[str, Any]:
        return {
            "node": self.node.name,
            "pid": os.getpid(),
            "images": sorted(self.images),
            "cpu_mode": self.cpu_mode.mode,
            "speed_scale": self.speed_scale,
            "instances": [i.view() for i in self.instances.values()],
        }

    def app(self) -> web.Application:
        routes = web.RouteTableDef()

        @routes.get("/healthz")
        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"node": self.node.name})

        @routes.get("/status")
        async def status(request: web.Request) -> web.Response:
            return web.json_response(self.status())

        @routes.post("/instances")
        async def create(request: web.Request) -> web.Response:
            body = await request.json()
            return web.json_response(await self.start_instance(str(body["id"]), str(body["function"]),
                                                               pod=body.get("pod")))

        @routes.delete("/instances/{iid}")
        async def delete(request: web.Request) -> web.Response:
            return web.json_response({"deleted": await self.stop_instance(request.match_info["iid"])})

        @routes.post("/reset")
        async def reset(request: web.Request) -> web.Response:
            body = await request.json()
            await self.reset(list(body.get("images", self.node.images)))
            return web.json_response(self.status())

        app = web.Application()
        app.add_routes(routes)

        async def lifecycle(app: web.Application):
            self._session = ClientSession()
            watch = asyncio.create_task(self._memory_watch())
            yield
            watch.cancel()
            for iid in list(self.instances):
                await self.stop_instance(iid, reason="agent stopped")
            await self._session.close()
            self.limiter.close()

        app.cleanup_ctx.append(lifecycle)
        return app


ORPHAN_CHECK_S = 1.0
CONTROLLER_GRACE_S = 15.0
"""How long an agent outlives its lab's controller (it starts before the controller, and a run
never needs an agent without one)."""


def orphaned(state: LabState, started: float, now: float) -> str | None:
    """Why this agent's lab is gone, or None while it lives: its state directory or ``lab.json``
    removed (``down`` ran, or the experiment's folder was deleted), the process that owns the lab
    gone, or no controller alive for ``CONTROLLER_GRACE_S``. An agent that outlives its lab is a
    process nothing else will ever stop."""
    lab = state.read_lab()
    if lab is None:
        return f"the lab's state ({state.lab_file}) is gone"
    owner = lab.get("owner")
    if owner and not ProcRecord(**owner).alive():
        return f"the lab's owner (pid {owner['pid']}) is gone"
    if now - started >= CONTROLLER_GRACE_S and not state.live_procs("controller"):
        return "the lab's controller is gone"
    return None


async def _orphan_watch(state: LabState, stop: asyncio.Event) -> None:
    started = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(ORPHAN_CHECK_S)
        why = orphaned(state, started, time.monotonic())
        if why is not None:
            log.warning("%s: this agent stops (its instances with it)", why)
            stop.set()


async def _serve(agent: NodeAgent, state: LabState, name: str) -> None:
    runner = web.AppRunner(agent.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.write_port(name, port)
    log.info("agent %s listening on 127.0.0.1:%d", name, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = asyncio.create_task(_orphan_watch(state, stop))
    await stop.wait()
    watch.cancel()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local.node_agent")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--node", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s agent %(levelname)s %(message)s")
    state = LabState(Path(args.state_dir))

    async def run() -> None:
        agent = NodeAgent(state, args.node)
        await _serve(agent, state, f"agent-{args.node}")

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
