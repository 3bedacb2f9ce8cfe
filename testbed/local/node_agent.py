"""The node agent: one process per lab node, running that node's function instances.

The agent is the lab's kubelet. It serves a small control API on 127.0.0.1 (the lab controller is
its only client), owns the node's instance table and readiness, and leaves what differs between
runtimes to its :class:`testbed.local.node_runtime.NodeRuntime` (``lab.json``'s ``runtime``):

- **process**: an instance is a real ``python -m functions.runtime`` process; a pull is a wait of
  ``image size / the node's link rate`` (serialised per node, as kubelet's ``serializeImagePulls``
  default does); start-up runs outside the node's quota, the requests' work under it; memory
  limits are enforced by polling the resident set;
- **containers** (:mod:`testbed.local.containers`): the image is pulled from the lab's registry
  through the node's shaped link and unpacked; the pod is a runc container in the node's network
  namespace and cgroups from its first instruction; the kernel enforces memory limits.

**CPU**: the node's capacity is a quota group (:mod:`testbed.local.cpu`) of the hardware's CPU
(``testbed/local/hardware.py``: the spec's, or a hardware file's hidden one), with the hardware's
noisy neighbour inside it when it has one. **Lifetime**: instances die with the agent (process
runtime: ``PR_SET_PDEATHSIG``; containers: the agent deletes them as it stops); an agent whose
controller or owner is gone tears the rest of the lab down.

API: ``GET /healthz``, ``GET /status``, ``POST /instances`` ``{"id", "function", "pod", "limits"}``
(answers once the instance is ready or failed, with its cold-start parts), ``DELETE
/instances/{id}``, ``POST /reset`` ``{"images": [...]}`` (kill every instance, restore the image
cache to those images).

Entry point: ``python -m testbed.local.node_agent --state-dir DIR --node NAME``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from testbed.local import cpu
from testbed.local.node_runtime import Instance, NodeRuntime, ProcessRuntime, child_setup
from testbed.local.state import LabState, ProcRecord, record_for

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120.0
MEMORY_POLL_S = 0.25


class NodeAgent:
    def __init__(self, state: LabState, node_name: str) -> None:
        from functions.spec import discover_specs
        from testbed.cluster import parse_cluster
        from testbed.local import hardware as hw

        self.state = state
        lab = state.read_lab()
        if lab is None:
            raise SystemExit(f"no lab description in {state.lab_file}")
        self.lab = lab
        cluster = parse_cluster(lab["cluster"], file=lab.get("cluster_file", "<cluster>"))
        self.node = cluster.node(node_name)
        self.specs = discover_specs()
        self.hardware = hw.from_dict(lab["hardware"])[node_name] if lab.get("hardware") else hw.defaults(cluster)[node_name]
        self.instances: dict[str, Instance] = {}
        mode = cpu.CpuMode(lab["cpu"]["mode"], lab["cpu"]["base"], lab["cpu"]["reason"])
        self.cpu_mode = mode
        if mode.mode == "duty-cycle":
            self.limiter: cpu.Limiter = cpu.DutyCycleLimiter()
        else:
            self.limiter = cpu.CgroupLimiter(mode, lab["cpu"]["lab_group"], on_create=state.add_cgroup)
        self.speed_scale = self.hardware.core_speed
        self.node_group = self.limiter.create(f"node-{self.node.name}", self.hardware.cpu_milli)
        self.runtime: NodeRuntime = self._runtime(lab, mode)
        self._neighbours: list[subprocess.Popen] = []
        self._session: ClientSession | None = None

    def _runtime(self, lab: dict[str, Any], mode: cpu.CpuMode) -> NodeRuntime:
        kind = lab.get("runtime", {}).get("kind", "process")
        if kind == "containers":
            from testbed.local.containers.runtime import ContainerRuntime

            assert isinstance(self.limiter, cpu.CgroupLimiter)
            return ContainerRuntime(node=self.node, hardware=self.hardware, mode=mode,
                                    node_group_path=self.limiter.root / self.node_group, state_root=self.state.root,
                                    lab=lab, on_cgroup=self.state.add_cgroup, log_path=self.state.log_path)
        sizes = {s.image: s.image_size_bytes for s in self.specs.values()}
        return ProcessRuntime(node=self.node, hardware=self.hardware, limiter=self.limiter, node_group=self.node_group,
                              image_sizes=sizes, log_path=self.state.log_path,
                              on_spawn=lambda inst: self.state.add_proc(record_for("instance", inst.id, inst.pid)))

    def leave_lab_group(self) -> None:
        """The lab's state is gone (its folder deleted, or ``down`` ran), so no ``down`` will remove
        the lab's own CPU group that ``testbed up`` made: each agent, its node's group already
        removed, steps out of the harness group it runs in and tries to remove that group and the
        lab's; the last one out succeeds (until then the others still hold them). Without this,
        every such lab left an empty ``scoretune-lab-*`` group."""
        if not isinstance(self.limiter, cpu.CgroupLimiter):
            return
        cpu.leave(self.limiter.root)
        for group in (self.limiter.root / cpu.HARNESS_GROUP, self.limiter.root):
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError as err:
                log.info("the lab's group %s stays for the last agent: %s", group, err.strerror)
                return

    def _start_neighbours(self) -> None:
        """The hardware's noisy neighbour: processes in the node's CPU group (one per core it uses)."""
        nb = self.hardware.neighbour
        if nb is None:
            return
        left = nb.cpu_milli
        while left > 0:
            share = min(left, 1000) / 1000
            left -= 1000
            proc = subprocess.Popen(
                [sys.executable, "-m", "testbed.local.neighbour", "--share", f"{share:.3f}", "--low", str(nb.duty_low),
                 "--high", str(nb.duty_high), "--period", str(nb.period_s)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=child_setup, close_fds=True,
            )
            self.limiter.add(self.node_group, proc.pid)
            self.state.add_proc(record_for("neighbour", f"{self.node.name}-{len(self._neighbours)}", proc.pid))
            self._neighbours.append(proc)

    # --- instances ---
    async def start_instance(self, iid: str, function: str, *, pod: str | None = None,
                             limits: dict[str, Any] | None = None) -> dict[str, Any]:
        """Pull (if needed), start and wait for an instance; ``limits`` (``memory_bytes``,
        ``cpu_milli``) are the pod's own when it has them, else the function spec's."""
        spec = self.specs.get(function)
        if spec is None:
            return {"id": iid, "ok": False, "error": f"unknown function {function!r}"}
        limits = limits or {}
        inst = Instance(iid, function, spec.image, int(limits.get("memory_bytes", spec.memory_limit_bytes)),
                        int(limits.get("cpu_milli", spec.cpu_limit_milli)), pod=pod or iid)
        self.instances[iid] = inst
        try:
            fetched = await self.runtime.fetch(spec.image)
        except Exception as err:  # a pull that fails voids the run upstream (ErrImagePull)
            self.instances.pop(iid, None)
            return {"id": iid, "ok": False, "error": f"image pull failed: {err}"}
        inst.image_pull_s = fetched.pull_s + fetched.unpack_s
        inst.unpack_s, inst.bytes_pulled = fetched.unpack_s, fetched.bytes_pulled
        if inst.state == "stopped":
            return {"id": iid, "ok": False, "error": "stopped while pulling"}
        env = {
            "NODE_NAME": self.node.name,
            "POD_NAME": pod or iid,
            "CONTAINER_CONCURRENCY": str(spec.container_concurrency),
            "PYTHONUNBUFFERED": "1",
        }
        t_spawn = time.monotonic()
        inst.state = "starting"
        try:
            await self.runtime.launch(inst, env)
        except Exception as err:
            await self.stop_instance(iid, reason=f"start failed: {err}")
            return {"id": iid, "ok": False, "error": f"instance did not start: {err}"}
        ok, phase = await self._wait_ready(inst, t_spawn)
        if not ok:
            reason = inst.exit_reason or phase
            await self.stop_instance(iid, reason=reason)
            return {"id": iid, "ok": False, "error": f"instance did not become ready: {reason}"}
        await self.runtime.ready(inst)
        inst.state = "ready"
        return {
            "id": iid,
            "ok": True,
            "port": inst.port,
            "url": inst.url,
            "image_pull_s": inst.image_pull_s,
            "download_s": inst.image_pull_s - inst.unpack_s,
            "unpack_s": inst.unpack_s,
            "bytes_pulled": inst.bytes_pulled,
            "start_s": inst.start_s,
            "init_s": inst.init_s,
            "images": sorted(self.runtime.images),
        }

    async def _wait_ready(self, inst: Instance, t_spawn: float) -> tuple[bool, str]:
        """Poll /healthz (start done: the process serves) then /readyz (init done: handler loaded)."""
        assert self._session is not None
        deadline = t_spawn + READY_TIMEOUT_S
        phase, t_phase = "healthz", t_spawn
        while time.monotonic() < deadline:
            why = self.runtime.exited(inst)
            if why is not None:
                inst.exit_reason = inst.exit_reason or why
                return False, f"{why} during {phase}"
            if inst.state == "stopped":
                return False, "stopped"
            try:
                async with self._session.get(f"{inst.url}/{phase}", timeout=ClientTimeout(total=1.0)) as r:
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
            await asyncio.sleep(READY_POLL_S)
        return False, f"timeout during {phase}"

    async def stop_instance(self, iid: str, *, reason: str = "deleted") -> bool:
        inst = self.instances.pop(iid, None)
        if inst is None:
            return False
        inst.state = "stopped"
        inst.exit_reason = inst.exit_reason or reason
        await self.runtime.stop(inst)
        self.state.remove_proc("instance", iid)
        return True

    async def reset(self, images: list[str]) -> None:
        """Every instance stopped, the image store as the spec has it, and the noisy neighbour
        restarted, so its sine starts at the same phase before every run (it ran free from the
        agent's start, so each run met it at an arbitrary phase: measurement.md, noise source 5)."""
        for iid in list(self.instances):
            await self.stop_instance(iid, reason="reset")
        await self.runtime.reset(images)
        self._stop_neighbours()
        self._start_neighbours()

    def _stop_neighbours(self) -> None:
        for i, proc in enumerate(self._neighbours):
            proc.kill()
            proc.wait()
            self.state.remove_proc("neighbour", f"{self.node.name}-{i}")
        self._neighbours = []

    # --- memory watch ---
    async def _memory_watch(self) -> None:
        while True:
            await asyncio.sleep(MEMORY_POLL_S)
            self.runtime.check([i for i in self.instances.values() if i.state != "stopped"])

    # --- HTTP ---
    def status(self) -> dict[str, Any]:
        return {
            "node": self.node.name,
            "pid": os.getpid(),
            "images": sorted(self.runtime.images),
            "cpu_mode": self.cpu_mode.mode,
            "speed_scale": self.speed_scale,
            **self.runtime.status(),
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
                                                               pod=body.get("pod"), limits=body.get("limits")))

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
            await self.runtime.reset(list(self.node.images))
            self._start_neighbours()
            watch = asyncio.create_task(self._memory_watch())
            yield
            watch.cancel()
            for iid in list(self.instances):
                await self.stop_instance(iid, reason="agent stopped")
            self._stop_neighbours()
            await self._session.close()
            await self.runtime.close()
            self.limiter.close()

        app.cleanup_ctx.append(lifecycle)
        return app


