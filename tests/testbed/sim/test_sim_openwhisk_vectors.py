"""The OpenWhisk simulation's compiled loop against the Python event loop it replaced.

Until issue 45 the OpenWhisk simulation was a Python event loop over the ported balancer
(testbed.openwhisk.balancer.Balancer), container pools (testbed.openwhisk.pool.ContainerPool) and
invoker health (testbed.openwhisk.health.InvokerHealth). :data:`GOLDEN` holds what that loop
produced on each vector below (at commit a04f889, re-frozen once since, see it: a digest of every
per-request array, every pod's record, the event count and the simulated end; then ok / errors /
timeouts, pods, events): the compiled loop (testbed.sim.openwhisk_kernel) must give the same, bit
for bit. The vectors
reach every path of the loop: warm, warming, cold and recreated placements, the run buffer, the
balancer's forced choices (its Mersenne Twister draw), idle removal, pods not Ready in time and
unhealthy invokers with their health tests and 503s, unschedulable pods retried when capacity
frees, the structural mismatch of the Knative model, and activations with no work at all (which
finish while the buffer is drained and drain it again, four levels deep).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator

import numpy as np
import pytest
from sim_fixtures import make_cluster, make_spec

from functions.spec import FunctionSpec
from loadgen.workload import Workload, make_workload
from testbed.cluster import ClusterSpec
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.scheduler.config import profile_from_weights
from testbed.sim import openwhisk_kernel as W
from testbed.sim.engine import SimConfig, SimOutput
from testbed.sim.openwhisk import OpenWhiskSimulation

GOLDEN = {
    "small": ("68afd135756ec55a", 600, 0, 0, 30, 2298),
    "small-zero-work": ("f7c773e9f4a57d50", 800, 0, 0, 454, 3601),
    "overload": ("b0a1583046966128", 278, 0, 2722, 305, 7722),
    "packed": ("13ee6b21ce46412d", 1342, 0, 158, 681, 8303),
    "mismatch": ("3324d7513a5b502b", 1199, 0, 1, 491, 6094),
    "instant": ("fb878141edfd6d5b", 1492, 0, 8, 518, 6041),
    "instant-full": ("f4784a9f9904a40f", 532, 0, 1468, 285, 5983),
    "unhealthy": ("33dfeabd943aafb7", 51, 349, 0, 123, 967),
    "full": ("8652307e5131ca5c", 124, 0, 776, 205, 13705),
    "forced": ("e6bfc45575fca05d", 173, 0, 2327, 172, 5808),
}
"""Re-frozen on 2026-12-07 when the scheduler began to learn of a pulled image at its node's
kubelet report (testbed/kubelet.py) instead of at the pull's start. With the report moved back to
the pull's start (one line in ``OpenWhiskSimulation._schedule``) every vector gave a04f889's
digest again, bit for bit: only the report's timing changed, not the compiled loop."""


def ow(extra: dict | None = None, **kw: object) -> SimConfig:
    return SimConfig(platform="openwhisk", openwhisk=OpenWhiskConfig(**kw), **(extra or {}))


def small() -> ClusterSpec:
    return make_cluster(
        [
            {"name": "fast", "count": 2, "cpu": "2", "memory": "4Gi", "speed": 1.5},
            {
                "name": "slow",
                "count": 2,
                "cpu": "2",
                "memory": "1Gi",
                "speed": 0.5,
                "images": ["registry.example/a:1"],
            },
        ]
    )


def specs() -> dict[str, FunctionSpec]:
    return {
        "a": make_spec("a", cc=1, cpu_mean=0.2, dist="exponential", cv=1.0),
        "b": make_spec(
            "b",
            cc=4,
            cpu_mean=0.3,
            dist="lognormal",
            cv=0.5,
            work_memory="60Mi",
            memory_request="128Mi",
            memory_limit="512Mi",
            io_s=0.05,
        ),
        "c": make_spec("c", cc=0, cpu_mean=0.02, target=10),
        "z": make_spec("z", cc=2, cpu_mean=1e-9, start_s=0.3, init_s=0.2),
    }


def wl(n: int = 600, T: float = 60.0, seed: int = 7, fns: tuple[str, ...] = ("a", "b", "c")) -> Workload:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, T, n))
    return make_workload(t, rng.choice(list(fns), size=n))


