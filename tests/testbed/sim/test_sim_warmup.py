"""Compiling the kernels once: one compiled kernel per platform whatever number types a caller's
configuration holds (a second signature is a second 40-second compile), and the warm-up's own
failures reported, not raised."""

from __future__ import annotations

import numpy as np
from sim_fixtures import make_spec

from loadgen.workload import make_workload
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.scheduler.config import default_profile
from testbed.sim import kernel as K
from testbed.sim import openwhisk_kernel as W
from testbed.sim.backend import simulate
from testbed.sim.engine import SimConfig, Simulation
from testbed.sim.warmup import compile_all, compile_kernels, main


def _workload():
    t = np.sort(np.random.default_rng(0).uniform(0, 20, 60))
    return make_workload(t, np.array(["f"] * 60))


def test_an_int_timeout_runs_the_kernel_compiled_for_floats(small_cluster) -> None:
    compile_kernels("knative")
    before = list(K.run_segment.signatures)
    assert len(before) == 1
    spec = {"f": make_spec("f", cpu_mean=0.05)}
    for timeout in (60, 60.0):  # a YAML `timeout_s: 60` is an int
        Simulation(small_cluster, spec, _workload(), default_profile(), seed=0,
                   config=SimConfig(timeout_s=timeout)).run()
    assert list(K.run_segment.signatures) == before


def test_openwhisk_runs_one_compiled_loop_whatever_its_config(small_cluster) -> None:
    compile_kernels("openwhisk")
    before = list(W.run.signatures)
    assert len(before) == 1
    spec = {"f": make_spec("f", cpu_mean=0.05)}
    for cfg in (SimConfig(platform="openwhisk", timeout_s=60),
                SimConfig(platform="openwhisk", openwhisk=OpenWhiskConfig(user_memory_mb=1024))):
        simulate(small_cluster, _workload(), None, seed=1, functions=spec, config=cfg)
    assert list(W.run.signatures) == before


def test_a_platform_that_fails_to_compile_is_reported_with_its_last_line() -> None:
    failures = compile_all(["knative", "no-such-platform"])
    assert [f.platform for f in failures] == ["no-such-platform"]
    assert failures[0].returncode == 2
    assert "unknown platform 'no-such-platform'" in failures[0].last_line


def test_an_unknown_platform_is_one_error_line(capsys) -> None:
    assert main(["nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: unknown platform 'nope'")