READY_POLL_S = 0.1
"""How often a starting pod is asked whether it serves: every 20 ms (before) made four agents'
polling a load of its own beside the pods starting under the same host (measurement.md, "harness
outranks the cluster"); 100 ms is the low end of the 100-250 ms the review asked for, and adds at
most that to a measured start."""
ORPHAN_CHECK_S = 1.0
CONTROLLER_GRACE_S = 15.0
"""How long an agent outlives its lab's controller (or, before the controller first runs, the process
bringing the lab up): a run never needs an agent without a controller."""


class OrphanCheck:
    """Why this agent's lab is gone, or None while it lives: its state directory or ``lab.json``
    removed (``down`` ran, or the experiment's folder was deleted), the process that owns the lab
    gone, or for ``CONTROLLER_GRACE_S`` no controller alive -- nor, until a controller has been seen,
    the process bringing the lab up (``lab.json`` ``starter``). An agent that outlives its lab is a process nothing else
    will ever stop. The grace runs from the last moment either was alive, not from the agent's
    start: agents start before the controller, and on the container runtime bringing every node up
    (pulling and unpacking its images under its CPU quota) can take longer than the grace on a
    loaded machine -- agents that judged from their own start tore a healthy lab down before its
    controller had started."""

    def __init__(self, state: LabState, now: float) -> None:
        self.state = state
        self.vouched = now
        self.seen_controller = False

    def __call__(self, now: float) -> str | None:
        lab = self.state.read_lab()
        if lab is None:
            return f"the lab's state ({self.state.lab_file}) is gone"
        owner = lab.get("owner")
        if owner and not ProcRecord(**owner).alive():
            return f"the lab's owner (pid {owner['pid']}) is gone"
        starter = lab.get("starter")
        if self.state.live_procs("controller"):
            self.seen_controller = True
            self.vouched = now
        elif not self.seen_controller and starter and ProcRecord(**starter).alive():
            self.vouched = now  # still coming up
        elif now - self.vouched >= CONTROLLER_GRACE_S:
            return "the lab's controller is gone"
        return None


async def _orphan_watch(state: LabState, stop: asyncio.Event, verdict: list[str]) -> None:
    check = OrphanCheck(state, time.monotonic())
    while not stop.is_set():
        await asyncio.sleep(ORPHAN_CHECK_S)
        why = check(time.monotonic())
        if why is not None:
            log.warning("%s: this agent stops (its instances with it)", why)
            verdict.append(why)
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
    verdict: list[str] = []
    watch = asyncio.create_task(_orphan_watch(state, stop, verdict))
    await stop.wait()
    watch.cancel()
    await runner.cleanup()
    if verdict and state.read_lab() is not None:
        # the lab's controller or owner died and nobody ran `down`: the agents are the last of the
        # lab, so they take the rest with them (the registry, a container lab's network, the
        # cgroups); `down` takes turns on a lock, so every agent may try
        from testbed.local.teardown import down

        log.warning("tearing the rest of the lab down")
        down(state.root)
    elif verdict:
        agent.leave_lab_group()


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
