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

Execution is the Knative model's processor sharing: each activation is single-threaded
CPU work at the node's speed, sharing the node's cores fairly with every other CPU-busy
activation there (no CPU limit on action pods), then its I/O wait; the benchmark's structural
mismatch (interference, load slowdown, per-node network latency) applies the same way. Each
invoker's health is the controller's (:mod:`testbed.openwhisk.health`): more than 3 system errors
(pods not Ready in time) among its last 10 activations make it unhealthy, the balancer passes it
over (503 when no invoker is left) and health-test actions bring it back. Not modelled: memory
errors (a container runs at most its action's concurrency, within its limit), prewarm stem cells
(a blackbox action never takes one), the health-test action's own pod, and the controller's
active-ack timeout.

The event loop is compiled (:mod:`testbed.sim.openwhisk_kernel`: balancer, pools, health, timers
and processor sharing over flat arrays); this module builds its arrays, places each new action pod
with kube-scheduler when the loop stops for it, and assembles the output.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from functions.openwhisk_action import (
    INVOKER_ROLE,
    action_concurrency,
    action_memory_mb,
    action_pod,
    container_name,
)
from functions.spec import FunctionSpec
from testbed.kubelet import reported_at
from testbed.openwhisk.balancer import (
    generate_hash,
    invoker_shard_mb,
    pairwise_coprime_numbers_until,
    partition,
)
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.openwhisk.health import TEST_ACTION_PERIOD_S
from testbed.scheduler.objects import normalized_image_name, pod_from_k8s
from testbed.sim import kernel as K
from testbed.sim import openwhisk_kernel as W
from testbed.sim.engine import (
    SimConfig,
    SimOutput,
    SimPod,
    add_network_latency,
    check_seed,
    request_work,
    workload_functions,
)
from testbed.sim.scheduling import check_feasible, filter_reason, make_scheduler, report_due, sim_nodes

if TYPE_CHECKING:
    from loadgen.workload import Workload
    from testbed.cluster import ClusterSpec
    from testbed.scheduler.config import Profile

BUDGET = 0x10000
"""Events per call of the compiled loop before it hands back for the progress callback."""


def _grown(a: np.ndarray, rows: int, fill: float | int, axis: int = 0) -> np.ndarray:
    """``a`` with at least ``rows`` along ``axis`` (doubling), the new part ``fill``."""
    if a.shape[axis] >= rows:
        return a
    shape = list(a.shape)
    shape[axis] = max(rows, 2 * a.shape[axis])
    out = np.full(shape, fill, dtype=a.dtype)
    out[tuple(slice(0, k) for k in a.shape)] = a
    return out


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
        t = frame["t_s"].to_numpy(dtype=np.float64)
        work, _, io, _, _ = request_work(frame, self.specs, self.fn, seed)
        n = len(frame)
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
        self.pull_free = [0.0] * len(nodes)
        self._reports: list[tuple[float, int, str, int]] = []
        """Pulls whose image the kubelet has not reported yet: (report time, node, image, size)."""
        self.images: list[dict[str, float]] = [{normalized_image_name(img): -math.inf for img in x.images}
                                               for x in nodes]
        self.pods: dict[int, SimPod] = {}  # container -> its pod, from its first scheduling attempt
        self._arrays(n, n_inv, t, work, io, nodes, seed)

    def _arrays(self, n: int, n_inv: int, t: np.ndarray, work: np.ndarray, io: np.ndarray,
                nodes: list, seed: int) -> None:
        """The compiled loop's state (column layouts in :mod:`testbed.sim.openwhisk_kernel`)."""
        ow, cfg = self.ow, self.config
        n_fn = len(self.fnames)
        self.cnt = np.zeros(W.C_COLS, dtype=np.int64)
        self.cnt[[W.C_PHEAD, W.C_PTAIL]] = -1
        self.cfg = np.zeros(W.G_COLS)
        last_arrival = float(t[-1]) if n else 0.0
        self.horizon = max(math.floor(last_arrival + cfg.timeout_s) + 2.0, math.ceil(cfg.min_end_s))
        self.cfg[[W.G_HORIZON, W.G_DISPATCH, W.G_ACK, W.G_CREATE, W.G_IDLE, W.G_TIMEOUT, W.G_HEALTH, W.G_TICK,
                  W.G_INTERF, W.G_LOADSLOW, W.G_USERMEM]] = [
            self.horizon, ow.dispatch_s, ow.ack_s, ow.pod_create_delay_s, ow.idle_timeout_s, ow.pod_start_timeout_s,
            ow.health_test_s, TEST_ACTION_PERIOD_S, cfg.interference, cfg.load_slowdown, ow.user_memory_mb]
        self.qf = np.full((n, W.QF_COLS), np.nan)
        self.qf[:, W.QF_T], self.qf[:, W.QF_WORK], self.qf[:, W.QF_IO] = t, work, io
        self.qi = np.full((n, W.QI_COLS), -1, dtype=np.int64)
        self.qi[:, W.QI_FN] = self.fn
        self.qi[:, [W.QI_STATUS, W.QI_COLD, W.QI_FAULT]] = 0
        cap = 64
        self.cf = np.full((cap, W.CF_COLS), np.nan)
        self.ci = np.full((cap, W.CI_COLS), -1, dtype=np.int64)
        self.victims = np.zeros(cap, dtype=np.int64)
        # the balancer (testbed.openwhisk.balancer.Balancer.publish for blackbox actions)
        _, blackbox = partition(n_inv, ow.managed_fraction, ow.blackbox_fraction)
        steps = pairwise_coprime_numbers_until(blackbox)
        self.fni = np.zeros((n_fn, W.FN_COLS), dtype=np.int64)
        for f, name in enumerate(self.fnames):
            h = generate_hash(ow.namespace, f"{ow.namespace}/{name}")
            self.fni[f] = [self.memory_mb[f], self.concurrency[f], h % blackbox, steps[h % len(steps)]]
        self.bal = np.array([[n_inv - blackbox, blackbox]], dtype=np.int64)
        self.inv = np.zeros((n_inv, W.IV_COLS), dtype=np.int64)
        self.inv[:, W.IV_PERMITS] = invoker_shard_mb(ow.user_memory_mb, ow.controllers)
        self.inv[:, [W.IV_BHEAD, W.IV_BTAIL]] = -1
        self.inv[:, [W.IV_UP, W.IV_USABLE]] = 1
        self.inv[:, W.IV_HLEN] = 2  # the two health tests that made it healthy (testbed.openwhisk.health)
        self.hb = np.zeros((n_inv, W.HEALTH_BUFFER), dtype=np.int64)
        self.fhead = np.full((n_inv, n_fn), -1, dtype=np.int64)
        self.ftail = np.full((n_inv, n_fn), -1, dtype=np.int64)
        self.conc = np.zeros((n_inv, n_fn), dtype=np.int64)
        self.nf = np.zeros((len(nodes), W.NF_COLS))
        self.nf[:, W.NF_CORES] = [x.cpu_milli / 1000.0 for x in nodes]
        self.nf[:, W.NF_SPEED] = [x.speed for x in nodes]
        self.ni = np.zeros((len(nodes), W.NI_COLS), dtype=np.int64)
        self.nhk = np.zeros((len(nodes), 16))
        self.nhi = np.zeros((len(nodes), 16), dtype=np.int64)
        self.ht = np.zeros(1024)
        self.hi = np.zeros((1024, 4), dtype=np.int64)
        state = random.Random(seed).getstate()[1]  # the Python balancer's random.Random(seed)
        self.mt = np.array(state[:624], dtype=np.int64)
        self.cnt[W.C_MTI] = state[624]
        self.outbox = np.zeros((64, 2), dtype=np.int64)
        self.stack = np.zeros((64, W.SK_COLS), dtype=np.int64)

    def _grow(self) -> None:
        """Enlarge every array the loop's capacity check found short, to what it asks for."""
        events, containers, heap, stack, outbox = (int(x) for x in W.capacity_needed(self.cnt))
        self.ht = _grown(self.ht, events, 0.0)
        self.hi = _grown(self.hi, events, 0)
        self.cf = _grown(self.cf, containers, np.nan)
        self.ci = _grown(self.ci, containers, -1)
        self.victims = _grown(self.victims, self.ci.shape[0], 0)
        self.nhk = _grown(self.nhk, heap, 0.0, axis=1)
        self.nhi = _grown(self.nhi, heap, 0, axis=1)
        self.stack = _grown(self.stack, stack, 0)
        self.outbox = _grown(self.outbox, outbox, 0)

    def _pod(self, c: int) -> SimPod:
        """The pod of container ``c`` (made at its first scheduling attempt or at the end)."""
        pod = self.pods.get(c)
        if pod is None:
            ci = self.ci[c]
            f, uid = int(ci[W.CI_FN]), int(ci[W.CI_PODUID])
            name = container_name(int(ci[W.CI_INV]), int(ci[W.CI_SEQ]), self.ow.namespace, self.fnames[f])
            pod = SimPod(slot=-1, function=f, name=name, created_s=float(self.cf[c, W.CF_CREATED]),
                         sched_pod=dataclasses.replace(self.templates[f], name=name, uid=f"sim-ow-{uid}"), uid=uid)
            self.pods[c] = pod
        return pod

    def _unbind_deleted(self) -> None:
        """Pods the loop deleted from a node since the last call leave the scheduler's view."""
        for k in range(int(self.cnt[W.C_OUT])):
            c, node = (int(x) for x in self.outbox[k])
            self.scheduler.unbind(self.pods[c].sched_pod, node)
        self.cnt[W.C_OUT] = 0

    def _push(self, t: float, kind: int, c: int) -> None:
        W.push_event(self.ht, self.hi, self.cnt, t, kind, int(self.ci[c, W.CI_INV]), c)

    def _schedule(self, c: int, now: float) -> None:
        """kube-scheduler places container ``c``'s pod (the loop has checked that it is still
        wanted and within its start timeout): then its pull, start, the invoker's readiness poll
        and ``/init``; or a retry with back-off while no node can take it."""
        # the pulled images the kubelets have reported by now (the scheduler reads nothing else)
        self._reports = report_due(self.scheduler, self._reports, now, self.config.kubelet.max_images)
        pod = self._pod(c)
        idx = self.scheduler.schedule(pod.sched_pod)
        if idx is None:
            lo, hi = self.config.scheduler_backoff_s
            pod.retry_at = now + min(hi, lo * 2.0**pod.attempts)
            pod.attempts += 1
            W.pending_add(self.ci, self.cnt, c)
            self._push(pod.retry_at, W.E_SCHED, c)
            return
        W.pending_remove(self.ci, self.cnt, c)
        idx = int(idx)
        self.scheduler.bind(pod.sched_pod, idx)
        spec = self.specs[pod.function]
        pod.node, pod.scheduled_s = idx, now
        self.ci[c, W.CI_NODE] = idx
        image = normalized_image_name(spec.image)
        avail = self.images[idx].get(image)
        if avail is None:
            begin = max(now, self.pull_free[idx])
            end = begin + spec.image_size_bytes / self.cluster.nodes[idx].image_pull_bytes_per_s
            self.pull_free[idx] = self.images[idx][image] = end
            # status.images lists it once the kubelet reports it (testbed.kubelet), not at the pull's start
            self._reports.append((reported_at(end, self.node_names[idx], self.config.kubelet), idx, spec.image,
                                  spec.image_size_bytes))
            pull = end - now
        else:
            pull = max(0.0, avail - now)
        pod.image_pull_s, pod.start_s = pull, spec.start_s
        pod.init_s = spec.init_s / float(self.nf[idx, W.NF_SPEED])
        up = now + pull + spec.start_s
        seen = self.ow.seen_ready(pod.created_s, up)
        if seen - pod.created_s > self.ow.pod_start_timeout_s:
            self._push(pod.created_s + self.ow.pod_start_timeout_s, W.E_SCHED, c)
            pod.node = -1  # seen as never Ready: failed at the timeout
            self.ci[c, W.CI_NODE] = -1
            self.scheduler.unbind(pod.sched_pod, idx)
            return
        self._push(seen + pod.init_s, W.E_INIT, c)

    def run(self, progress: Callable[[float, float], None] | None = None) -> SimOutput:
        """Run to the end (``progress(now, horizon)`` every :data:`BUDGET` events)."""
        while True:
            W.run(self.cnt, self.cfg, self.qf, self.qi, self.cf, self.ci, self.fni, self.bal, self.inv, self.hb,
                  self.fhead, self.ftail, self.conc, self.nf, self.ni, self.nhk, self.nhi, self.ht, self.hi, self.mt,
                  self.outbox, self.stack, self.victims, BUDGET)
            stop = int(self.cnt[W.C_STOP])
            self._unbind_deleted()
            if stop == W.STOP_END:
                break
            if stop == W.STOP_SCHED:
                self._schedule(int(self.cnt[W.C_ARG]), float(self.cfg[W.G_NOW]))
            elif stop == W.STOP_GROW:
                self._grow()
            elif progress is not None:
                progress(float(self.cfg[W.G_NOW]), self.horizon)
        return self._output()

    def _output(self) -> SimOutput:
        cfg, qf, qi = self.config, self.qf, self.qi
        t = qf[:, W.QF_T].copy()
        start, finish = qf[:, W.QF_START].copy(), qf[:, W.QF_FINISH].copy()
        status = qi[:, W.QI_STATUS].copy()
        node = qi[:, W.QI_NODE].copy()
        pod_uid = np.full(len(t), -1, dtype=np.int64)
        ran = ~np.isnan(start)  # a request names its pod once it ran there
        pod_uid[ran] = self.ci[qi[ran, W.QI_POD], W.CI_PODUID]
        pods: list[SimPod] = []
        for c in np.argsort(self.ci[: int(self.cnt[W.C_NCONT]), W.CI_PODUID], kind="stable"):
            c = int(c)
            if self.ci[c, W.CI_PODUID] < 0:
                continue
            pod = self._pod(c)
            pod.node = int(self.ci[c, W.CI_NODE])
            ready, deleted = float(self.cf[c, W.CF_READY]), float(self.cf[c, W.CF_DELETED])
            pod.ready_s = None if math.isnan(ready) else ready
            pod.deleted_s = None if math.isnan(deleted) else deleted
            pods.append(pod)
        left = status == K.ST_PENDING
        status[left] = K.ST_TIMEOUT
        finish[left] = t[left] + cfg.timeout_s
        if cfg.extra_latency_s:
            add_network_latency(dict(cfg.extra_latency_s), self.node_names, node, status, t, finish, cfg.timeout_s)
        # the client gives up at its timeout; the activation runs on in its container
        late = (status == K.ST_OK) & (finish - t > cfg.timeout_s)
        status[late] = K.ST_TIMEOUT
        finish[late] = t[late] + cfg.timeout_s
        last_arrival = float(t[-1]) if len(t) else 0.0
        now = float(self.cfg[W.G_NOW])
        return SimOutput(function_names=list(self.fnames), node_names=self.node_names, fn=self.fn.copy(),
                         arrival_s=t, start_s=start, finish_s=finish, status=status,
                         cold=qi[:, W.QI_COLD].astype(bool), node=node, pod_uid=pod_uid, pods=pods,
                         events=int(self.cnt[W.C_EVENTS]), sim_end_s=float(min(max(now, last_arrival), self.horizon)),
                         fault=qi[:, W.QI_FAULT].astype(np.int8))


__all__ = ["OpenWhiskSimulation"]
