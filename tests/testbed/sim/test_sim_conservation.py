"""Conservation laws of the simulator: every arrival ends exactly once, no node ever holds more
than its allocatable, and a cold start happens only when no ready instance had a free slot."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.synth import mmpp
from testbed.scheduler.config import default_profile, profile_from_weights
from testbed.sim import kernel as K
from testbed.sim.engine import SimConfig, Simulation
from testbed.sim.scheduling import add_node_image, make_scheduler


class CheckedScheduler:
    """The real scheduler, asserting after every bind that no node is over its allocatable."""

    def __init__(self, inner, cluster):
        self.inner = inner
        self.alloc_cpu = np.array([n.cpu_milli for n in cluster.nodes])
        self.alloc_mem = np.array([n.memory_bytes for n in cluster.nodes])
        self.alloc_pods = np.array([n.pods for n in cluster.nodes])
        self.binds = 0

    def schedule(self, pod):
        return self.inner.schedule(pod)

    def bind(self, pod, i):
        self.inner.bind(pod, i)
        self.binds += 1
        assert np.all(self.inner.requested("cpu") <= self.alloc_cpu)
        assert np.all(self.inner.requested("memory") <= self.alloc_mem)
        assert np.all(self.inner.pod_counts <= self.alloc_pods)

    def unbind(self, pod, i):
        self.inner.unbind(pod, i)

    def add_node_image(self, i, image, size):
        add_node_image(self.inner, i, image, size)

    def remove_node_image(self, i, image):
        self.inner.remove_node_image(i, image)

    @property
    def nodes(self):
        return self.inner.nodes


def _run(cluster, specs, workload, profile, *, timeout_s=30.0, seed=0):
    sched = CheckedScheduler(make_scheduler(cluster, specs, profile, kube_version="1.36", seed=seed), cluster)
    sim = Simulation(cluster, specs, workload, profile, seed=seed, config=SimConfig(timeout_s=timeout_s), scheduler=sched)
    return sim, sim.run(), sched


@pytest.fixture(scope="module")
def bursty(small_specs):
    return mmpp([5.0, 60.0], [20.0, 8.0], 120.0, {"a": 0.4, "b": 0.4, "c": 0.2}, seed=3)


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_every_arrival_ends_exactly_once(small_cluster, small_specs, bursty, strategy):
    profile = profile_from_weights({}, strategy=strategy)
    sim, out, sched = _run(small_cluster, small_specs, bursty, profile, timeout_s=10.0)
    n = len(bursty)
    assert len(out.status) == n
    assert np.all(np.isin(out.status, [K.ST_OK, K.ST_ERROR, K.ST_TIMEOUT]))
    assert int(sim.counters[K.C_FINISHED]) + int((out.status == K.ST_TIMEOUT).sum()) >= n
    lat = out.finish_s - out.arrival_s
    assert np.all(np.isfinite(lat)) and np.all(lat >= 0)
    ok = out.status == K.ST_OK
    assert np.all(lat[ok] <= 10.0 + 1e-9)
    assert np.allclose(lat[out.status == K.ST_TIMEOUT], 10.0)
    # the overload made all three outcomes appear, so the test covers them
    assert ok.sum() > 0.5 * n
    assert sched.binds == sum(1 for p in out.pods if p.node >= 0)
    # each served request ran on the node of its pod
    served = out.node >= 0
    pod_nodes = np.array([p.node for p in out.pods])
    assert np.array_equal(out.node[served], pod_nodes[out.pod_uid[served]])


def test_memory_failures_are_errors_on_a_node(small_cluster, small_specs, bursty):
    """Function b's working sets (60Mi each, 4 in flight per pod) outgrow the 1Gi slow nodes once
    MostAllocated packs pods onto them: requests that arrive then fail at once, on that node
    (whichever function they belong to)."""
    profile = profile_from_weights({}, strategy="MostAllocated")
    _, out, _ = _run(small_cluster, small_specs, bursty, profile, timeout_s=10.0)
    err = (out.status == K.ST_ERROR) & (out.node >= 0)
    assert err.sum() > 0
    assert np.all(out.finish_s[err] == out.start_s[err])
    slow = [i for i, n in enumerate(small_cluster.nodes) if n.group == "slow"]
    assert np.all(np.isin(out.node[err], slow))  # only the 1Gi nodes run out


def test_cold_starts_only_when_no_ready_instance_had_capacity(small_cluster, small_specs, bursty):
    sim, out, _ = _run(small_cluster, small_specs, bursty, default_profile(), timeout_s=1e6)
    assert np.all(out.status != K.ST_TIMEOUT)
    cap = {uid: int(sim.pi[p.slot, K.PI_CAP]) if p.slot >= 0 else 0 for uid, p in enumerate(out.pods)}
    ran = (out.node >= 0) & (out.finish_s > out.start_s)
    pods_of_fn: dict[int, list[int]] = {}
    for uid, p in enumerate(out.pods):
        pods_of_fn.setdefault(p.function, []).append(uid)
    cold = np.flatnonzero(out.cold & (out.node >= 0))
    assert cold.size > 0
    for r in cold:
        t = out.arrival_s[r]
        f = out.fn[r]
        pod = out.pods[out.pod_uid[r]]
        assert pod.ready_s > t and out.start_s[r] >= pod.ready_s - 1e-9
        for uid in pods_of_fn[f]:
            p = out.pods[uid]
            if p.ready_s is None or p.ready_s > t or (p.deleted_s is not None and p.deleted_s <= t):
                continue
            busy = np.sum(ran & (out.pod_uid == uid) & (out.start_s <= t) & (out.finish_s > t))
            assert busy >= cap[uid], f"request {r} was a cold start while pod {p.name} had a free slot"
    # and a warm request never waited for a pod that became ready after it arrived
    warm = (out.node >= 0) & ~out.cold
    ready = np.array([p.ready_s for p in out.pods])
    assert np.all(ready[out.pod_uid[warm]] <= out.arrival_s[warm] + 1e-9)
