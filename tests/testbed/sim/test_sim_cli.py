"""The ``sim`` command group through typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen.results import read_run
from loadgen.synth import poisson
from loadgen.workload import write_workload

runner = CliRunner()


@pytest.fixture(scope="module")
def workload_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "w.parquet"
    write_workload(poisson(4.0, 20.0, ["float-ops", "aes"], seed=0), path)
    return path


def test_sim_run_writes_a_run_directory(tmp_path, workload_file):
    out = tmp_path / "run"
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--weights", "ImageLocality=5,TaintToleration=disabled", "--seed", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = read_run(out)
    weights = res.summary["profile"]["weights"]
    assert res.summary["seed"] == 3 and weights["ImageLocality"] == 5
    assert weights["TaintToleration"] is None
    assert json.loads(r.stdout)["count"] == len(res.requests)


def test_sim_run_on_openwhisk_writes_its_action_pods(tmp_path, workload_file):
    out = tmp_path / "run"
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--platform", "openwhisk", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = read_run(out)
    assert res.summary["platform"] == "openwhisk"
    assert res.placements["pod"].str.match(r"^wsk\d+-\d+-guest-").all()  # the invokers' containers
    assert res.summary["cold_starts"] == len(res.placements)
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--platform", "lambda", "--out", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "'lambda' is not one of 'knative', 'openwhisk'" in r.output
    assert not (tmp_path / "bad").exists()


def test_sim_run_with_config(tmp_path, workload_file):
    from testbed.scheduler.config import config_for_profile, profile_from_weights, write_config

    cfg = tmp_path / "cfg.yaml"
    write_config(config_for_profile(profile_from_weights({"NodeResourcesFit": 7})), cfg)
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--config", str(cfg), "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    record = read_run(tmp_path / "r").summary["profile"]
    assert record["weights"]["NodeResourcesFit"] == 7 and record["scheduler_name"] == "default-scheduler"


def test_sim_sweep_reports_spread_and_rank(workload_file):
    r = runner.invoke(app, ["sim", "sweep", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--samples", "4", "--seed", "1"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["of"] == 5 and 1 <= rep["default_rank"] <= 5
    assert rep["mean_s"]["min"] <= rep["mean_s"]["max"]
    assert rep["p95_s"]["min"] <= rep["p95_s"]["max"]


def test_sim_autoscale_ports_upstream_panic_case(tmp_path):
    """TestAutoscalerPanicThenUnPanicScaleDown through the CLI."""
    spec = {"target_value": 10, "total_value": 10 / 0.75, "target_burst_capacity": 93, "panic_threshold": 2.0,
            "max_scale_up_rate": 10, "max_scale_down_rate": 10, "activator_capacity": 150, "stable_window_s": 60,
            "scale_down_delay_s": 0, "reachable": True, "activation_scale": 0, "ready_pods_at_creation": 1}
    steps = [{"t_s": 0, "ready_pods": 1, "observed_stable": 100, "observed_panic": 100},
             {"t_s": 100, "ready_pods": 10, "observed_stable": 100, "observed_panic": 1000},
             {"t_s": 130, "ready_pods": 10, "observed_stable": 1, "observed_panic": 1},
             {"t_s": 161, "ready_pods": 10, "observed_stable": 1, "observed_panic": 1}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    r = runner.invoke(app, ["sim", "autoscale", "--spec", str(tmp_path / "spec.json"), "--steps", str(tmp_path / "steps.json")])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [g["desired_pod_count"] for g in got] == [10, 100, 100, 1]
    assert [g["in_panic"] for g in got] == [True, True, True, False]  # 10 pods wanted from 1 ready: over 200 %
    assert set(got[0]) == {"t_s", "desired_pod_count", "excess_burst_capacity", "in_panic"}


def test_sim_autoscale_bad_step_names_file_and_field(tmp_path):
    from testbed.autoscaler.drive import run_files
    from testbed.errors import ConfigError

    (tmp_path / "spec.json").write_text(json.dumps({"target_value": 1, "total_value": 1}))
    (tmp_path / "steps.json").write_text(json.dumps([{"t_s": 0, "ready_pods": -1, "observed_stable": 0, "observed_panic": 0}]))
    with pytest.raises(ConfigError, match=r"steps.json: field 0.ready_pods"):
        run_files(tmp_path / "spec.json", tmp_path / "steps.json")
    r = runner.invoke(app, ["sim", "autoscale", "--spec", str(tmp_path / "spec.json"), "--steps", str(tmp_path / "steps.json")])
    assert r.exit_code != 0


def test_sim_scenarios_lists_the_split():
    r = runner.invoke(app, ["sim", "scenarios", "--split", "test"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows and all(row["split"] == "test" for row in rows)


def test_bench_sim_json_shape():
    r = runner.invoke(app, ["bench", "sim", "--json", "--repeat", "1"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    names = [s["name"] for s in rep["scenarios"]]
    assert names == ["large-120", "homogeneous-20"]
    for s in rep["scenarios"]:
        assert {"name", "nodes", "invocations", "invocations_per_s", "sim_s_per_wall_s"} <= set(s)
        assert s["invocations"] > 10_000 and s["invocations_per_s"] > 0
    assert rep["scenarios"][0]["nodes"] >= 100 and rep["scenarios"][1]["nodes"] == 20
    assert "warm-up" in rep["notes"]
