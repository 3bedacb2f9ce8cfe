"""What every lab controller holds, whichever platform serves the functions: the nodes and their
agents, the scheduler, node health, the record of every instance, and the control API.

A platform (Knative's activator and KPA in :mod:`testbed.local.controllers.knative`, OpenWhisk's
controller and invokers in :mod:`testbed.local.controllers.openwhisk`) decides *when* an instance is created and which
instance serves a request; this base places each instance with the lab's scheduler, starts it on
its node's agent, notices a lost node and answers ``/_lab/``: ``status``, ``healthz``, ``profile``
(POST a KubeSchedulerConfiguration), ``reset``, ``run/begin``, ``run/end`` (placements and events
since begin). Every other path is the platform's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from loadgen.results import PodTimes
from testbed.cluster import parse_cluster
from testbed.local.placement import Placer, profile_from_config_dict
from testbed.local.routing import Instance
from testbed.local.state import LabState, ProcRecord
from testbed.local.teardown import down

log = logging.getLogger(__name__)

FORWARD_KEEPALIVE_S = 30.0
"""How long the controller keeps an idle connection to an instance: below the instance server's
own (``functions.runtime.KEEP_ALIVE_S``), so the client always closes first and never sends on a
connection the server is closing (tests/testbed/local/test_units.py holds the order)."""

HEALTH_INTERVAL_S = 0.25
REMOVED = "removed while starting"
"""What :meth:`LabControl._start_on_agent` answers for an instance removed before it was up."""


def with_image_sizes(specs: dict[str, Any], images: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The specs with the built images' real compressed sizes (a container lab's ``lab.json``):
    what its nodes report in ``Node.status.images`` and ImageLocality scores, as a kubelet does."""
    from dataclasses import replace

    return {name: replace(s, image_size_bytes=int(images[s.image]["size"])) if s.image in images else s
            for name, s in specs.items()}


