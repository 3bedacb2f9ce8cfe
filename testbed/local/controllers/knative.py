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

The nodes, the scheduler, node health and the control API under ``/_lab/`` are every platform's
(:mod:`testbed.local.controllers.base`); a lab whose description says ``platform: openwhisk`` runs
:mod:`testbed.local.controllers.openwhisk` instead. Both start as ``python -m
testbed.local.controllers --state-dir DIR``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from aiohttp import ClientError, ClientTimeout, web

from functions.platform import Platform
from testbed.autoscaler.kpa import SCRAPE_INTERVAL_S, TICK_INTERVAL_S, RevisionAutoscaler
from testbed.local.controllers.base import REMOVED, LabControl
from testbed.local.placement import revision_pod_object
from testbed.local.routing import Instance, Revision
from testbed.local.state import LabState

log = logging.getLogger(__name__)

FUNCTION_HEADER = "X-Scoretune-Function"
NODE_HEADER = "X-Scoretune-Node"
COLD_START_HEADER = "X-Scoretune-Cold-Start"
BUFFER_TIMEOUT_S = 120.0  # how long a request may wait in the activator's buffer
FORWARD_TIMEOUT_S = 120.0


class Controller(LabControl):
    """The lab on Knative: the activator's routing and the KPA deciding each function's replicas."""

    platform = Platform.KNATIVE

    def __init__(self, state: LabState) -> None:
        super().__init__(state)
        self.revisions: dict[str, Revision] = {}
        self.autoscalers: dict[str, RevisionAutoscaler] = {}
        self.counters: dict[str, int] = {}
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

    def _abandon_all(self) -> None:
        for rev in self.revisions.values():
            rev.fail_waiters(RuntimeError("lab reset"))
            for inst in list(rev.instances.values()):
                inst.state = "gone"

    def _loops(self) -> list:
        return [self._scrape_loop(), self._tick_loop()]

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
        pod_name = f"{name}-{self.counters[name]:05d}"
        inst = Instance(
            id=f"{pod_name}-{self.seed}",
            function=name,
            pod_name=pod_name,
            slots=rev.slots_per_instance,
            created_s=time.time(),
        )
        self._record(inst)
        rev.instances[inst.id] = inst

    def _schedule_pending(self, name: str) -> None:
        rev = self.revisions[name]
        spec = self.specs[name]
        for inst in sorted(rev.instances.values(), key=lambda i: i.seq):
            if inst.state != "pending":
                continue
            pod = revision_pod_object(spec, inst.pod_name, self.placer.profile.scheduler_name)
            if not self._bind(inst, pod):
                continue  # unschedulable for now; retried on the next tick
            self._spawn(self._start(rev, inst))

    async def _start(self, rev: Revision, inst: Instance) -> None:
        failure = await self._start_on_agent(inst)
        if failure == REMOVED:
            return
        if failure is not None:
            self._gone(rev, inst)
            return
        inst.ready_s = time.time()
        inst.state = "ready"
        rev.dispatch()

    def _gone(self, rev: Revision, inst: Instance) -> None:
        if self._release(inst):
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

    def _poke(self, name: str) -> None:
        a = self.autoscalers[name]
        rev = self.revisions[name]
        replicas = a.poke(time.time(), self._ready_count(rev), float(max(1, rev.meter.in_flight)))
        if replicas is not None:
            self._apply_replicas(name, replicas)

    def _phase(self, period: float) -> float:
        """Seconds to the next multiple of ``period`` after the run's t = 0 (after the epoch between
        runs): the KPA's stat and decision clocks keep the same phase to every run's arrivals, where
        a wall-clock phase met each run at a different point (measurement.md, noise source 5)."""
        origin = self.run_t0 or 0.0
        return period - ((time.time() - origin) % period)

    async def _scrape_loop(self) -> None:
        while True:
            await asyncio.sleep(self._phase(SCRAPE_INTERVAL_S))
            now = time.time()
            for name, rev in self.revisions.items():
                conc, arrivals = rev.meter.scrape(now)
                if rev.instances or conc > 0 or arrivals:
                    self.autoscalers[name].record(now, conc, arrivals / SCRAPE_INTERVAL_S)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._phase(TICK_INTERVAL_S) + 0.05)
            now = time.time()
            if self._paused:
                continue
            for name, rev in self.revisions.items():
                a = self.autoscalers[name]
                if not rev.instances and a.desired_scale == 0 and not rev.queue:
                    continue  # idle at zero: the decider has no data and nothing would change
                self._apply_replicas(name, a.tick(now, self._ready_count(rev)))

    def _lose_instances(self, node: str) -> int:
        lost = 0
        for rev in self.revisions.values():
            for inst in list(rev.instances.values()):
                if inst.node == node:
                    inst.failure = "node lost"
                    self._gone(rev, inst)
                    lost += 1
        for name in self.revisions:
            self._schedule_pending(name)
        return lost

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
    def _platform_status(self) -> dict[str, Any]:
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
        return {
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
        }


__all__ = ["Controller"]
