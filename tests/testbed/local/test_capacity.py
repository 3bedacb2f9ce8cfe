"""A lab sized to its host (testbed/local/capacity.py) and CPU weights in proportion to quota."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from testbed.cluster import load_cluster
from testbed.errors import InputError, TestbedError
from testbed.local import cpu
from testbed.local.capacity import fit_host, scale_hardware, thin_mask
from testbed.local.hardware import load_hardware


def _hidden_cpu():
    spec = load_cluster("lab-hidden-cpu")
    return spec, load_hardware(spec)[0]


def test_a_cluster_bigger_than_the_host_is_scaled_by_one_factor_to_what_the_harness_leaves():
    spec, hw = _hidden_cpu()
    fit = fit_host(spec.name, hw, host=2000, reserve_milli=600)
    assert fit.demand_milli == sum(h.cpu_milli for h in hw.values()) == 4000  # 2 x 500m + 2 x 1500m
    assert fit.factor == pytest.approx(1400 / 4000)
    scaled = scale_hardware(hw, fit.factor)
    assert sum(h.cpu_milli for h in scaled.values()) <= 1400
    # the hidden trap keeps its shape: every ratio between nodes, and core speed, scale alike
    for name in hw:
        assert scaled[name].cpu_milli == pytest.approx(hw[name].cpu_milli * fit.factor, abs=1)
        assert scaled[name].core_speed == pytest.approx(hw[name].core_speed * fit.factor)
        assert scaled[name].link_bytes_per_s == hw[name].link_bytes_per_s  # links are not CPU


def test_the_neighbour_scales_with_its_node():
    spec = load_cluster("lab-hidden-neighbour")
    hw = load_hardware(spec)[0]
    fit = fit_host(spec.name, hw, host=2000, reserve_milli=600)
    scaled = scale_hardware(hw, fit.factor)
    for name, h in hw.items():
        if h.neighbour is not None:
            assert scaled[name].neighbour.cpu_milli == pytest.approx(h.neighbour.cpu_milli * fit.factor, abs=1)
            assert scaled[name].neighbour.duty_high == h.neighbour.duty_high


def test_a_cluster_that_fits_is_not_scaled():
    spec, hw = _hidden_cpu()
    fit = fit_host(spec.name, hw, host=8000, reserve_milli=600)
    assert fit.factor == 1.0 and scale_hardware(hw, fit.factor) == hw


def test_refuse_names_the_cluster_its_cores_and_the_hosts_in_one_line():
    spec, hw = _hidden_cpu()
    with pytest.raises(TestbedError) as err:
        fit_host(spec.name, hw, fit="refuse", host=2000, reserve_milli=600)
    msg = str(err.value)
    assert "\n" not in msg and "lab-hidden-cpu" in msg and "4 cores" in msg and "2 (1.4 beside the harness)" in msg


@pytest.mark.parametrize(("kw", "field"), [({"fit": "shrink"}, "--host-fit"), ({"reserve_milli": 2000}, "--reserve"),
                                          ({"reserve_milli": -1}, "--reserve")])
def test_bad_fit_options_are_one_line_naming_the_option(kw, field):
    spec, hw = _hidden_cpu()
    with pytest.raises(InputError) as err:
        fit_host(spec.name, hw, host=2000, **kw)
    assert err.value.field == field


def test_thinning_keeps_the_factor_of_every_functions_requests_spread_through_the_run():
    rng = np.random.default_rng(0)
    fns = rng.choice(np.array(["a", "b", "c"], dtype=object), size=3000, p=[0.6, 0.3, 0.1])
    keep = thin_mask(fns, 0.35)
    for f in ("a", "b", "c"):
        idx = np.flatnonzero(fns == f)
        assert keep[idx].sum() == pytest.approx(0.35 * idx.size, abs=1)
        # evenly spread: each half of a function's arrivals keeps its share
        half = idx.size // 2
        assert keep[idx[:half]].mean() == pytest.approx(0.35, abs=0.01)
    assert thin_mask(fns, 1.0).all()


def _pinned_spinner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])


def _cpu_seconds(proc: subprocess.Popen) -> float:
    return sum(psutil.Process(proc.pid).cpu_times()[:2])


def test_nodes_under_contention_split_the_cpu_in_proportion_to_their_quotas(cgroup_limiter):
    """Two nodes of 1500m and 500m (quotas above what they get, so only the weight decides), one
    spinner each, both pinned to one core: they get about 3:1 of it. Without a weight per group
    (the lab before this change) they got 1:1, and a 0.5-core node was as fast as a 1.5-core one
    whenever the host was busy (planted: the ratio was 1.0 with cpu.shares left at its default)."""
    limiter = cgroup_limiter
    procs = [_pinned_spinner(), _pinned_spinner()]
    try:
        big, small = limiter.create("big", 1500), limiter.create("small", 500)
        limiter.add(big, procs[0].pid)
        limiter.add(small, procs[1].pid)
        time.sleep(0.5)
        t0 = [_cpu_seconds(p) for p in procs]
        time.sleep(2.0)
        used = [_cpu_seconds(p) - a for p, a in zip(procs, t0, strict=True)]
        assert used[0] / max(used[1], 1e-3) > 2.0
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_weights_are_proportional_to_millicores_in_both_hierarchies():
    assert cpu.weight_for(1000, False) == 1024 and cpu.weight_for(500, False) == 512
    assert cpu.weight_for(1500, True) == 3 * cpu.weight_for(500, True)
    assert cpu.weight_for(0, False) == 2 and cpu.weight_for(0, True) == 1  # the kernels' minimums


def test_the_harness_keeps_its_share_of_the_host_whether_the_lab_is_scaled_or_not():
    """Under full contention the harness gets weight / (weight + the nodes' weights): its reserve's
    share of the host (0.6 of 2 cores) both ways. With the bare reserve as its weight on a lab run
    as declared it got 600 / (600 + 4400) = 12 %, and the neighbour cluster's load generator
    voided four attempts in a row (planted: returning the reserve fails the `off` case)."""
    from testbed.local.lab import harness_weight_milli

    spec = load_cluster("lab-hidden-neighbour")
    hw = load_hardware(spec)[0]
    for fit in ("scale", "off"):
        f = fit_host(spec.name, hw, fit=fit, host=2000, reserve_milli=600)
        nodes = scale_hardware(hw, f.factor)
        w = harness_weight_milli(nodes, f)
        assert w / (w + sum(h.cpu_milli for h in nodes.values())) == pytest.approx(0.3, abs=0.005)
