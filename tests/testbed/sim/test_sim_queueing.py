"""Queueing sanity: one node, one function, Poisson arrivals against a fixed pool of c warm pods of
containerConcurrency 1 with one core each is an M/M/c queue (exponential work, FIFO at the
activator), so the mean wait must match Erlang C."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sim_fixtures import make_cluster, make_spec

from loadgen.synth import poisson
from testbed.scheduler.config import default_profile
from testbed.sim import kernel as K
from testbed.sim.engine import SimConfig, Simulation


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    """Mean waiting time in queue of M/M/c (Erlang C)."""
    a = lam / mu
    rho = a / c
    s = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (s + top)
    return p_wait / (c * mu - lam)


@pytest.mark.parametrize(("c", "lam", "mu"), [(3, 2.4, 1.0), (1, 0.5, 1.0)])
def test_mmc_waiting_time(c, lam, mu):
    spec = make_spec("q", cc=1, cpu_mean=1.0 / mu, dist="exponential", cv=1.0, cpu_limit="1", min_scale=c, max_scale=c)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "4", "memory": "8Gi", "speed": 1.0}])
    wl = poisson(lam, 60_000.0, ["q"], seed=11)
    sim = Simulation(cluster, {"q": spec}, wl, default_profile(), seed=5, config=SimConfig(timeout_s=1e9))
    out = sim.run()
    assert np.all(out.status == K.ST_OK)
    assert len(out.pods) == c and all(p.ready_s == 0.0 for p in out.pods)  # the warm pool never changed
    wait = out.start_s - out.arrival_s
    service = out.finish_s - out.start_s
    burn = out.arrival_s > 500.0  # skip the warm-up transient
    assert service[burn].mean() == pytest.approx(1.0 / mu, rel=0.03)
    want = erlang_c_wait(lam, mu, c)
    assert wait[burn].mean() == pytest.approx(want, rel=0.12)
    assert (wait[burn] + service[burn]).mean() == pytest.approx(want + 1.0 / mu, rel=0.06)
    assert not out.cold.any()


def test_processor_sharing_on_an_oversubscribed_node():
    """Two single-request pods with a 1-core limit each on a 1-core node run at half speed: two
    simultaneous 1 s requests both take 2 s; a speed-2 node halves that."""
    from loadgen.workload import make_workload

    for speed, want in [(1.0, 2.0), (2.0, 1.0)]:
        spec = make_spec("q", cc=1, cpu_mean=1.0, cpu_limit="1", min_scale=2, max_scale=2)
        cluster = make_cluster([{"name": "n", "count": 1, "cpu": "1", "memory": "8Gi", "speed": speed}])
        wl = make_workload([10.0, 10.0], ["q", "q"])
        out = Simulation(cluster, {"q": spec}, wl, default_profile(), seed=0).run()
        assert np.allclose(out.finish_s - out.arrival_s, want)


def test_cpu_limit_caps_a_pod():
    """A pod limited to 500m runs a 1 s request in 2 s even on an idle 4-core node."""
    from loadgen.workload import make_workload

    spec = make_spec("q", cc=1, cpu_mean=1.0, cpu_limit="500m", min_scale=1, max_scale=1)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "4", "memory": "8Gi"}])
    out = Simulation(cluster, {"q": spec}, make_workload([3.0], ["q"]), default_profile(), seed=0).run()
    assert out.finish_s[0] - out.arrival_s[0] == pytest.approx(2.0)


@pytest.mark.parametrize("dist", ["constant", "lognormal"])
def test_processor_sharing_mean_response_is_insensitive(dist):
    """M/G/1-PS: one pod with unbounded concurrency and a 1-core limit on a 1-core node shares the
    core among its requests; the mean response time is E[S] / (1 - rho) whatever the service
    distribution (constant or lognormal with cv 1)."""
    lam, mean = 0.6, 1.0
    spec = make_spec("ps", cc=0, cpu_mean=mean, dist=dist, cv=1.0 if dist == "lognormal" else 0.0, cpu_limit="1",
                     min_scale=1, max_scale=1, memory_request="16Mi", memory_limit="1Gi", work_memory="0")
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "1", "memory": "8Gi"}])
    wl = poisson(lam, 60_000.0, ["ps"], seed=21)
    out = Simulation(cluster, {"ps": spec}, wl, default_profile(), seed=2, config=SimConfig(timeout_s=1e9)).run()
    assert np.all(out.status == K.ST_OK)
    burn = out.arrival_s > 500.0
    resp = (out.finish_s - out.arrival_s)[burn]
    assert np.all(out.start_s == out.arrival_s)  # nobody waits: PS serves everyone at once
    assert resp.mean() == pytest.approx(mean / (1 - lam * mean), rel=0.08)
