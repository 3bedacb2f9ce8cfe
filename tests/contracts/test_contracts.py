"""Round trips and error messages of the cross-package contracts (DESIGN.md)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from functions.errors import InputError
from functions.spec import parse_spec, spec_to_dict
from loadgen.results import REQUESTS_SCHEMA, read_run, summarize, write_run
from loadgen.workload import make_workload, read_workload, write_workload
from testbed.cluster import cluster_to_dict, parse_cluster

SPEC = {
    "name": "float-ops",
    "handler": "functions.float_ops.handler:handle",
    "image": {"name": "scoretune/float-ops:0.1.0", "size": "120Mi"},
    "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
    "container_concurrency": 1,
    "cold_start": {"start_s": 0.4, "init_s": 0.2},
    "work": {"cpu_s": {"distribution": "lognormal", "mean": 0.05, "cv": 0.3}, "memory": "16Mi"},
}


def test_function_spec_parses_quantities_and_round_trips() -> None:
    spec = parse_spec(SPEC)
    assert spec.cpu_request_milli == 250 and spec.cpu_limit_milli == 1000
    assert spec.memory_request_bytes == 128 * 2**20
    assert spec.image_size_bytes == 120 * 2**20
    assert parse_spec(spec_to_dict(spec)) == spec
    mu, sigma = spec.work_cpu_s.lognormal_params()
    assert np.exp(mu + sigma**2 / 2) == pytest.approx(0.05)


def test_function_spec_error_names_file_and_field() -> None:
    bad = {**SPEC, "container_concurrency": -1}
    with pytest.raises(InputError, match=r"f\.yaml: field container_concurrency: .*greater than or equal to 0"):
        parse_spec(bad, file="f.yaml")
    bad = {**SPEC, "resources": {"requests": {"cpu": "2", "memory": "1Mi"}, "limits": {"cpu": "1", "memory": "1Mi"}}}
    with pytest.raises(InputError, match="resources.requests.cpu"):
        parse_spec(bad, file="f.yaml")


def test_workload_round_trip_keeps_metadata_and_sorts(tmp_path) -> None:
    wl = make_workload([2.0, 0.5, 1.0], ["b", "a", "c"], [{"n": 1}, "{}", "{}"], metadata={"seed": 3})
    assert wl.frame["t_s"].tolist() == [0.5, 1.0, 2.0]
    assert wl.frame["function"].tolist() == ["a", "c", "b"]
    path = write_workload(wl, tmp_path / "w.parquet")
    back = read_workload(path)
    pd.testing.assert_frame_equal(back.frame, wl.frame)
    assert back.metadata == {"seed": 3}


def test_workload_rejects_negative_time_with_row() -> None:
    with pytest.raises(InputError, match=r"x.csv: row 1: field t_s"):
        make_workload([0.0, -1.0], ["a", "a"], source="x.csv")


def test_run_directory_round_trip_and_summary(tmp_path) -> None:
    n = 5
    req = pd.DataFrame(
        {
            "request_id": np.arange(n),
            "function": ["f"] * n,
            "scheduled_s": np.arange(n, dtype=float),
            "sent_s": np.arange(n, dtype=float) + 0.001,
            "finished_s": np.arange(n, dtype=float) + [0.1, 0.2, 0.3, 0.4, np.nan],
            "latency_s": [0.1, 0.2, 0.3, 0.4, np.nan],
            "status": ["ok", "ok", "ok", "error", "timeout"],
            "http_status": pd.array([200, 200, 200, 500, pd.NA], dtype="Int32"),
            "node": ["n1", "n1", "n2", "n2", None],
            "cold_start": pd.array([True, False, False, False, pd.NA], dtype="boolean"),
        }
    )
    run = write_run(tmp_path / "run", req, info={"seed": 7})
    s = run.summary
    assert (s["count"], s["ok"], s["errors"], s["timeouts"]) == (5, 3, 1, 1)
    assert s["ok"] + s["errors"] + s["timeouts"] == s["count"]
    assert s["latency_mean_s"] == pytest.approx(0.2)
    assert s["cold_starts"] == 1 and s["seed"] == 7
    back = read_run(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == back.summary
    assert list(back.requests.columns) == REQUESTS_SCHEMA.names
    assert summarize(back.requests)["latency_p50_s"] == pytest.approx(0.2)


def test_cluster_spec_expands_groups_and_renders_k8s_nodes() -> None:
    spec = parse_cluster(
        {
            "name": "c",
            "groups": [
                {"name": "fast", "count": 2, "cpu": "4", "memory": "8Gi", "speed": 1.5, "images": ["img"]},
                {"name": "spot", "cpu": "2", "memory": "4Gi", "taints": [{"key": "spot", "effect": "PreferNoSchedule"}]},
            ],
        }
    )
    assert [n.name for n in spec.nodes] == ["fast-0", "fast-1", "spot-0"]
    node = spec.nodes[0].to_k8s_node({"img": 100})
    assert node["status"]["allocatable"]["cpu"] == "4000m"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "fast-0"
    assert node["status"]["images"] == [{"names": ["img"], "sizeBytes": 100}]
    assert parse_cluster(cluster_to_dict(spec)).nodes[2].taints == spec.nodes[2].taints


def test_cluster_spec_error_names_field() -> None:
    with pytest.raises(InputError, match=r"c.yaml: field groups.0.speed"):
        parse_cluster({"name": "c", "groups": [{"name": "a", "cpu": "1", "memory": "1Gi", "speed": -1}]}, file="c.yaml")


def test_sample_work_uses_payload_overrides_and_distribution_mean() -> None:
    from functions.work import sample_work

    spec = parse_spec(SPEC)
    rng = np.random.default_rng(0)
    big = sample_work(spec, ["{}"] * 20000, rng)
    assert big.cpu_s.mean() == pytest.approx(0.05, rel=0.02)
    assert np.all(big.memory_bytes == 16 * 2**20)
    w = sample_work(spec, ['{"cpu_s": 1.5, "memory_bytes": 10}', "{}"], rng)
    assert w.cpu_s[0] == 1.5 and w.memory_bytes[0] == 10 and w.memory_bytes[1] == 16 * 2**20
    with pytest.raises(InputError, match="row 0: field payload.cpu_s"):
        sample_work(spec, ['{"cpu_s": -1}'], rng)
