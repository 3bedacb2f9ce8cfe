"""Determinism: the same inputs and seed give a byte-identical requests table, a different seed a
different one, and the simulator never reads the wall clock."""

from __future__ import annotations

import datetime
import hashlib
import time

import numpy as np
import pytest

from loadgen.synth import mmpp
from testbed.scheduler.config import default_profile
from testbed.sim import SimBackend, Simulation


@pytest.fixture(scope="module")
def workload():
    return mmpp([4.0, 40.0], [15.0, 6.0], 90.0, {"a": 0.5, "b": 0.3, "c": 0.2}, seed=7)


def _digest(path):
    return hashlib.sha256((path / "requests.parquet").read_bytes()).hexdigest()


def test_same_seed_byte_identical_requests(tmp_path, small_cluster, small_specs, workload):
    digests = []
    for i in range(2):
        b = SimBackend(small_cluster, small_specs, seed=3)
        b.apply(default_profile())
        b.run(workload, tmp_path / f"run{i}")
        digests.append(_digest(tmp_path / f"run{i}"))
    assert digests[0] == digests[1]
    b = SimBackend(small_cluster, small_specs, seed=4)
    b.apply(default_profile())
    b.run(workload, tmp_path / "other")
    assert _digest(tmp_path / "other") != digests[0]


def test_never_reads_the_wall_clock(monkeypatch, small_cluster, small_specs, workload):
    Simulation(small_cluster, small_specs, workload, default_profile(), seed=0).run()  # compile/cache first

    def forbidden(*_a, **_k):
        raise AssertionError("the simulator read the wall clock")

    for name in ("time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns"):
        monkeypatch.setattr(time, name, forbidden)

    class _NoNow(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            forbidden()

    monkeypatch.setattr(datetime, "datetime", _NoNow)
    out = Simulation(small_cluster, small_specs, workload, default_profile(), seed=0).run()
    assert np.isfinite(out.finish_s).all()
