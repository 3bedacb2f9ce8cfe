"""SimBackend and evaluate: the same RunResult contract as the live backends, and the fast summary
equal to ``loadgen.results.summarize`` of the written table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.results import PLACEMENTS_SCHEMA, REQUESTS_SCHEMA, read_run, summarize
from loadgen.synth import mmpp
from testbed.backend import Backend
from testbed.scheduler.config import default_profile, profile_from_weights, profile_record
from testbed.sim import SimBackend, evaluate


@pytest.fixture(scope="module")
def workload():
    return mmpp([5.0, 50.0], [15.0, 6.0], 60.0, {"a": 0.4, "b": 0.4, "c": 0.2}, seed=2)


def test_backend_protocol_and_run_directory(tmp_path, small_cluster, small_specs, workload):
    b = SimBackend(small_cluster, small_specs, seed=1)
    assert isinstance(b, Backend) and b.name == "sim"
    b.reset()
    applied = profile_from_weights({"ImageLocality": 10})
    b.apply(applied)
    r = b.run(workload, tmp_path / "run")
    b.close()
    back = read_run(tmp_path / "run")
    assert list(back.requests.columns) == REQUESTS_SCHEMA.names
    assert list(back.placements.columns) == PLACEMENTS_SCHEMA.names
    assert len(back.requests) == len(workload)
    assert back.requests["request_id"].tolist() == list(range(len(workload)))
    assert np.allclose(back.requests["scheduled_s"], workload.frame["t_s"])
    assert set(back.requests["function"]) == set(workload.functions)
    ok = back.requests["status"] == "ok"
    assert back.requests.loc[ok, "node"].notna().all()
    assert back.requests.loc[ok, "cold_start"].notna().all()
    assert set(back.requests["node"].dropna()) <= {n.name for n in small_cluster.nodes}
    assert (back.requests.loc[ok, "http_status"] == 200).all()
    assert len(back.placements) == r.summary["pods_created"]
    assert back.placements["node"].dropna().isin([n.name for n in small_cluster.nodes]).all()
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["backend"] == "sim" and s["seed"] == 1 and s["cluster"] == small_cluster.name
    assert set(s["profile"]) == {"scheduler_name", "weights", "config"}  # the shape of every backend
    assert s["profile"] == profile_record(applied) and s["profile"]["weights"]["ImageLocality"] == 10
    assert s["cold_starts"] == int(back.requests["cold_start"].fillna(False).sum())


def test_without_apply_the_default_profile_it_ran_with_is_recorded(tmp_path, small_cluster, small_specs, workload):
    b = SimBackend(small_cluster, small_specs, seed=1)
    s = json.loads((b.run(workload, tmp_path / "run").directory / "summary.json").read_text())
    assert s["profile"] == profile_record(default_profile())


def test_evaluate_matches_summarize(tmp_path, small_cluster, small_specs, workload):
    prof = default_profile()
    fast = evaluate(small_cluster, workload, prof, seed=5, functions=small_specs)
    b = SimBackend(small_cluster, small_specs, seed=5)
    b.apply(prof)
    r = b.run(workload, tmp_path / "r")
    full = summarize(r.requests)
    for k, v in full.items():
        assert fast[k] == v, k
    assert fast["timeout_s"] == 30.0 and fast["count"] == len(workload)


def test_evaluate_unknown_function(small_cluster, small_specs):
    from functions.errors import InputError
    from loadgen.workload import make_workload

    with pytest.raises(InputError, match="no spec"):
        evaluate(small_cluster, make_workload([1.0], ["nope"]), default_profile(), functions=small_specs)


def test_shipped_suite_runs_end_to_end():
    """The real function suite on a shipped cluster through the real scheduler."""
    from loadgen.synth import poisson
    from testbed.cluster import load_cluster

    wl = poisson(6.0, 30.0, ["float-ops", "aes", "json-serde"], seed=0)
    s = evaluate(load_cluster("lab-small"), wl, default_profile(), seed=0)
    assert s["count"] == len(wl) and s["ok"] > 0.9 * len(wl)
    assert s["cold_starts"] > 0
