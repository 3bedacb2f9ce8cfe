"""The simulator's control plane and the run loop: Knative's autoscaling and Kubernetes' pod
lifecycle around the numba data plane of :mod:`testbed.sim.kernel`.

Time advances in 1 s segments (the queue-proxy scrape interval). Inside a segment the kernel
processes arrivals, dispatches and completions; at each boundary the control plane

1. releases pods that finished draining (unbinds them from the scheduler),
2. records each revision's stat (time-averaged in-flight requests, arrivals) into its KPA
   collector, as the scraper and the activator do once a second,
3. retries pending pods (kube-scheduler retries unschedulable pods; 1 s is its initial backoff),
4. every 2 s runs each revision's decider and PA reconciler (``testbed.autoscaler.kpa``) and
   creates or deletes pods to match the Deployment's replicas.

A request arriving for a revision whose last desired scale is 0 stops the segment so the
activator's poke can scale it up at once (Knative's cold-start fast path).

Idle stretches cost nothing: once every request has ended, no pod is left and every revision
sits at zero with an empty stable window, each control step until the next arrival is a no-op,
so time jumps to the boundary before it (same output as stepping). With min-scale pods up time
cannot be skipped, and an idle stretch longer than ``MAX_UNSKIPPABLE_IDLE_S`` is refused.

Pods are what Knative's revision pods are (``functions.knative.revision_pod``: user container and
queue-proxy with its 25m CPU request, the preferred hostname anti-affinity, a ReplicaSet owner),
parsed by ``testbed.scheduler.objects.pod_from_k8s`` and placed by ``testbed.scheduler``'s
``Scheduler`` with the current profile. Lifecycle: created -> scheduled (retried while nothing
fits) -> image pulled when the node lacks it (size / the node's pull bandwidth; the kubelet pulls
serially, and the node keeps the image afterwards) -> container start + runtime init -> ready ->
draining on scale-down (no new requests, in-flight ones finish) -> deleted.

Nothing here reads the wall clock; the only randomness is the per-request work, drawn from one
seeded generator, and the scheduler's seeded tie-breaking.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from functions.errors import InputError
from functions.knative import revision_pod
from functions.platform import DEFAULT_PLATFORM, Platform
from functions.spec import FunctionSpec
from functions.work import draw, sample_work
from testbed.autoscaler.kpa import AutoscalerConfig, RevisionAutoscaler
from testbed.errors import ClusterSpecError
from testbed.kubelet import KubeletTiming, reported_at
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.scheduler.objects import normalized_image_name, pod_from_k8s
from testbed.sim import kernel as K
from testbed.sim.progress import announce_compilation
from testbed.sim.scheduling import (
    add_node_image,
    check_feasible,
    make_scheduler,
    report_due,
    sim_nodes,
)

if TYPE_CHECKING:
    from loadgen.workload import Workload
    from testbed.cluster import ClusterSpec
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)
announce_compilation()  # before any kernel is called: a cold numba cache takes a minute to fill

MIB = 1024 * 1024
IDLE_JUMP_MIN_S = 4.0
"""An idle stretch shorter than this is stepped through (a jump would save next to nothing)."""
MAX_UNSKIPPABLE_IDLE_S = 1e6
"""The longest idle stretch simulated second by second when it cannot be skipped (about 12 days,
tens of seconds of wall time)."""
MAX_POD_SLOTS = 20_000_000
"""Nodes x the largest per-node pod count: the simulator keeps one int64 per slot (160 MB here)."""


@dataclass(frozen=True)
class SimConfig:
    """Knobs of the model that are not in a cluster or function spec, with their reasons."""

    timeout_s: float = 30.0
    """The client gives up after this long (loadgen.replay's default), so latency is capped here."""
    autoscaler: AutoscalerConfig = field(default_factory=AutoscalerConfig)
    """config-autoscaler (Knative's defaults)."""
    activator_queue_depth: int = 10_000
    """Per-revision breaker queue of the activator (``pkg/activator/net/throttler.go``); beyond it, 503."""
    unlimited_slots: int = 1000
    """In-flight cap per pod for containerConcurrency 0 (Knative: unlimited; a bound keeps arrays flat)."""
    pod_create_delay_s: float = 0.1
    """KPA decision -> Deployment -> ReplicaSet -> Pod object -> scheduler queue (API round trips)."""
    ready_delay_s: float = 0.2
    """queue-proxy readiness probe success -> endpoints -> activator/ingress learn the pod."""
    min_end_s: float = 0.0
    """Keep simulating at least this long (the run normally stops once every request has ended),
    e.g. to watch a revision scale back to zero."""
    scheduler_backoff_s: tuple[float, float] = (1.0, 10.0)
    """kube-scheduler's pod backoff (podInitialBackoffSeconds 1, podMaxBackoffSeconds 10), doubling
    per failed attempt; a pod is retried early when capacity is freed (a pod deleted), as a
    cluster event moves unschedulable pods back to the active queue."""
    interference: float = 0.0
    """Structural mismatch of a benchmark's truth (``testbed.sim.mismatch``), 0 in every twin: each
    further CPU-busy pod on a node slows every busy pod there by this fraction (shared caches and
    memory bandwidth, which CFS's fair share does not model)."""
    load_slowdown: float = 0.0
    """Structural mismatch, 0 in every twin: a node runs ``1 + x * busy cores / cores`` times slower
    as it fills (turbo headroom and SMT siblings lost under load)."""
    extra_latency_s: tuple[tuple[str, float], ...] = ()
    """Structural mismatch, empty in every twin: (node, seconds) network latency added to every
    request a node serves (per-zone distance from the ingress)."""
    cpu_cap: tuple[tuple[str, str, float], ...] = ()
    """Structural mismatch, empty in every twin: (node, function, factor) -- the function's pods on
    that node get ``factor`` of their CPU limit (a CFS throttling cliff: a quota period the runtime
    spends elsewhere, a cgroup set tighter than the pod spec says)."""
    start_stretch: tuple[tuple[str, float], ...] = ()
    """Structural mismatch, empty in every twin: (node, factor) on container start and runtime init
    there (a slow disk or overlay snapshotter, a runtime with more to do)."""
    neighbour: tuple[tuple[str, float, float, float], ...] = ()
    """Structural mismatch, empty in every twin: (node, amplitude, period s, phase) -- a process no
    API shows takes a share of the node that varies in time; the node runs at
    ``speed * (1 - amplitude * (1 + sin(2 pi t / period + phase)) / 2)``, changed every second."""
    kubelet: KubeletTiming = field(default_factory=KubeletTiming)
    """When the scheduler learns a node holds a pulled image (:mod:`testbed.kubelet`: the kubelet's
    30-s image-list refresh, then its 10-s node-status sync; at most 50 images reported), in the
    simulator, the twin and the embedded lab alike. ``KubeletTiming.immediate()``: at the pull's
    end, as the simulator counted before."""
    platform: Platform = DEFAULT_PLATFORM
    """What serves the functions: Knative Serving (KPA, activator, this module) or OpenWhisk
    (``testbed.sim.openwhisk``); :mod:`testbed.platforms` names the simulation of each."""
    openwhisk: OpenWhiskConfig = field(default_factory=OpenWhiskConfig)
    """The OpenWhisk deployment, when ``platform`` is ``openwhisk``."""


@dataclass
class SimPod:
    """Control-plane record of one pod (one placements row)."""

    slot: int
    function: int
    name: str
    created_s: float
    sched_pod: Any
    node: int = -1
    scheduled_s: float | None = None
    ready_s: float | None = None
    deleted_s: float | None = None
    image_pull_s: float | None = None
    start_s: float | None = None
    init_s: float | None = None
    released: bool = False
    retry_at: float = 0.0
    attempts: int = 0
    uid: int = -1


@dataclass
class SimOutput:
    """Per-request arrays (workload order) and the pods of one run."""

    function_names: list[str]
    node_names: list[str]
    fn: np.ndarray
    arrival_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    status: np.ndarray
    cold: np.ndarray
    node: np.ndarray
    pod_uid: np.ndarray
    pods: list[SimPod]
    events: int
    sim_end_s: float
    fault: np.ndarray | None = None
    """Per request, why it failed where the platform has a fault rule (OpenWhisk): 0 none,
    :data:`FAULT_POD_NOT_READY`, :data:`FAULT_NO_INVOKER`; None on Knative."""


FAULT_POD_NOT_READY = 1
"""The request's container was not Ready within the platform's pod-start timeout (OpenWhisk: statusCode 3)."""
FAULT_NO_INVOKER = 2
"""No invoker was healthy: the controller answered 503."""


def _baseline_memory(spec: FunctionSpec, autoscaling_target: float) -> float:
    """Resident memory of an idle pod. The request is taken to cover the idle runtime plus one
    request's working set, capped so that the pod still fits its own limit at the concurrency its
    spec is designed for (containerConcurrency, or twice the autoscaler's per-pod target when
    concurrency is unbounded): ``min(request - work, limit - cc * work)``, at least 0. Memory errors
    therefore come from nodes whose pods together outgrow the node (the scheduler packs requests;
    in-flight working sets come on top), or from a pod driven far past its design concurrency."""
    work = spec.work_memory_bytes
    cc = spec.container_concurrency or max(1, math.ceil(2 * autoscaling_target))
    return float(max(0, min(spec.memory_request_bytes - work, spec.memory_limit_bytes - cc * work)))


def check_seed(seed: Any) -> None:
    """A simulation's seed is a non-negative integer (one line naming the field otherwise)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InputError(f"the seed must be a non-negative integer, not {seed!r}", field="seed")


def workload_functions(frame: pd.DataFrame, specs: Mapping[str, FunctionSpec]
                       ) -> tuple[list[str], list[FunctionSpec], np.ndarray]:
    """The workload's functions in name order, their specs, and each request's index among them;
    a function with no spec is one line naming them and the known ones."""
    codes, uniques = pd.factorize(frame["function"], sort=True)
    used = [str(u) for u in uniques]
    missing = [n for n in used if n not in specs]
    if missing:
        raise InputError(f"workload uses function(s) {missing} with no spec; known: {sorted(specs)}", field="function")
    return used, [specs[n] for n in used], np.asarray(codes, dtype=np.int64)


def add_network_latency(extra: Mapping[str, float], node_names: list[str], node: np.ndarray, status: np.ndarray,
                        arrival: np.ndarray, finish: np.ndarray, timeout_s: float) -> None:
    """Every request a node served arrives back that much later (in place); one pushed past the
    client's timeout becomes a timeout, as the client would see it."""
    per_node = np.array([float(extra.get(name, 0.0)) for name in node_names])
    done = (node >= 0) & (status == K.ST_OK)
    finish[done] += per_node[node[done]]
    late = done & (finish - arrival > timeout_s)
    status[late] = K.ST_TIMEOUT
    finish[late] = arrival[late] + timeout_s


def request_work(
    frame: pd.DataFrame, specs: list[FunctionSpec], fn: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-request CPU work, working-set memory and I/O wait, drawn per function in name order
    from one seeded generator (every platform's simulation draws the same), with the requests'
    order by function and each function's start in it."""
    n_req = len(frame)
    rng = np.random.default_rng(seed)
    work = np.zeros(n_req)
    mem = np.zeros(n_req)
    io = np.zeros(n_req)
    custom = (frame["payload"] != "{}").to_numpy(dtype=bool) if n_req else np.zeros(0, dtype=bool)
    payloads = frame["payload"].to_numpy(dtype=object) if custom.any() else None
    order = np.argsort(fn, kind="stable")
    counts = np.bincount(fn, minlength=len(specs)) if n_req else np.zeros(len(specs), np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    for i, spec in enumerate(specs):
        rows = order[starts[i] : starts[i + 1]]
        if payloads is not None and custom[rows].any():
            w = sample_work(spec, payloads[rows].tolist(), rng)
            work[rows], mem[rows], io[rows] = w.cpu_s, w.memory_bytes, w.io_s
        else:
            # what sample_work does for default payloads, without its per-row loop
            work[rows] = draw(spec.work_cpu_s, len(rows), rng)
            mem[rows] = float(spec.work_memory_bytes)
            io[rows] = float(spec.work_io_s)
    return work, mem, io, order, starts


class Simulation:
    """One run of a workload on a cluster with one scheduler profile.

    ``scheduler`` may be given (an object with ``schedule(pod) -> int | None``, ``bind(pod, i)``,
    ``unbind(pod, i)``); by default it is ``testbed.scheduler.framework.Scheduler`` over the
    cluster's nodes with ``profile``.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        specs: Mapping[str, FunctionSpec],
        workload: Workload,
        profile: Profile | None,
        *,
        seed: int = 0,
        config: SimConfig | None = None,
        kube_version: str = "1.36",
        scheduler: Any = None,
    ) -> None:
        check_seed(seed)
        self.cluster = cluster
        self.config = cfg = config or SimConfig()
        self.profile = profile
        frame = workload.frame
        n_req = len(frame)
        self.n_req = n_req
        used, self.specs, fn = workload_functions(frame, specs)
        self.fnames = used
        t = frame["t_s"].to_numpy(dtype=np.float64)

        work, mem, io, order, starts = request_work(frame, self.specs, fn, seed)

        self.rf = np.zeros((n_req, K.RF_COLS))
        self.rf[:, K.RF_T] = t
        self.rf[:, K.RF_WORK] = work
        self.rf[:, K.RF_MEM] = mem
        self.rf[:, K.RF_IO] = io
        self.rf[:, K.RF_START] = np.nan
        self.rf[:, K.RF_FINISH] = np.nan
        self.ri = np.zeros((n_req, K.RI_COLS), dtype=np.int64)
        self.ri[:, K.RI_FN] = fn
        self.ri[:, K.RI_POD] = -1
        self.ri[:, K.RI_NODE] = -1
        self.ri[:, K.RI_UID] = -1
        self.f_idx = order.astype(np.int64)

        n_f = len(used)
        self.fi = np.zeros((n_f, K.FI_COLS), dtype=np.int64)
        self.fi[:, K.FI_START] = starts[:-1]
        self.fi[:, K.FI_END] = starts[1:]
        self.fi[:, K.FI_QMAX] = cfg.activator_queue_depth
        self.ff = np.zeros((n_f, K.FF_COLS))
        self.fi[:, K.FI_CC] = [spec.container_concurrency for spec in self.specs]
        self.f_ready = np.zeros((n_f, 16), dtype=np.int64)
        self.rng = np.array([(seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64 | 1], dtype=np.uint64)

        # ---- nodes
        nodes = cluster.nodes
        n_nodes = len(nodes)
        self.node_names = [n.name for n in nodes]
        self.nf = np.zeros((n_nodes, K.NF_COLS))
        self.nf[:, K.NF_CORES] = [n.cpu_milli / 1000.0 for n in nodes]
        self.nf[:, K.NF_SPEED] = [n.speed for n in nodes]
        self.nf[:, K.NF_MEMCAP] = [float(n.memory_bytes) for n in nodes]
        self.nf[:, K.NF_SHARE] = 1.0
        self.nf[:, K.NF_INTERF] = cfg.interference
        self.nf[:, K.NF_LOADSLOW] = cfg.load_slowdown
        self.nf[:, K.NF_ARG] = -1
        index = {name: i for i, name in enumerate(self.node_names)}
        fidx = {name: i for i, name in enumerate(used)}
        self._cpu_cap = {(index[n], fidx[f]): float(x) for n, f, x in cfg.cpu_cap if n in index and f in fidx}
        self._start_stretch = {index[n]: float(x) for n, x in cfg.start_stretch if n in index}
        self._neighbour = [(index[n], float(self.nf[index[n], K.NF_SPEED]), float(a), float(period), float(phase))
                           for n, a, period, phase in cfg.neighbour if n in index]
        width = max(1, max((n.pods for n in nodes), default=1))
        if n_nodes * width > MAX_POD_SLOTS:
            raise ClusterSpecError(
                f"{n_nodes} nodes with up to {width} pods each need {n_nodes * width} pod slots in the simulator, "
                f"more than {MAX_POD_SLOTS}: lower the node count or the pods per node",
                file=cluster.path, field="groups",
            )
        self.n_act = np.zeros((n_nodes, width), dtype=np.int64)  # CPU-active pods per node (kernel)
        self.n_nact = np.zeros(n_nodes, dtype=np.int64)
        self.nh_key = np.full(n_nodes, np.inf)
        self.nh_pos = np.arange(n_nodes, dtype=np.int64)
        self.nh_heap = np.arange(n_nodes, dtype=np.int64)
        self.pull_free = np.zeros(n_nodes)
        self.images: list[dict[str, float]] = [{normalized_image_name(img): -math.inf for img in n.images} for n in nodes]

        # ---- pods (grown on demand) and the per-pod heap pool
        self.pi = np.zeros((64, K.PI_COLS), dtype=np.int64)
        self.pf = np.zeros((64, K.PF_COLS))
        self.n_slots = 0
        self.free_slots: dict[int, list[int]] = {}
        self.hv = np.zeros(1024)
        self.hr = np.zeros(1024, dtype=np.int64)
        self.pool_top = 0
        self.tt = np.zeros(1024)
        self.tc = np.zeros(1024, dtype=np.int64)
        self.counters = np.zeros(K.C_COLS, dtype=np.int64)
        self.stop_t = np.zeros(1)

        # ---- control plane
        node_objs = sim_nodes(cluster, specs)
        if scheduler is None:
            if profile is None:
                from testbed.scheduler.config import default_profile

                profile = default_profile()
            scheduler = make_scheduler(cluster, specs, profile, kube_version=kube_version, seed=seed, nodes=node_objs)
        self.scheduler = scheduler
        self._templates: list[Any] = []
        sched_name = getattr(profile, "scheduler_name", None)
        for spec in self.specs:
            self._templates.append(pod_from_k8s(revision_pod(spec, scheduler_name=sched_name)))
        # a function whose pod fits on no node would only time out, for any weights: say so now
        check_feasible(cluster, node_objs, dict(zip(self.fnames, self._templates, strict=True)), profile)
        self.pods: list[SimPod] = []
        self.live: list[list[SimPod]] = [[] for _ in used]  # per function, pods not yet deleted
        self.pending: list[SimPod] = []
        self.draining: list[SimPod] = []
        self._pulls: list[tuple[float, int, str, int]] = []
        self.autoscalers: list[RevisionAutoscaler] = []
        self._pod_seq = 0
        self._epoch = 0  # bumped whenever capacity is freed
        self._unfit_epoch = [-1] * len(used)
        self._retry_epoch = 0
        for i, spec in enumerate(self.specs):
            warm = spec.autoscaling.min_scale
            ra = RevisionAutoscaler(spec, cfg.autoscaler, now=0.0, steady_pods=warm)
            self.autoscalers.append(ra)
            self.fi[i, K.FI_WATCH] = 1 if ra.needs_poke() else 0
            for _ in range(warm):
                self._create_pod(i, 0.0, warm_start=True)

    # ------------------------------------------------------------------ kernel storage growth
    def _alloc_slot(self, cap: int) -> int:
        free = self.free_slots.get(cap)
        if free:
            return free.pop()
        if self.n_slots == self.pi.shape[0]:
            n = self.pi.shape[0] * 2
            self.pi = np.concatenate([self.pi, np.zeros_like(self.pi)])[:n]
            self.pf = np.concatenate([self.pf, np.zeros_like(self.pf)])[:n]
        slot = self.n_slots
        self.n_slots += 1
        if self.pool_top + cap > self.hv.shape[0]:
            n = max(self.hv.shape[0] * 2, self.pool_top + cap)
            hv = np.zeros(n)
            hr = np.zeros(n, dtype=np.int64)
            hv[: self.pool_top] = self.hv[: self.pool_top]
            hr[: self.pool_top] = self.hr[: self.pool_top]
            self.hv, self.hr = hv, hr
        self.pi[slot, K.PI_HOFF] = self.pool_top
        self.pool_top += cap
        return slot

    def _ensure_timer_room(self) -> None:
        n = int(self.counters[K.C_TIMERS])
        need = n + self.n_req + 16
        if self.tt.shape[0] < need:
            size = max(need, 2 * self.tt.shape[0])
            tt = np.zeros(size)
            tc = np.zeros(size, dtype=np.int64)
            tt[:n] = self.tt[:n]
            tc[:n] = self.tc[:n]
            self.tt, self.tc = tt, tc

    # ------------------------------------------------------------------ pod lifecycle
    def _create_pod(self, f: int, now: float, *, warm_start: bool = False) -> None:
        self._pod_seq += 1
        tmpl = self._templates[f]
        name = f"{tmpl.name.rsplit('-', 1)[0]}-{self._pod_seq:05d}"
        pod = SimPod(
            slot=-1,
            function=f,
            name=name,
            created_s=now,
            sched_pod=tmpl.renamed(name, f"sim-{self._pod_seq}"),
        )
        pod.uid = len(self.pods)
        self.pods.append(pod)
        self.live[f].append(pod)
        if not self._schedule(pod, now + (0.0 if warm_start else self.config.pod_create_delay_s), warm_start=warm_start):
            self.pending.append(pod)

    def _schedule(self, pod: SimPod, now: float, *, warm_start: bool = False) -> bool:
        f = pod.function
        # Binds only consume capacity, so a pod of a revision that did not fit since the last
        # pod deletion does not fit now either: skip the scoring (the result is the same).
        idx = None if self._unfit_epoch[f] == self._epoch else self.scheduler.schedule(pod.sched_pod)
        if idx is None:
            self._unfit_epoch[f] = self._epoch
            lo, hi = self.config.scheduler_backoff_s
            pod.retry_at = now + min(hi, lo * 2.0**pod.attempts)
            pod.attempts += 1
            return False
        idx = int(idx)
        self.scheduler.bind(pod.sched_pod, idx)
        spec = self.specs[pod.function]
        pod.node = idx
        pod.scheduled_s = now
        image = normalized_image_name(spec.image)
        avail = self.images[idx].get(image)
        if warm_start:
            pull = 0.0
            if avail is None:
                self.images[idx][image] = -math.inf
                add_node_image(self.scheduler, idx, spec.image, spec.image_size_bytes)
            start, init = 0.0, 0.0
        else:
            if avail is None:
                begin = max(now, float(self.pull_free[idx]))
                end = begin + spec.image_size_bytes / self.cluster.nodes[idx].image_pull_bytes_per_s
                self.pull_free[idx] = end
                self.images[idx][image] = end
                # the kubelet reports the image in status.images after the pull, on its own loops
                self._pulls.append((reported_at(end, self.node_names[idx], self.config.kubelet), idx, spec.image,
                                    spec.image_size_bytes))
                pull = end - now
            else:
                pull = max(0.0, avail - now)
            # runtime init (imports, handler set-up) is CPU work, so it runs at the node's speed;
            # container creation and start are the runtime's and the kernel's, taken as fixed
            start, init = spec.start_s, spec.init_s / float(self.nf[idx, K.NF_SPEED])
            stretch = self._start_stretch.get(idx)
            if stretch is not None:
                start, init = start * stretch, init * stretch
        ready = now + pull + start + init + (0.0 if warm_start else self.config.ready_delay_s)
        pod.image_pull_s, pod.start_s, pod.init_s = pull, start, init
        pod.ready_s = ready

        cap = spec.container_concurrency or self.config.unlimited_slots
        slot = self._alloc_slot(cap)
        pod.slot = slot
        pi, pf = self.pi, self.pf
        pi[slot, K.PI_FN] = pod.function
        pi[slot, K.PI_NODE] = idx
        pi[slot, K.PI_STATE] = K.POD_STARTING
        pi[slot, K.PI_CAP] = cap
        pi[slot, K.PI_INFLIGHT] = 0
        pi[slot, K.PI_K] = 0
        pi[slot, K.PI_HSIZE] = 0
        pi[slot, K.PI_UID] = pod.uid
        base = _baseline_memory(spec, self.autoscalers[pod.function].decider_spec.target_value)
        pf[slot, K.PF_READY] = ready
        pf[slot, K.PF_LIMIT] = spec.cpu_limit_milli / 1000.0 * self._cpu_cap.get((idx, pod.function), 1.0)
        pf[slot, K.PF_MEM] = base
        pf[slot, K.PF_MEMLIM] = float(spec.memory_limit_bytes)
        pf[slot, K.PF_V] = 0.0
        pf[slot, K.PF_RATE] = 0.0
        self.nf[idx, K.NF_MEMUSED] += base
        pf[slot, K.PF_LAST] = 0.0
        pf[slot, K.PF_NEXT] = np.inf
        f = pod.function
        self.fi[f, K.FI_NPODS] += 1
        if self.fi[f, K.FI_NPODS] > self.f_ready.shape[1]:  # room for every bound pod to be ready
            self.f_ready = np.concatenate([self.f_ready, np.zeros_like(self.f_ready)], axis=1)
        if warm_start:
            K.pod_ready(slot, self.fi, self.f_ready, self.pi)
        if not warm_start:
            self._ensure_timer_room()
            K.timer_push(self.tt, self.tc, self.counters, ready, -(slot + 1))
        return True

    def _release(self, pod: SimPod) -> None:
        """Forget a pod that is gone: unbind it and free its kernel slot."""
        if pod.released:
            return
        pod.released = True
        if pod.node < 0:
            return
        self.scheduler.unbind(pod.sched_pod, pod.node)
        self._epoch += 1
        slot, n, f = pod.slot, pod.node, pod.function
        self.nf[n, K.NF_MEMUSED] -= self.pf[slot, K.PF_MEM]
        self.pf[slot, K.PF_MEM] = 0.0
        assert self.pi[slot, K.PI_K] == 0, "a released pod has no request on the CPU"
        self.fi[f, K.FI_NPODS] -= 1
        self.pi[slot, K.PI_STATE] = K.POD_FREE
        self.free_slots.setdefault(int(self.pi[slot, K.PI_CAP]), []).append(slot)


    def _delete_rank(self, pod: SimPod, per_node: dict[int, int]) -> tuple:
        """ReplicaSet scale-down order (``pkg/controller/controller_utils.go`` ``ActivePodsWithRanks``):
        unassigned before assigned, not-ready before ready, more replicas on the same node first,
        then the most recently ready, then the newest."""
        if pod.node < 0:
            return (0, 0, 0, 0.0, -pod.created_s)
        state = int(self.pi[pod.slot, K.PI_STATE])
        ready = 1 if state == K.POD_READY else 0
        return (1, ready, -per_node.get(pod.node, 0), -(pod.ready_s or 0.0), -pod.created_s)

    def _apply_replicas(self, f: int, want: int, now: float) -> None:
        live = self.live[f]
        if want > len(live):
            for _ in range(want - len(live)):
                self._create_pod(f, now)
        elif want < len(live):
            per_node: dict[int, int] = {}
            for p in live:
                if p.node >= 0:
                    per_node[p.node] = per_node.get(p.node, 0) + 1
            victims = sorted(live, key=lambda p: self._delete_rank(p, per_node))[: len(live) - want]
            gone = {id(p) for p in victims}
            self.live[f] = [p for p in live if id(p) not in gone]
            for p in victims:
                p.deleted_s = now
                if p.node < 0:
                    p.released = True  # dropped from the pending list at the next retry
                    continue
                if int(self.pi[p.slot, K.PI_INFLIGHT]) == 0:
                    K.pod_unready(p.slot, K.POD_DONE, self.fi, self.f_ready, self.pi)
                    self._release(p)
                else:
                    K.pod_unready(p.slot, K.POD_DRAINING, self.fi, self.f_ready, self.pi)
                    self.draining.append(p)

    def _ready_counts(self) -> np.ndarray:
        return self.fi[:, K.FI_NREADY].copy()

    # ------------------------------------------------------------------ the run
    def _kernel(self, limit: float) -> int:
        # floats whatever the caller typed: numba compiles the kernel anew (40 s) for an int timeout
        return int(
            K.run_segment(
                float(limit), float(self.config.timeout_s), self.rf, self.ri, self.fi, self.ff, self.f_idx, self.f_ready,
                self.pi, self.pf, self.nf, self.n_act, self.n_nact, self.hv, self.hr, self.nh_key,
                self.nh_pos, self.nh_heap, self.tt, self.tc, self.counters, self.stop_t, self.rng,
            )
        )

    def _sync_watch(self, f: int) -> None:
        self.fi[f, K.FI_WATCH] = 1 if self.autoscalers[f].needs_poke() else 0

    # ------------------------------------------------------------------ idle stretches
    def _quiet(self, t: float) -> bool:
        """Whether nothing is in flight at boundary ``t``: every arrived request ended, no timer, no
        pod (live, pending or draining), and the next arrival at least a few seconds away. Cheap
        checks first: on a busy run the first one fails."""
        c = self.counters
        nxt = int(c[K.C_NEXT_ARRIVAL])
        return (
            c[K.C_FINISHED] == nxt
            and nxt < self.n_req
            and c[K.C_TIMERS] == 0
            and self.rf[nxt, K.RF_T] >= t + IDLE_JUMP_MIN_S
            and not self.pending
            and not self.draining
            and not any(self.live)
        )

    def _scaler_state(self) -> list[tuple]:
        return [
            (ra.pa.state, ra.pa.state_since, ra.pa.scale_target_initialized, ra.pa.sks_mode, ra.pa.proxy_since,
             ra.pa.replicas, ra.desired_scale, ra.excess_burst_capacity)
            for ra in self.autoscalers
        ]

    def _at_rest(self, t: float, before: list[tuple]) -> bool:
        """After the decider tick at ``t``: every revision sits at zero (Inactive, 0 replicas), its
        stable window holds no data (so every later tick reads ErrNoData and leaves the decider
        alone) and the tick changed nothing. Then every tick until the next arrival is the same
        no-op: in the Inactive state the reconciler's answer does not depend on the time."""
        if self.pending or any(self.live) or self._scaler_state() != before:
            return False
        return all(
            ra.pa.state == "inactive" and ra.pa.replicas == 0 and ra.desired_scale == 0
            and ra.collector.stable_and_panic(t, ra.decider_spec.scaling_metric) is None
            for ra in self.autoscalers
        )

    def _check_idle_stretches(self) -> None:
        """Idle time is skipped (``run``) unless a revision keeps pods up (min-scale): then every
        idle second is simulated, and an idle stretch of days would run for minutes with nothing
        to learn from it. Refuse that with the way out."""
        warm = [self.fnames[i] for i, s in enumerate(self.specs) if s.autoscaling.min_scale > 0]
        if not warm or not self.n_req:
            return
        t = self.rf[:, K.RF_T]
        gaps = np.diff(t, prepend=0.0)
        i = int(np.argmax(gaps))
        if gaps[i] > MAX_UNSKIPPABLE_IDLE_S:
            start = float(t[i - 1]) if i > 0 else 0.0
            raise InputError(
                f"an idle stretch of {gaps[i]:.6g} s (from t={start:.6g} s to the arrival at t={float(t[i]):.6g} s) "
                f"cannot be skipped because {', '.join(warm)} keep(s) min-scale pods up, and simulating it second by "
                f"second would take a long time for nothing; rebase the workload (subtract the first t_s, "
                f"{float(t[0]):.6g} s) or cut the stretch (at most {MAX_UNSKIPPABLE_IDLE_S:g} s)",
                row=i, field="t_s",
            )

    def run(self, progress: Callable[[float, float], None] | None = None) -> SimOutput:
        """Simulate to the end. ``progress(sim_t, horizon)`` is called now and then (every 64 one-second
        segments) for a caller that shows progress; it is never called between kernel events.

        Idle stretches are skipped: at a decider tick where nothing is in flight and every revision
        is at rest (:meth:`_at_rest`), every control step until the boundary before the next arrival
        would be a no-op, so time jumps there. The output is the same as stepping through."""
        cfg = self.config
        n_req = self.n_req
        last_arrival = float(self.rf[-1, K.RF_T]) if n_req else 0.0
        horizon = max(math.floor(last_arrival + cfg.timeout_s) + 2.0, math.ceil(cfg.min_end_s))
        self._check_idle_stretches()
        self._ensure_timer_room()
        t = 0.0
        steps = 0
        while t < horizon:
            steps += 1
            if progress is not None and steps & 63 == 0:
                progress(t, horizon)
            limit = t + 1.0
            if self._neighbour:
                self._apply_neighbour(t)
            while True:
                code = self._kernel(limit)
                if code != K.STOP_POKE:
                    break
                f = int(self.counters[K.C_STOP_FN])
                now = float(self.stop_t[0])
                ready = int(self._ready_counts()[f])
                replicas = self.autoscalers[f].poke(now, ready)
                if replicas is not None:
                    self._apply_replicas(f, replicas, now)
                self._sync_watch(f)
            t = limit
            before = self._scaler_state() if int(t) % 2 == 0 and self._quiet(t) else None
            self._control_step(t)
            if self.counters[K.C_FINISHED] >= n_req and t > last_arrival and t >= cfg.min_end_s:
                break
            if before is not None and self._at_rest(t, before):
                # jump to the boundary just before the next arrival; the pulls that end on the
                # way are recorded there, before anything can be scheduled again
                t = float(math.floor(self.rf[int(self.counters[K.C_NEXT_ARRIVAL]), K.RF_T]))
                self._finish_pulls(t)
        # whatever never finished waited past the client's timeout
        st = self.ri[:, K.RI_STATUS]
        left = st == K.ST_PENDING
        if left.any():
            st[left] = K.ST_TIMEOUT
            self.rf[left, K.RF_FINISH] = self.rf[left, K.RF_T] + cfg.timeout_s
        if cfg.extra_latency_s:
            add_network_latency(dict(cfg.extra_latency_s), self.node_names, self.ri[:, K.RI_NODE], st,
                                self.rf[:, K.RF_T], self.rf[:, K.RF_FINISH], cfg.timeout_s)
        return SimOutput(
            function_names=list(self.fnames),
            node_names=self.node_names,
            fn=self.ri[:, K.RI_FN].copy(),
            arrival_s=self.rf[:, K.RF_T].copy(),
            start_s=self.rf[:, K.RF_START].copy(),
            finish_s=self.rf[:, K.RF_FINISH].copy(),
            status=st.copy(),
            cold=self.ri[:, K.RI_COLD].astype(bool),
            node=self.ri[:, K.RI_NODE].copy(),
            pod_uid=self.ri[:, K.RI_UID].copy(),
            pods=self.pods,
            events=int(self.counters[K.C_EVENTS]),
            sim_end_s=t,
        )

    def _apply_neighbour(self, now: float) -> None:
        """The truth's noisy neighbours (``SimConfig.neighbour``): each node's speed for the second
        that starts at ``now``."""
        for n, base, amplitude, period, phase in self._neighbour:
            duty = 0.5 * (1.0 + math.sin(2.0 * math.pi * now / period + phase))
            K.set_node_speed(n, now, base * (1.0 - amplitude * duty), self.nf, self.n_act, self.n_nact, self.pi,
                             self.pf, self.hv, self.nh_key, self.nh_pos, self.nh_heap)

    def _finish_pulls(self, now: float) -> None:
        """Pulled images the kubelet has reported by ``now``: ImageLocality sees them from now on."""
        self._pulls = report_due(self.scheduler, self._pulls, now, self.config.kubelet.max_images)

    def _control_step(self, now: float) -> None:
        # 0. image pulls that finished
        self._finish_pulls(now)
        # 1. pods whose drain finished inside the kernel
        if self.draining:
            still = []
            for p in self.draining:
                if int(self.pi[p.slot, K.PI_STATE]) == K.POD_DONE:
                    self._release(p)
                else:
                    still.append(p)
            self.draining = still
        ready = self._ready_counts()
        # 2. one stat per revision per second: in-flight average (concurrency) and arrivals (rps)
        for f, ra in enumerate(self.autoscalers):
            area = float(self.ff[f, K.FF_AREA])
            arrivals = int(self.fi[f, K.FI_ARRIVALS])
            self.ff[f, K.FF_AREA] = 0.0
            self.fi[f, K.FI_ARRIVALS] = 0
            if ready[f] > 0 or area > 0.0 or arrivals > 0:
                ra.record(now, area, float(arrivals))
        # 3. retry pods nothing could take: when their backoff expires, or at once after a deletion
        if self.pending:
            freed = self._epoch != self._retry_epoch
            self._retry_epoch = self._epoch
            still = []
            for p in self.pending:
                if p.deleted_s is not None:
                    continue
                if (freed or p.retry_at <= now) and self._schedule(p, now):
                    continue
                still.append(p)
            self.pending = still
        # 4. the decider tick
        if int(now) % 2 == 0:
            for f, ra in enumerate(self.autoscalers):
                replicas = ra.tick(now, int(ready[f]))
                self._apply_replicas(f, replicas, now)
                self._sync_watch(f)
