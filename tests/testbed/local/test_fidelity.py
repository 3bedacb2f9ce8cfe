"""Calibration maths on crafted run tables, and the fidelity report's rank correlations."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from functions.spec import discover_specs
from loadgen.results import RunResult, empty_placements, summarize
from testbed.cluster import load_cluster
from testbed.errors import InputError
from testbed.local.studies.fidelity import (
    _spearman,
    apply_calibration,
    fidelity_profiles,
    fit_timing,
    load_calibration,
    write_calibration,
)


def _result(rows, placements=None) -> RunResult:
    req = pd.DataFrame(rows)
    for col, default in (("request_id", 0), ("scheduled_s", 0.0), ("sent_s", 0.0), ("finished_s", 0.0), ("http_status", 200)):
        if col not in req:
            req[col] = default
    pl = pd.DataFrame(placements) if placements else empty_placements()
    return RunResult(requests=req, placements=pl, summary=summarize(req))


def test_fit_recovers_work_from_speed_and_limit():
    cluster = load_cluster("lab-small")  # fast-* speed 1.0, slow-* speed 0.5
    specs = discover_specs()
    aes_limit = specs["aes"].cpu_limit_milli / 1000.0  # 0.5 core: served at speed * 0.5
    rows = []
    for _ in range(10):
        # float-ops: 0.04 s of work -> 0.04 s on fast, 0.08 s on slow
        rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 0.04, "status": "ok", "cold_start": False})
        rows.append({"function": "float-ops", "node": "slow-1", "latency_s": 0.08, "status": "ok", "cold_start": False})
        rows.append({"function": "aes", "node": "fast-1", "latency_s": 0.1 / aes_limit, "status": "ok", "cold_start": False})
        # dynamic-html (limit 0.5 core): 0.02 s of work plus a fixed 0.01 s path that no speed changes
        rows.append({"function": "dynamic-html", "node": "fast-0", "latency_s": 0.01 + 0.02 / 0.5, "status": "ok", "cold_start": False})
        rows.append({"function": "dynamic-html", "node": "slow-0", "latency_s": 0.01 + 0.02 / 0.25, "status": "ok", "cold_start": False})
    # cold and failed requests say nothing about the work
    rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 9.0, "status": "ok", "cold_start": True})
    rows.append({"function": "float-ops", "node": "fast-0", "latency_s": 30.0, "status": "timeout", "cold_start": False})
    placements = [
        {"pod": f"float-ops-{i}", "function": "float-ops", "node": "fast-0", "created_s": 0.0, "scheduled_s": 1.0,
         "ready_s": 1.0 + pull + 0.7, "deleted_s": None, "image_pull_s": pull, "start_s": 0.6, "init_s": 0.1}
        for i, pull in enumerate([0.0, 2.7, 0.0])
    ]
    fitted = fit_timing([_result(rows, placements)], cluster, specs, ready_delay_s=0.2)
    assert fitted["float-ops"]["work_cpu_s_mean"] == pytest.approx(0.04)
    assert fitted["float-ops"]["work_io_s"] == pytest.approx(0.0, abs=1e-9)
    assert fitted["aes"]["work_cpu_s_mean"] == pytest.approx(0.1) and fitted["aes"]["work_io_s"] == 0.0
    assert fitted["dynamic-html"]["work_cpu_s_mean"] == pytest.approx(0.02)
    assert fitted["dynamic-html"]["work_io_s"] == pytest.approx(0.01)
    assert fitted["float-ops"]["init_s"] == pytest.approx(0.1)
    assert fitted["float-ops"]["start_s"] == pytest.approx(0.7 - 0.1 - 0.2)
    assert fitted["float-ops"]["warm_samples"] == 20 and fitted["float-ops"]["cold_samples"] == 3
    assert "start_s" not in fitted["aes"]


def test_calibration_file_round_trip(tmp_path):
    fitted = {"float-ops": {"work_cpu_s_mean": 0.05, "work_io_s": 0.01, "start_s": 0.3, "init_s": 0.02, "warm_samples": 9, "cold_samples": 2},
              "no-such-fn": {"work_cpu_s_mean": 1.0}}
    path = write_calibration(tmp_path / "cal.yaml", fitted, info={"cluster": "lab-small"})
    specs = apply_calibration(None, load_calibration(path))
    f = specs["float-ops"]
    orig = discover_specs()["float-ops"]
    assert (f.work_cpu_s.mean, f.work_io_s, f.start_s, f.init_s) == (0.05, 0.01, 0.3, 0.02)
    assert f.work_cpu_s.distribution == orig.work_cpu_s.distribution and f.work_cpu_s.cv == orig.work_cpu_s.cv
    assert specs["aes"] == discover_specs()["aes"]
    (tmp_path / "bad.yaml").write_text("just: text\n")
    with pytest.raises(InputError, match="functions"):
        load_calibration(tmp_path / "bad.yaml")


def test_profiles_are_seeded_and_start_with_the_default():
    from testbed.scheduler.config import default_profile

    a, b = fidelity_profiles(6, seed=3), fidelity_profiles(6, seed=3)
    assert a == b and a[0] == default_profile() and len(set(map(repr, a))) == 6
    with pytest.raises(InputError):
        fidelity_profiles(1)


def test_spearman_of_orderings():
    assert _spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert _spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert _spearman([1, 2, math.nan, 4, 5], [1, 2, 3, 4, 5]) == pytest.approx(1.0)  # a failed run is left out
    assert _spearman([1, 1, 1], [1, 2, 3]) is None
