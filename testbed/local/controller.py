"""The lab controller: ingress/activator, KPA autoscaler and scheduler in one asyncio process.

Knative splits these over the activator, the autoscaler and the KPA reconciler, and Kubernetes adds
kube-scheduler and the kubelets (here: the node agents). On one machine one event loop carries the
control path, so the metrics the autoscaler reads are exactly the concurrency the ingress sees:

- **ingress/activator** (every path but ``/_lab/``): routes on ``X-Scoretune-Function`` (or a
  ``/fn/NAME`` path) to a ready instance with a free slot, buffers while there is none, and answers
  with ``X-Scoretune-Node`` and ``X-Scoretune-Cold-Start`` (true when the request waited for an
  instance that became ready after it arrived);
- **autoscaler**: every second the time-weighted in-flight count of each function (buffered
  requests included, as the activator reports them) is recorded into the shared KPA
  (:class:`testbed.autoscaler.kpa.RevisionAutoscaler`); every 2 s it decides and reconciles the
  replicas; the first request of a function at zero pokes it at once;
- **scheduler**: each new instance is a revision pod placed by :class:`~testbed.local.placement.Placer`
  with the current profile, then started on its node's agent;
- **node health**: an agent whose process is gone marks its node not ready; its instances are gone,
  their in-flight requests fail, and the scheduler no longer places there.

Control API under ``/_lab/``: ``status``, ``profile`` (POST a KubeSchedulerConfiguration),
``reset``, ``run/begin``, ``run/end`` (placements and events since begin).

Entry point: ``python -m testbed.local.controller --state-dir DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import signal
import time
from pathlib import Path
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from testbed.autoscaler.kpa import SCRAPE_INTERVAL_S, TICK_INTERVAL_S, RevisionAutoscaler
from testbed.cluster import parse_cluster
from testbed.local.placement import Placer, profile_from_config_dict, revision_pod_object
from testbed.local.routing import Instance, Revision
from testbed.local.state import LabState, ProcRecord

log = logging.getLogger(__name__)

FUNCTION_HEADER = "X-Scoretune-Function"
NODE_HEADER = "X-Scoretune-Node"
COLD_START_HEADER = "X-Scoretune-Cold-Start"
HEALTH_INTERVAL_S = 0.25
BUFFER_TIMEOUT_S = 120.0  # how long a request may wait in the activator's buffer
FORWARD_TIMEOUT_S = 120.0


class Controller:
    def __init__(self, state: LabState) -> None:
        from functions.spec import discover_specs
        from testbed.scheduler.config import default_profile

        lab = state.read_lab()
        if lab is None:
            raise SystemExit(f"no lab description in {state.lab_file}")
        self.state = state
        self.lab = lab
        self.cluster = parse_cluster(lab["cluster"], file=lab.get("cluster_file", "<cluster>"))
        self.specs = discover_specs()
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
        self.revisions: dict[str, Revision] = {}
        self.autoscalers: dict[str, RevisionAutoscaler] = {}
        self.history: list[Instance] = []
        self.events: list[dict[str, Any]] = []
        self.counters: dict[str, int] = {}
        self.run_t0: float | None = None
        self._seq = 0
        self._tasks: set[asyncio.Task] = set()
        self._lock = asyncio.Lock()
        self._paused = False  # during reset: no scaling decisions
        self.stop = asyncio.Event()
        owner = lab.get("owner")
        self.owner = ProcRecord(**owner) if owner else None
        self.session: ClientSession | None = None
        self._reset_functions()

    # --- state ------------------------------------------------------------------------------
    def _reset_functions(self) -> None:
        now = time.time()
        rng = random.Random(self.seed)
        self.revisions = {
            name: Revision(name, spec.container_concurrency, rng=random.Random(rng.random()))
            for name, spec in self.specs.items()
        }
        self.autoscalers = {name: RevisionAutoscaler(spec, now=now, at_zero=True) for name, spec in self.specs.items()}
        for rev in self.revisions.values():
            rev.meter.last_s = rev.meter.since_s = now
        self.counters = {name: 0 for name in self.specs}
        self.history = []
        self.events = []

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- scaling ----------------------------------------------------------------------------
    def _ready_count(self, rev: Revision) -> int:
        return len(rev.ready())

    def _apply_replicas(self, name: str, replicas: int) -> None:
        if self._paused:
            return
        rev = self.revisions[name]
        live = rev.live()
        if replicas > len(live):
            for _ in range(replicas - len(live)):
                self._new_instance(name)
        elif replicas < len(live):
            order = {"pending": 0, "starting": 1, "ready": 2}
            victims = sorted(live, key=lambda i: (order[i.state], i.active, -i.seq))[: len(live) - replicas]
            for inst in victims:
                self._remove_instance(rev, inst, reason="scaled down")
        self._schedule_pending(name)

    def _new_instance(self, name: str) -> None:
        rev = self.revisions[name]
        self.counters[name] += 1
        self._seq += 1
        pod_name = f"{name}-{self.counters[name]:05d}"
        inst = Instance(
            id=f"{pod_name}-{self.seed}",
            function=name,
            pod_name=pod_name,
            slots=rev.slots_per_instance,
            created_s=time.time(),
            seq=self._seq,
        )
        rev.instances[inst.id] = inst
        self.history.append(inst)

    def _schedule_pending(self, name: str) -> None:
        rev = self.revisions[name]
        spec = self.specs[name]
        for inst in sorted(rev.instances.values(), key=lambda i: i.seq):
            if inst.state != "pending":
                continue
            pod = revision_pod_object(spec, inst.pod_name, self.placer.profile.scheduler_name)
            node = self.placer.place(inst.pod_name, pod)
            if node is None:
                continue  # unschedulable for now; retried on the next tick
            inst.node = node
            inst.scheduled_s = time.time()
            # The node holds (or is pulling) the image from now on, as the simulator records it.
            self.placer.add_image(node, spec.image)
            inst.state = "starting"
            self._spawn(self._start(rev, inst))

    async def _start(self, rev: Revision, inst: Instance) -> None:
        assert self.session is not None and inst.node is not None
        url = self.agents[inst.node]
        try:
            async with self.session.post(
                f"{url}/instances", json={"id": inst.id, "function": inst.function}, timeout=ClientTimeout(total=600)
            ) as r:
                body = await r.json()
        except (TimeoutError, ClientError, OSError) as err:
            body = {"ok": False, "error": f"agent unreachable: {err!r}"}
        if inst.state != "starting":  # removed meanwhile
            if body.get("ok"):
                self._spawn(self._delete_on_agent(inst))
            return
        if not body.get("ok"):
            inst.failure = str(body.get("error"))
            log.warning("instance %s on %s failed: %s", inst.id, inst.node, inst.failure)
            self._gone(rev, inst)
            return
        inst.url = body["url"]
        inst.image_pull_s = float(body["image_pull_s"])
        inst.start_s = float(body["start_s"])
        inst.init_s = float(body["init_s"])
        inst.ready_s = time.time()
        inst.state = "ready"
        rev.dispatch()

    def _gone(self, rev: Revision, inst: Instance) -> None:
        if inst.state == "gone":
            return
        inst.state = "gone"
        inst.deleted_s = time.time()
        self.placer.release(inst.pod_name)
        rev.instances.pop(inst.id, None)

    def _remove_instance(self, rev: Revision, inst: Instance, *, reason: str) -> None:
        if inst.state == "pending":
            self._gone(rev, inst)
        elif inst.state == "starting":
            self._gone(rev, inst)
            self._spawn(self._delete_on_agent(inst))
        elif inst.state == "ready":
            inst.state = "draining"
            self._spawn(self._drain(rev, inst))

    async def _drain(self, rev: Revision, inst: Instance) -> None:
        while inst.active > 0 and inst.state == "draining":
            await asyncio.sleep(0.05)
        self._gone(rev, inst)
        await self._delete_on_agent(inst)

    async def _delete_on_agent(self, inst: Instance) -> None:
        if self.session is None or inst.node is None or not self.node_ready.get(inst.node, False):
            return
        try:
            async with self.session.delete(f"{self.agents[inst.node]}/instances/{inst.id}", timeout=ClientTimeout(total=30)):
                pass
        except (TimeoutError, ClientError, OSError):
            pass

    def _poke(self, name: str) -> None:
        a = self.autoscalers[name]
        rev = self.revisions[name]
        replicas = a.poke(time.time(), self._ready_count(rev), float(max(1, rev.meter.in_flight)))
        if replicas is not None:
            self._apply_replicas(name, replicas)

    async def _scrape_loop(self) -> None:
        while True:
            await asyncio.sleep(SCRAPE_INTERVAL_S - (time.time() % SCRAPE_INTERVAL_S))
            now = time.time()
            for name, rev in self.revisions.items():
                conc, arrivals = rev.meter.scrape(now)
                if rev.instances or conc > 0 or arrivals:
                    self.autoscalers[name].record(now, conc, arrivals / SCRAPE_INTERVAL_S)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S - (time.time() % TICK_INTERVAL_S) + 0.05)
            now = time.time()
            if self._paused:
                continue
            for name, rev in self.revisions.items():
                a = self.autoscalers[name]
                if not rev.instances and a.desired_scale == 0 and not rev.queue:
                    continue  # idle at zero: the decider has no data and nothing would change
                self._apply_replicas(name, a.tick(now, self._ready_count(rev)))

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            if self.owner is not None and not self.owner.alive():
                # The backend that started this lab is gone without closing it: tear it all down
                # (agents, instances, cgroups), so a crashed experiment leaves nothing behind.
                from testbed.local.lab import down

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
        lost = 0
        for rev in self.revisions.values():
            for inst in list(rev.instances.values()):
                if inst.node == node:
                    inst.failure = "node lost"
                    self._gone(rev, inst)
                    lost += 1
        self.events.append({"t_s": time.time(), "event": "node_lost", "node": node, "instances_lost": lost})
        for name in self.revisions:
            self._schedule_pending(name)

    # --- ingress ----------------------------------------------------------------------------
    def _function_of(self, request: web.Request) -> str | None:
        name = request.headers.get(FUNCTION_HEADER)
        if name:
            return name
        parts = request.path.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == "fn":
            return parts[1]
        return None

    async def ingress(self, request: web.Request) -> web.StreamResponse:
        name = self._function_of(request)
        if name is None:
            return web.json_response({"error": f"no function: set the {FUNCTION_HEADER} header or use /fn/NAME"}, status=404)
        rev = self.revisions.get(name)
        if rev is None:
            return web.json_response({"error": f"unknown function {name!r}"}, status=404)
        body = await request.read()
        arrival = time.time()
        rev.meter.change(arrival, +1)
        waited = False
        inst: Instance | None = None
        try:
            inst = rev.try_acquire() if not rev.queue else None
            if inst is None:
                waited = True
                fut = rev.enqueue(arrival)
                if self.autoscalers[name].needs_poke() or not rev.live():
                    self._poke(name)
                rev.dispatch()
                try:
                    inst = await asyncio.wait_for(fut, BUFFER_TIMEOUT_S)
                except TimeoutError:
                    return web.json_response({"error": "no instance became ready in time"}, status=503)
                except RuntimeError as err:  # the lab was reset while the request waited
                    return web.json_response({"error": str(err)}, status=503)
            cold = waited and inst.ready_s is not None and inst.ready_s > arrival
            headers = {NODE_HEADER: inst.node or "", COLD_START_HEADER: "true" if cold else "false"}
            assert self.session is not None and inst.url is not None
            try:
                async with self.session.post(
                    f"{inst.url}/",
                    data=body,
                    headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
                    timeout=ClientTimeout(total=FORWARD_TIMEOUT_S),
                ) as r:
                    data = await r.read()
                    status = r.status
                    ctype = r.headers.get("Content-Type", "application/json")
            except (TimeoutError, ClientError, OSError) as err:
                if not isinstance(err, asyncio.TimeoutError):
                    self._gone(rev, inst)  # connection failed: the instance (or its node) is gone
                return web.json_response({"error": f"instance {inst.id} failed: {err!r}"}, status=502, headers=headers)
            return web.Response(body=data, status=status, headers={**headers, "Content-Type": ctype})
        finally:
            if inst is not None:
                rev.release(inst)
            rev.meter.change(time.time(), -1)

    # --- control API ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        instances = [
            {
                "id": i.id,
                "pod": i.pod_name,
                "function": i.function,
                "node": i.node,
                "state": i.state,
                "active": i.active,
                "url": i.url,
            }
            for rev in self.revisions.values()
            for i in sorted(rev.instances.values(), key=lambda x: x.seq)
        ]
        from testbed.scheduler.config import profile_record

        return {
            "cluster": self.cluster.name,
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
            "instances": instances,
            "functions": [
                {
                    "name": name,
                    "replicas": self.autoscalers[name].pa.replicas,
                    "ready": self._ready_count(rev),
                    "queued": len(rev.queue),
                    "in_flight": rev.meter.in_flight,
                }
                for name, rev in self.revisions.items()
                if rev.instances or rev.queue or rev.meter.in_flight
            ],
            "events": self.events,
        }

    def placements(self, t0: float) -> list[dict[str, Any]]:
        def rel(x: float | None) -> float | None:
            return None if x is None else x - t0

        return [
            {
                "pod": i.pod_name,
                "function": i.function,
                "node": i.node,
                "created_s": rel(i.created_s),
                "scheduled_s": rel(i.scheduled_s),
                "ready_s": rel(i.ready_s),
                "deleted_s": rel(i.deleted_s),
                "image_pull_s": i.image_pull_s,
                "start_s": i.start_s,
                "init_s": i.init_s,
                "failure": i.failure,
            }
            for i in self.history
            if i.created_s >= t0 - 1e-6
        ]

    async def reset(self) -> dict[str, Any]:
        """Every function to zero (agents kill their instances), image caches as in the spec, a
        fresh scheduler and fresh autoscalers; nodes that were lost stay not ready."""
        async with self._lock:
            self._paused = True
            try:
                for rev in self.revisions.values():
                    rev.fail_waiters(RuntimeError("lab reset"))
                    for inst in list(rev.instances.values()):
                        inst.state = "gone"
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
            return web.json_response({"ok": True})

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
            self.run_t0 = time.time()
            self.events = []
            return web.json_response({"t0": self.run_t0})

        @routes.post("/_lab/run/end")
        async def end(request: web.Request) -> web.Response:
            t0 = self.run_t0 if self.run_t0 is not None else 0.0
            body = await request.json() if request.can_read_body else {}
            t0 = float(body.get("t0", t0))
            events = [{**e, "t_s": e["t_s"] - t0} for e in self.events]
            return web.json_response({"placements": self.placements(t0), "events": events})

        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.add_routes(routes)
        app.router.add_route("*", "/{tail:.*}", self.ingress)

        async def lifecycle(app: web.Application):
            self.session = ClientSession(connector=TCPConnector(limit=0))
            loops = [asyncio.create_task(c) for c in (self._scrape_loop(), self._tick_loop(), self._health_loop())]
            yield
            for t in loops:
                t.cancel()
            await self.session.close()

        app.cleanup_ctx.append(lifecycle)
        return app


async def _serve(state: LabState, port: int) -> None:
    controller = Controller(state)
    runner = web.AppRunner(controller.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=False)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.write_port("controller", bound)
    log.info("lab controller (ingress) listening on 127.0.0.1:%d", bound)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, controller.stop.set)
    await controller.stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local.controller")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s controller %(levelname)s %(message)s")
    asyncio.run(_serve(LabState(Path(args.state_dir)), args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
