"""The simulator's OpenWhisk platform: the controller's balancer and the invokers' container pools
(:mod:`testbed.openwhisk`) around kube-scheduler placing every new action pod.

One activation: the client's request reaches the controller, whose sharding balancer picks an
invoker (home invoker by hash, co-prime steps, memory slots; forced at random when all are full)
and, ``dispatch_s`` later through Kafka, that invoker's container pool takes it: a free warm
container of the action runs it at once; otherwise a new container is created (the least
recently used idle ones removed first if memory is short), or it waits in the invoker's buffer.
A new container is a pod (``functions.openwhisk_action.action_pod``: memory request = limit, no
CPU request, required on ``openwhisk-role=invoker`` nodes when the cluster labels any) that
kube-scheduler places with the profile under test *anywhere* among those nodes, wherever the
invoker runs: so the weights decide only where new containers go, never which container or
invoker an activation gets. The pod pulls its image if the node lacks it (serially, at the node's
bandwidth), starts, is seen Ready at the invoker's next 1 s poll, runs ``/init`` (the spec's init
time at the node's speed) and then its activations. A container idle for ``idle_timeout_s`` is
removed, its pod deleted. A pod not Ready within ``pod_start_timeout_s`` fails its activations.

Execution is the Knative model's (:mod:`testbed.sim.kernel`): each activation is single-threaded
CPU work at the node's speed, sharing the node's cores fairly with every other CPU-busy
activation there (no CPU limit on action pods), then its I/O wait; the benchmark's structural
mismatch (interference, load slowdown, per-node network latency) applies the same way. Each
invoker's health is the controller's (:mod:`testbed.openwhisk.health`): more than 3 system errors
(pods not Ready in time) among its last 10 activations make it unhealthy, the balancer passes it
over (503 when no invoker is left) and health-test actions bring it back. Not modelled: memory
errors (a container runs at most its action's concurrency, within its limit), prewarm stem cells
(a blackbox action never takes one), the health-test action's own pod, and the controller's
active-ack timeout.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from functions.openwhisk_action import (
    INVOKER_ROLE,
    action_concurrency,
    action_memory_mb,
    action_pod,
    container_name,
)
from functions.spec import FunctionSpec
from testbed.openwhisk.balancer import Balancer
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.openwhisk.health import TEST_ACTION_PERIOD_S, InvokerHealth, Result
from testbed.openwhisk.pool import Container, ContainerPool, Placement
from testbed.scheduler.objects import normalized_image_name, pod_from_k8s
from testbed.sim import kernel as K
from testbed.sim.engine import (
    FAULT_NO_INVOKER,
    FAULT_POD_NOT_READY,
    SimConfig,
    SimOutput,
    SimPod,
    add_network_latency,
    check_seed,
    request_work,
    workload_functions,
)
from testbed.sim.scheduling import add_node_image, check_feasible, filter_reason, make_scheduler, sim_nodes

if TYPE_CHECKING:
    from loadgen.workload import Workload
    from testbed.cluster import ClusterSpec
    from testbed.scheduler.config import Profile

E_RUN, E_SCHED, E_INIT, E_CPU, E_IO, E_IDLE, E_HEALTH, E_TICK = range(8)


class OpenWhiskSimulation:
    """One run of a workload on an OpenWhisk deployment over ``cluster`` with one profile."""

    def __init__(self, cluster: ClusterSpec, specs: Mapping[str, FunctionSpec], workload: Workload,
                 profile: Profile | None, *, seed: int = 0, config: SimConfig | None = None,
                 kube_version: str = "1.36") -> None:
        check_seed(seed)
        self.cluster = cluster
        self.config = cfg = config or SimConfig()
        if cfg.cpu_cap or cfg.start_stretch or cfg.neighbour:
            from testbed.errors import ConfigError

            raise ConfigError("the structural mismatch levels (CPU caps, start stretch, noisy neighbours) are "
                              "modelled in the Knative simulation only", field="--mismatch")
        self.ow: OpenWhiskConfig = cfg.openwhisk
        frame = workload.frame
        self.fnames, self.specs, self.fn = workload_functions(frame, specs)
        self.t = frame["t_s"].to_numpy(dtype=np.float64)
        self.work, _, self.io, _, _ = request_work(frame, self.specs, self.fn, seed)
        n = len(frame)
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.status = np.full(n, K.ST_PENDING, dtype=np.int64)
        self.cold = np.zeros(n, dtype=bool)
        self.node = np.full(n, -1, dtype=np.int64)
        self.pod_uid = np.full(n, -1, dtype=np.int64)
        self.fault = np.zeros(n, dtype=np.int8)
        """Why a request failed, as the one fault rule reads it (:data:`testbed.sim.engine.FAULT_POD_NOT_READY`, ...)."""
        self.function_index = {name: i for i, name in enumerate(self.fnames)}
        self.memory_mb = [action_memory_mb(s) for s in self.specs]
        self.concurrency = [action_concurrency(s) for s in self.specs]

        nodes = cluster.nodes
        self.node_names = [x.name for x in nodes]
        node_objs = sim_nodes(cluster, specs)
        if profile is None:
            from testbed.scheduler.config import default_profile

            profile = default_profile()
        self.scheduler = make_scheduler(cluster, specs, profile, kube_version=kube_version, seed=seed, nodes=node_objs)
        key, value = INVOKER_ROLE
        labelled = [x for x in node_objs if x.labels.get(key) == value]
        sched_name = getattr(profile, "scheduler_name", None)
        self.templates = [pod_from_k8s(action_pod(s, name=f"wsk-{s.name}", scheduler_name=sched_name,
                                                  node_affinity=bool(labelled))) for s in self.specs]
        check_feasible(cluster, node_objs, dict(zip(self.fnames, self.templates, strict=True)), profile)
        hosts = labelled or [x for x in node_objs if any(filter_reason(x, p, profile) is None for p in self.templates)]
        n_inv = self.ow.invokers or max(1, len(hosts))
        self.balancer = Balancer(n_inv, self.ow.user_memory_mb, managed_fraction=self.ow.managed_fraction,
                                 blackbox_fraction=self.ow.blackbox_fraction, controllers=self.ow.controllers,
                                 seed=seed)
        self.pools = [ContainerPool(self.ow.user_memory_mb) for _ in range(n_inv)]
        self.health = [InvokerHealth() for _ in range(n_inv)]

        # per node processor sharing: virtual work per active activation, its rate, a heap of finishes
        self.cores = [x.cpu_milli / 1000.0 for x in nodes]
        self.speed = [x.speed for x in nodes]
        self.v = [0.0] * len(nodes)
        self.last = [0.0] * len(nodes)
        self.rate = [0.0] * len(nodes)
        self.heap: list[list[tuple[float, int]]] = [[] for _ in nodes]
        self.version = [0] * len(nodes)
        self.busy_pods: list[dict[int, int]] = [{} for _ in nodes]
        self.pull_free = [0.0] * len(nodes)
        self.images: list[dict[str, float]] = [{normalized_image_name(img): -math.inf for img in x.images}
                                               for x in nodes]
        self.events: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.n_events = 0
        self.pods: list[SimPod] = []
        self.pending: dict[Container, int] = {}  # pods nothing could take yet -> their invoker
        self.waiting: dict[int, list[int]] = {}  # container seq (per pool) -> activations before /init
        self.served_by: dict[int, tuple[int, Container]] = {}

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, data: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, data))

    def run(self, progress: Callable[[float, float], None] | None = None) -> SimOutput:
        cfg = self.config
        n = len(self.t)
        last_arrival = float(self.t[-1]) if n else 0.0
        horizon = max(math.floor(last_arrival + cfg.timeout_s) + 2.0, math.ceil(cfg.min_end_s))
        nxt = 0
        now = 0.0
        while nxt < n or self.events:
            if nxt < n and (not self.events or self.t[nxt] <= self.events[0][0]):
                now = float(self.t[nxt])
                if now > horizon:
                    break
                self._arrive(nxt, now)
                nxt += 1
            else:
                now, _, kind, data = heapq.heappop(self.events)
                if now > horizon:
                    now = horizon
                    break
                self._handle(kind, data, now)
            self.n_events += 1
            if progress is not None and self.n_events & 0xFFFF == 0:
                progress(now, horizon)
        left = self.status == K.ST_PENDING
        self.status[left] = K.ST_TIMEOUT
        self.finish[left] = self.t[left] + cfg.timeout_s
        if cfg.extra_latency_s:
            add_network_latency(dict(cfg.extra_latency_s), self.node_names, self.node, self.status, self.t,
                                self.finish, cfg.timeout_s)
        # the client gives up at its timeout; the activation runs on in its container
        late = (self.status == K.ST_OK) & (self.finish - self.t > cfg.timeout_s)
        self.status[late] = K.ST_TIMEOUT
        self.finish[late] = self.t[late] + cfg.timeout_s
        return SimOutput(function_names=list(self.fnames), node_names=self.node_names, fn=self.fn.copy(),
                         arrival_s=self.t.copy(), start_s=self.start, finish_s=self.finish, status=self.status,
                         cold=self.cold, node=self.node, pod_uid=self.pod_uid, pods=self.pods,
                         events=self.n_events, sim_end_s=float(min(max(now, last_arrival), horizon)),
                         fault=self.fault)

    def _handle(self, kind: int, data: Any, now: float) -> None:
        if kind == E_RUN:
            i, inv = data
            f = int(self.fn[i])
            placed = self.pools[inv].run(i, self.fnames[f], self.memory_mb[f], self.concurrency[f], now)
            if placed is not None:
                self._place(i, inv, placed, now)
        elif kind == E_SCHED:
            self._schedule(data[0], data[1], now)
        elif kind == E_INIT:
            self._initialised(data[0], data[1], now)
        elif kind == E_CPU:
            node, version = data
            if version == self.version[node]:
                self._cpu_done(node, now)
        elif kind == E_IO:
            self._finish(data, now)
        elif kind == E_HEALTH:  # a health-test action came back: a success
            self._health(data, Result.SUCCESS, now)
        elif kind == E_TICK:  # the minute timer of an unhealthy invoker
            if not self.health[data].usable:
                self._push(now + self.ow.health_test_s, E_HEALTH, data)
                self._push(now + TEST_ACTION_PERIOD_S, E_TICK, data)
        elif kind == E_IDLE:
            inv, c = data
            if self.pools[inv].expire(c, now, self.ow.idle_timeout_s):
                self._delete_pod(c, now)

    # ------------------------------------------------------------------ controller and invokers
    def _arrive(self, i: int, now: float) -> None:
        f = int(self.fn[i])
        chosen = self.balancer.publish(self.ow.namespace, self.fnames[f], self.memory_mb[f], self.concurrency[f])
        if chosen is None:  # no healthy invoker: the controller answers 503 at once
            self.status[i], self.finish[i] = K.ST_ERROR, now
            self.fault[i] = FAULT_NO_INVOKER
            return
        self._push(now + self.ow.dispatch_s, E_RUN, (i, chosen[0]))

    def _place(self, i: int, inv: int, placed: Placement, now: float) -> None:
        for victim in placed.removed:
            self._delete_pod(victim, now)
        c = placed.container
        self.served_by[i] = (inv, c)
        if placed.state in ("cold", "recreated"):
            self.cold[i] = True
            self._create_pod(inv, c, now)
            self.waiting[id(c)] = [i]
        elif placed.state == "warming":
            self.waiting[id(c)].append(i)
        else:
            self._execute(i, c, now)

    def _create_pod(self, inv: int, c: Container, now: float) -> None:
        f = self.function_index[c.action]
        name = container_name(inv, c.seq, self.ow.namespace, c.action)
        tmpl = self.templates[f]
        pod = SimPod(slot=-1, function=f, name=name, created_s=now,
                     sched_pod=dataclasses.replace(tmpl, name=name, uid=f"sim-ow-{len(self.pods)}"))
        pod.uid = len(self.pods)
        self.pods.append(pod)
        c.payload = pod
        self._push(now + self.ow.pod_create_delay_s, E_SCHED, (inv, c))

    def _schedule(self, inv: int, c: Container, now: float) -> None:
        pod: SimPod = c.payload
        if c.removed or pod.node >= 0:
            return
        # the deadline exactly as the timeout event below is pushed: ``now - created > timeout`` was
        # false at that event (equal), so a pod that could never be Ready in time was rescheduled at
        # the same instant forever
        if now >= pod.created_s + self.ow.pod_start_timeout_s:
            self._fail(inv, c, now)
            return
        idx = self.scheduler.schedule(pod.sched_pod)
        if idx is None:
            lo, hi = self.config.scheduler_backoff_s
            pod.retry_at = now + min(hi, lo * 2.0**pod.attempts)
            pod.attempts += 1
            self.pending[c] = inv
            self._push(pod.retry_at, E_SCHED, (inv, c))
            return
        self.pending.pop(c, None)
        idx = int(idx)
        self.scheduler.bind(pod.sched_pod, idx)
        spec = self.specs[pod.function]
        pod.node, pod.scheduled_s = idx, now
        image = normalized_image_name(spec.image)
        avail = self.images[idx].get(image)
        if avail is None:
            begin = max(now, self.pull_free[idx])
            end = begin + spec.image_size_bytes / self.cluster.nodes[idx].image_pull_bytes_per_s
            self.pull_free[idx] = self.images[idx][image] = end
            add_node_image(self.scheduler, idx, spec.image, spec.image_size_bytes)  # status.images after the pull
            pull = end - now
        else:
            pull = max(0.0, avail - now)
        pod.image_pull_s, pod.start_s = pull, spec.start_s
        pod.init_s = spec.init_s / self.speed[idx]
        up = now + pull + spec.start_s
        seen = self.ow.seen_ready(pod.created_s, up)
        if seen - pod.created_s > self.ow.pod_start_timeout_s:
            self._push(pod.created_s + self.ow.pod_start_timeout_s, E_SCHED, (inv, c))
            pod.node = -1  # seen as never Ready: failed at the timeout
            self.scheduler.unbind(pod.sched_pod, idx)
            return
        self._push(seen + pod.init_s, E_INIT, (inv, c))

    def _initialised(self, inv: int, c: Container, now: float) -> None:
        if c.removed:
            return
        pod: SimPod = c.payload
        pod.ready_s = now
        self.pools[inv].ready(c)
        for i in self.waiting.pop(id(c), []):
            self._execute(i, c, now)

    def _health(self, inv: int, result: Result, now: float) -> None:
        """One activation's result in the invoker's health (testbed.openwhisk.health): an
        unhealthy invoker takes no activations and is sent health-test actions."""
        h = self.health[inv]
        was = h.state
        if h.record(result):
            self._push(now + self.ow.health_test_s, E_HEALTH, inv)
        if h.state is not was:
            self.balancer.healthy[inv] = h.usable
            if not h.usable:
                self._push(now + TEST_ACTION_PERIOD_S, E_TICK, inv)

    def _fail(self, inv: int, c: Container, now: float) -> None:
        for i in self.waiting.pop(id(c), []):
            self.status[i], self.finish[i] = K.ST_ERROR, now + self.ow.ack_s
            self.fault[i] = FAULT_POD_NOT_READY
            f = int(self.fn[i])
            self.balancer.release(inv, self.ow.namespace, self.fnames[f], self.memory_mb[f], self.concurrency[f])
            self._health(inv, Result.SYSTEM_ERROR, now)  # statusCode 3: a system error of the invoker
        self.pools[inv].fail(c)
        self._delete_pod(c, now)
        self._drain(inv, now)

    def _delete_pod(self, c: Container, now: float) -> None:
        pod: SimPod | None = c.payload
        if pod is None or pod.deleted_s is not None:
            return
        pod.deleted_s = now
        self.pending.pop(c, None)
        if pod.node >= 0:
            self.scheduler.unbind(pod.sched_pod, pod.node)
            for waiting, inv in self.pending.items():  # capacity freed: unschedulable pods are retried at once
                self._push(now, E_SCHED, (inv, waiting))

    def _drain(self, inv: int, now: float) -> None:
        for i, placed in self.pools[inv].drain_buffer(now):
            self._place(i, inv, placed, now)

    def _finish(self, i: int, now: float) -> None:
        inv, c = self.served_by.pop(i)
        self.status[i], self.finish[i] = K.ST_OK, now + self.ow.ack_s
        f = int(self.fn[i])
        self.balancer.release(inv, self.ow.namespace, self.fnames[f], self.memory_mb[f], self.concurrency[f])
        self._health(inv, Result.SUCCESS, now)
        self.pools[inv].done(c, now)
        if c.active == 0:
            self._push(now + self.ow.idle_timeout_s, E_IDLE, (inv, c))
        self._drain(inv, now)

    # ------------------------------------------------------------------ execution (processor sharing)
    def _execute(self, i: int, c: Container, now: float) -> None:
        pod: SimPod = c.payload
        node = pod.node
        self.start[i], self.node[i], self.pod_uid[i] = now, node, pod.uid
        if self.work[i] <= 0.0:
            self._after_cpu(i, now)
            return
        self._advance(node, now)
        heapq.heappush(self.heap[node], (self.v[node] + float(self.work[i]), i))
        self.busy_pods[node][pod.uid] = self.busy_pods[node].get(pod.uid, 0) + 1
        self._rerate(node, now)

    def _advance(self, node: int, now: float) -> None:
        self.v[node] += self.rate[node] * (now - self.last[node])
        self.last[node] = now

    def _rerate(self, node: int, now: float) -> None:
        active = len(self.heap[node])
        self.version[node] += 1
        if not active:
            self.rate[node] = 0.0
            return
        cores = self.cores[node]
        share = 1.0 if active <= cores else cores / active
        cfg = self.config
        pods = len(self.busy_pods[node])
        if cfg.interference > 0.0 and pods > 1:
            share /= 1.0 + cfg.interference * (pods - 1)
        if cfg.load_slowdown > 0.0:
            share /= 1.0 + cfg.load_slowdown * min(active, cores) / cores
        self.rate[node] = rate = self.speed[node] * share
        due = now + max(0.0, self.heap[node][0][0] - self.v[node]) / rate
        self._push(due, E_CPU, (node, self.version[node]))

    def _cpu_done(self, node: int, now: float) -> None:
        self._advance(node, now)
        heap = self.heap[node]
        eps = 1e-9 * max(1.0, self.v[node])
        while heap and heap[0][0] <= self.v[node] + eps:
            _, i = heapq.heappop(heap)
            uid = int(self.pod_uid[i])
            left = self.busy_pods[node][uid] - 1
            if left:
                self.busy_pods[node][uid] = left
            else:
                del self.busy_pods[node][uid]
            self._after_cpu(i, now)
        self._rerate(node, now)

    def _after_cpu(self, i: int, now: float) -> None:
        if self.io[i] > 0.0:
            self._push(now + float(self.io[i]), E_IO, i)
        else:
            self._finish(i, now)


__all__ = ["OpenWhiskSimulation"]