class LabControl(ABC):
    """The platform-independent half of a lab controller (see the module docstring)."""

    platform = ""

    def __init__(self, state: LabState) -> None:
        from functions.spec import discover_specs
        from testbed.scheduler.config import default_profile

        lab = state.read_lab()
        if lab is None:
            raise SystemExit(f"no lab description in {state.lab_file}")
        self.state = state
        self.lab = lab
        self.cluster = parse_cluster(lab["cluster"], file=lab.get("cluster_file", "<cluster>"))
        self.specs = with_image_sizes(discover_specs(), lab.get("containers", {}).get("images", {}))
        self.seed = int(lab.get("seed", 0))
        profile = profile_from_config_dict(lab["profile"]) if lab.get("profile") else default_profile()
        self.placer = Placer(self.cluster, self.specs, profile, seed=self.seed)
        self.agents: dict[str, str] = {}
        self.agent_recs = {r.name: r for r in state.procs("agent")}
        for n in self.cluster.nodes:
            port = state.read_port(f"agent-{n.name}")
            if port is None:
                raise SystemExit(f"agent of node {n.name} has no port file")
            self.agents[n.name] = f"http://127.0.0.1:{port}"
        self.node_ready = {n.name: True for n in self.cluster.nodes}
        self.history: list[Instance] = []
        self.events: list[dict[str, Any]] = []
        self.run_t0: float | None = None
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self._lock = asyncio.Lock()
        self._paused = False  # during reset: no scaling decisions
        self.stop = asyncio.Event()
        owner = lab.get("owner")
        self.owner = ProcRecord(**owner) if owner else None
        self.session: ClientSession | None = None

    # --- what a platform provides -------------------------------------------------------------
    @abstractmethod
    def _reset_functions(self) -> None:
        """The platform's own state back to nothing running (at start and on every reset)."""

    @abstractmethod
    def _abandon_all(self) -> None:
        """On reset: every waiting request fails, every instance is forgotten (the agents kill them)."""

    @abstractmethod
    def _lose_instances(self, node: str) -> int:
        """The instances on a lost node are gone; how many there were."""

    def _loops(self) -> list[Coroutine[Any, Any, None]]:
        """The platform's periodic work, run beside the health loop."""
        return []

    def _add_routes(self, routes: web.RouteTableDef) -> None:  # noqa: B027 - optional: Knative adds none
        """The platform's paths besides ``/_lab/`` and the catch-all ingress."""

    @abstractmethod
    async def ingress(self, request: web.Request) -> web.StreamResponse:
        """Every path but ``/_lab/`` and the platform's own routes."""

    def _platform_status(self) -> dict[str, Any]:
        return {}

    def _run_end_facts(self) -> dict[str, Any]:
        """What the platform says about itself when a run ends (``run/end``), for its fault rule."""
        return {}

    # --- instances ----------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _record(self, inst: Instance) -> None:
        self._seq += 1
        inst.seq = self._seq
        self.history.append(inst)

    def _bind(self, inst: Instance, pod: Any) -> bool:
        """Schedule ``inst``'s pod with the current profile; False while it fits nowhere."""
        node = self.placer.place(inst.pod_name, pod)
        if node is None:
            return False
        inst.node = node
        inst.scheduled_s = time.time()
        # The node holds (or is pulling) the image from now on, as the simulator records it.
        self.placer.add_image(node, self.specs[inst.function].image)
        inst.state = "starting"
        return True

    async def _start_on_agent(self, inst: Instance, *, timeout_s: float = 600.0) -> str | None:
        """Start ``inst`` on its node's agent; None once it is up (its URL and cold-start parts
        filled in), else why it failed."""
        assert self.session is not None and inst.node is not None
        url = self.agents[inst.node]
        try:
            async with self.session.post(
                f"{url}/instances", json={"id": inst.id, "function": inst.function, "pod": inst.pod_name},
                timeout=ClientTimeout(total=timeout_s),
            ) as r:
                body = await r.json()
        except (TimeoutError, ClientError, OSError) as err:
            body = {"ok": False, "error": f"agent unreachable: {err!r}"}
        if inst.state != "starting":  # removed meanwhile
            if body.get("ok"):
                self._spawn(self._delete_on_agent(inst))
            return REMOVED
        if not body.get("ok"):
            inst.failure = str(body.get("error"))
            log.warning("instance %s on %s failed: %s", inst.id, inst.node, inst.failure)
            self.events.append({"t_s": time.time(), "event": "instance_failed", "instance": inst.id,
                                "node": inst.node, "function": inst.function, "reason": inst.failure})
            return inst.failure
        inst.url = body["url"]
        inst.image_pull_s = float(body["image_pull_s"])
        inst.start_s = float(body["start_s"])
        inst.init_s = float(body["init_s"])
        return None

    def _release(self, inst: Instance) -> bool:
        """``inst`` is gone (its pod deleted); False if it already was."""
        if inst.state == "gone":
            return False
        inst.state = "gone"
        inst.deleted_s = time.time()
        self.placer.release(inst.pod_name)
        return True

    async def _delete_on_agent(self, inst: Instance) -> None:
        if self.session is None or inst.node is None or not self.node_ready.get(inst.node, False):
            return
        try:
            async with self.session.delete(f"{self.agents[inst.node]}/instances/{inst.id}", timeout=ClientTimeout(total=30)):
                pass
        except (TimeoutError, ClientError, OSError):
            pass

    # --- node health --------------------------------------------------------------------------
    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            if self.owner is not None and not self.owner.alive():
                # The backend that started this lab is gone without closing it: tear it all down
                # (agents, instances, cgroups), so a crashed experiment leaves nothing behind.
                log.warning("the lab's owner (pid %d) is gone: stopping the lab", self.owner.pid)
                await asyncio.get_running_loop().run_in_executor(None, down, self.state.root)
                self.stop.set()
                return
            for node, rec in self.agent_recs.items():
                if self.node_ready[node] and not rec.alive():
                    self._node_lost(node)

    def _node_lost(self, node: str) -> None:
        log.warning("node %s lost: its agent (pid %d) is gone", node, self.agent_recs[node].pid)
        self.node_ready[node] = False
        self.placer.set_ready(node, False)
        lost = self._lose_instances(node)
        self.events.append({"t_s": time.time(), "event": "node_lost", "node": node, "instances_lost": lost})

    # --- control API --------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        from testbed.scheduler.config import profile_record

        return {
            "cluster": self.cluster.name,
            "platform": self.platform,
            "cpu": self.lab["cpu"],
            "profile": profile_record(self.placer.profile),
            "nodes": [
                {
                    "name": n.name,
                    "ready": self.node_ready[n.name],
                    "cpu_milli": n.cpu_milli,
                    "memory_bytes": n.memory_bytes,
                    "speed": n.speed,
                    "images": sorted(self.placer.images[n.name]),
                    "agent": self.agents[n.name],
                    "agent_pid": self.agent_recs[n.name].pid if n.name in self.agent_recs else None,
                }
                for n in self.cluster.nodes
            ],
            **self._platform_status(),
            "events": self.events,
        }

    def placements(self, t0: float) -> list[dict[str, Any]]:
        def rel(x: float | None) -> float | None:
            return None if x is None else x - t0

        return [
            {**PodTimes(pod=i.pod_name, function=i.function, node=i.node, created_s=i.created_s - t0,
                        scheduled_s=rel(i.scheduled_s), ready_s=rel(i.ready_s), deleted_s=rel(i.deleted_s),
                        image_pull_s=i.image_pull_s, start_s=i.start_s, init_s=i.init_s).to_row(),
             "failure": i.failure}
            for i in self.history
            if i.created_s >= t0 - 1e-6
        ]

    async def reset(self) -> dict[str, Any]:
        """Every function to zero (agents kill their instances), image caches as in the spec, a
        fresh scheduler and a fresh platform state; nodes that were lost stay not ready."""
        async with self._lock:
            self._paused = True
            try:
                self._abandon_all()
                assert self.session is not None
                for n in self.cluster.nodes:
                    if not self.node_ready[n.name]:
                        continue
                    try:
                        async with self.session.post(
                            f"{self.agents[n.name]}/reset", json={"images": list(n.images)}, timeout=ClientTimeout(total=60)
                        ) as r:
                            await r.read()
                    except (TimeoutError, ClientError, OSError) as err:
                        log.warning("reset of node %s failed: %r", n.name, err)
                self.placer.reset()
                for node, ok in self.node_ready.items():
                    if not ok:
                        self.placer.set_ready(node, False)
                self._reset_functions()
            finally:
                self._paused = False
            return {"ok": True}

    def app(self) -> web.Application:
        routes = web.RouteTableDef()

        @routes.get("/_lab/status")
        async def status(request: web.Request) -> web.Response:
            return web.json_response(self.status())

        @routes.get("/_lab/healthz")
        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"ok": True, "platform": self.platform})

        @routes.post("/_lab/profile")
        async def profile(request: web.Request) -> web.Response:
            body = await request.json()
            try:
                prof = profile_from_config_dict(body["config"], body.get("scheduler_name"))
            except Exception as err:  # reported to the client, which raises it as a ConfigError
                return web.json_response({"error": str(err)}, status=400)
            self.placer.set_profile(prof)
            return web.json_response({"ok": True})

        @routes.post("/_lab/reset")
        async def reset(request: web.Request) -> web.Response:
            return web.json_response(await self.reset())

        @routes.post("/_lab/run/begin")
        async def begin(request: web.Request) -> web.Response:
            body = await request.json() if request.can_read_body else {}
            # the replay's t = 0 when the backend fixed it (the autoscaler's clock is then aligned
            # to the run's arrivals: every run meets its ticks at the same phase), else now
            t0 = body.get("t0") if isinstance(body, dict) else None
            self.run_t0 = float(t0) if isinstance(t0, int | float) and not isinstance(t0, bool) else time.time()
            self.events = []
            return web.json_response({"t0": self.run_t0})

        @routes.post("/_lab/run/end")
        async def end(request: web.Request) -> web.Response:
            t0 = self.run_t0 if self.run_t0 is not None else 0.0
            body = await request.json() if request.can_read_body else {}
            t0 = float(body.get("t0", t0))
            events = [{**e, "t_s": e["t_s"] - t0} for e in self.events]
            return web.json_response({"placements": self.placements(t0), "events": events, **self._run_end_facts()})

        self._add_routes(routes)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.add_routes(routes)
        app.router.add_route("*", "/{tail:.*}", self.ingress)

        async def lifecycle(app: web.Application):
            self.session = ClientSession(connector=TCPConnector(limit=0, keepalive_timeout=FORWARD_KEEPALIVE_S))
            loops = [asyncio.create_task(c) for c in (*self._loops(), self._health_loop())]
            yield
            for t in loops:
                t.cancel()
            for t in list(self._tasks):
                t.cancel()
            await self.session.close()

        app.cleanup_ctx.append(lifecycle)
        return app


async def serve(controller: LabControl, state: LabState, port: int) -> None:
    runner = web.AppRunner(controller.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=False)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.write_port("controller", bound)
    log.info("lab controller (%s ingress) listening on 127.0.0.1:%d", controller.platform, bound)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop.set)
    await controller.stop.wait()
    await runner.cleanup()


__all__ = ["HEALTH_INTERVAL_S", "REMOVED", "LabControl", "serve"]