def vectors() -> Iterator[tuple]:
    """(name, cluster, specs, workload, profile, seed, config) of each vector."""
    sm = small()
    yield "small", sm, specs(), wl(), None, 3, ow(user_memory_mb=1024)
    yield "small-zero-work", sm, specs(), wl(800, 40.0, 1, ("a", "z", "c")), None, 0, ow(user_memory_mb=512)
    yield (
        "overload",
        sm,
        specs(),
        wl(3000, 30.0, 2, ("a", "c", "z")),
        None,
        1,
        ow(user_memory_mb=256, idle_timeout_s=5.0),
    )
    yield (
        "packed",
        sm,
        specs(),
        wl(1500, 60.0, 4),
        profile_from_weights({"NodeResourcesFit": 5, "ImageLocality": 3}),
        2,
        ow(user_memory_mb=768, idle_timeout_s=3.0),
    )
    yield (
        "mismatch",
        sm,
        specs(),
        wl(1200, 60.0, 5),
        None,
        4,
        ow(
            {"interference": 0.2, "load_slowdown": 0.3, "extra_latency_s": {"slow-0": 0.04}},
            user_memory_mb=2048,
        ),
    )
    yield "instant", sm, specs(), wl(1500, 30.0, 3, ("a", "z")), None, 2, ow(user_memory_mb=512)
    yield (
        "instant-full",
        sm,
        specs(),
        wl(2000, 20.0, 8, ("z", "c")),
        None,
        7,
        ow(user_memory_mb=256, idle_timeout_s=1.0),
    )
    # slow starts: pods not Ready in time, unhealthy invokers, 503s, health tests
    slow = make_cluster(
        [{"name": "n", "count": 2, "cpu": "2", "memory": "4Gi", "images": ["registry.example/a:1"]}]
    )
    sp = {
        "a": make_spec("a", cc=1, cpu_mean=0.01, start_s=3.0, init_s=0.1),
        "b": make_spec("b", cc=1, cpu_mean=0.05, start_s=0.2, init_s=0.1, image_size="300Mi"),
    }
    t = np.arange(0.0, 40.0, 0.1)
    yield (
        "unhealthy",
        slow,
        sp,
        make_workload(t, np.where(np.arange(len(t)) % 3 == 0, "b", "a")),
        None,
        0,
        ow(pod_start_timeout_s=1.0, health_test_s=1.0),
    )
    # a full cluster: unschedulable pods retried when capacity frees
    tiny = make_cluster([{"name": "t", "count": 2, "cpu": "1", "memory": "600Mi"}])
    sp2 = {
        "a": make_spec("a", cc=1, cpu_mean=0.3, memory_request="256Mi", memory_limit="256Mi", io_s=0.1),
        "b": make_spec("b", cc=1, cpu_mean=0.1, memory_request="256Mi", memory_limit="256Mi"),
    }
    yield (
        "full",
        tiny,
        sp2,
        wl(900, 60.0, 9, ("a", "b")),
        None,
        5,
        ow(user_memory_mb=4096, idle_timeout_s=2.0),
    )
    # forced balancer choices over 3 invokers with little memory each
    yield "forced", sm, specs(), wl(2500, 20.0, 11, ("a", "c")), None, 6, ow(user_memory_mb=256, invokers=3)


def digest(out: SimOutput) -> str:
    """Every per-request array, every pod's record, the event count and the simulated end."""
    h = hashlib.sha256()
    for a in (
        out.fn,
        out.arrival_s,
        out.start_s,
        out.finish_s,
        out.status,
        out.cold,
        out.node,
        out.pod_uid,
        out.fault,
    ):
        h.update(np.ascontiguousarray(a).tobytes())
    for p in out.pods:
        h.update(
            repr(
                (
                    p.function,
                    p.name,
                    p.created_s,
                    p.node,
                    p.scheduled_s,
                    p.ready_s,
                    p.deleted_s,
                    p.image_pull_s,
                    p.start_s,
                    p.init_s,
                    p.uid,
                    p.attempts,
                    p.retry_at,
                )
            ).encode()
        )
    h.update(repr((out.events, out.sim_end_s, out.function_names, out.node_names)).encode())
    return h.hexdigest()[:16]


def instant(sim: OpenWhiskSimulation) -> None:
    """Every third request of ``z`` does no work at all (no spec can ask for that: ``cpu_s.mean``
    must be > 0; a payload's sampled work can be 0)."""
    fn = np.asarray(sim.fn)
    z = sim.fnames.index("z") if "z" in sim.fnames else -1
    sim.qf[(fn == z) & (np.arange(len(fn)) % 3 == 0), W.QF_WORK] = 0.0


VECTORS = {v[0]: v for v in vectors()}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_each_vector_runs_exactly_as_the_python_loop_did(name: str) -> None:
    _, cluster, specs_, workload, profile, seed, config = VECTORS[name]
    sim = OpenWhiskSimulation(cluster, specs_, workload, profile, seed=seed, config=config)
    if name.startswith("instant"):
        instant(sim)
    out = sim.run()
    st = out.status
    got = (
        digest(out),
        int((st == 1).sum()),
        int((st == 2).sum()),
        int((st == 3).sum()),
        len(out.pods),
        out.events,
    )
    assert got[1:] == GOLDEN[name][1:]
    assert got[0] == GOLDEN[name][0]


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_the_balancers_draw_is_pythons_randrange(seed: int) -> None:
    """The forced choice (``usable[rng.randrange(len(usable))]``) draws from the stream that
    ``random.Random(seed)`` gives, past the Twister's 624-word refills."""
    rng = random.Random(seed)
    state = rng.getstate()[1]
    mt = np.array(state[:624], dtype=np.int64)
    cnt = np.zeros(W.C_COLS, dtype=np.int64)
    cnt[W.C_MTI] = state[624]
    sizes = [1, 2, 3, 5, 7, 8, 9, 100, 2**31 - 1, 2**32 - 1] * 150
    want = [rng.randrange(n) for n in sizes]
    got = [int(W.randbelow(mt, cnt, n)) for n in sizes]
    assert got == want
