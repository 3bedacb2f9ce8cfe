"""``scoretune evaluate --scenario CLUSTER.yaml=WORKLOAD.parquet``: tuners compared on a user's own
cluster and workload, with a JSON summary; every bad file is one line naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import WORKLOAD_SCHEMA, write_workload
from testbed.cluster import CLUSTERS_DIR
from testbed.scenarios import lab_workload

runner = CliRunner()


@pytest.fixture
def own(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "my-cluster.yaml"
    shutil.copy(CLUSTERS_DIR / "lab-small.yaml", cluster)
    workload = tmp_path / "my-workload.parquet"
    write_workload(lab_workload(3, duration_s=10.0), workload)
    return cluster, workload


def _evaluate(tmp_path: Path, *args: str):
    return runner.invoke(app, ["evaluate", "--out", str(tmp_path / "out"), "--jobs", "1", *args])


def test_own_scenario_is_evaluated_and_summarised(own, tmp_path):
    cluster, workload = own
    spec = f"{cluster}={workload}"
    result = _evaluate(tmp_path, "--scenario", spec, "--scenarios", "lab-web", "--methods", "default,random",
                       "--steps", "2", "--seeds", "2", "--oracle-runs", "15", "--json", str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["scenarios"] == sorted(["lab-web", spec]) and summary["seeds"] == 2 and summary["steps"] == 2
    assert set(summary["methods"]) == {"default", "random", "policy"}  # the shipped policy by default
    for figures in summary["methods"].values():
        assert set(figures["per_scenario"]) == {"lab-web", spec}
        assert all(-100 < s["improvement_pct"] < 100 and s["gap_closed"] <= 1.0 + 1e-9
                   for s in figures["per_scenario"].values())
        mean = sum(s["improvement_pct"] for s in figures["per_scenario"].values()) / 2
        assert figures["improvement_pct"] == pytest.approx(mean)  # over seeds of the mean over scenarios
    assert summary["methods"]["default"]["improvement_pct"] == 0.0
    assert summary["methods"]["default"]["gap_closed"] == 0.0  # the default weights close none of the gap


def test_own_scenario_alone_replaces_the_split(own, tmp_path):
    cluster, workload = own
    result = _evaluate(tmp_path, "--scenario", f"{cluster}={workload}", "--methods", "random", "--policy", "none",
                       "--steps", "1", "--seeds", "1", "--oracle-runs", "5")
    assert result.exit_code == 0, result.output
    results = (tmp_path / "out" / "results.csv").read_text()
    assert str(workload) in results and "lab-web" not in results


def _empty_workload(path: Path) -> Path:
    pq.write_table(pa.Table.from_pylist([], schema=WORKLOAD_SCHEMA), path)
    return path


@pytest.mark.parametrize(("make", "message"), [
    (lambda c, w, d: f"{d / 'nope.yaml'}={w}", "nope.yaml: no such cluster spec file"),
    (lambda c, w, d: f"{c}={d / 'nope.parquet'}", "nope.parquet: no such workload file"),
    (lambda c, w, d: f"{c}", "expected CLUSTER.yaml=WORKLOAD.parquet"),
    (lambda c, w, d: f"{(d / 'bad.yaml').write_text('nodes: [') and d / 'bad.yaml'}={w}", "bad.yaml: not valid YAML"),
    (lambda c, w, d: f"{c}={(d / 'x.parquet').write_bytes(b'PAR1 not really') and d / 'x.parquet'}",
     "x.parquet: not a readable Parquet workload"),
    (lambda c, w, d: f"{c}={_empty_workload(d / 'empty.parquet')}", "empty.parquet"),
])
def test_bad_own_scenarios_are_one_line_naming_the_file(own, tmp_path, make, message):
    cluster, workload = own
    result = _evaluate(tmp_path, "--scenario", make(cluster, workload, tmp_path), "--methods", "random")
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "out" / "table.md").exists()
