"""The workload and replay commands through typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen.cli import parse_targets
from loadgen.testserver import ReplayTestServer
from loadgen.workload import read_workload

runner = CliRunner()


@pytest.mark.integration
def test_synth_show_and_replay(tmp_path) -> None:
    wl = tmp_path / "w.parquet"
    r = runner.invoke(app, ["workload", "synth", "steps", "--rates", "5,20", "--step-s", "1", "--functions", "float-ops=1,aes=1",
                            "--seed", "3", "-o", str(wl)])
    assert r.exit_code == 0, r.output
    w = read_workload(wl)
    assert w.metadata["source"] == "synth:steps" and w.metadata["seed"] == 3
    r = runner.invoke(app, ["workload", "show", str(wl), "--png", str(tmp_path / "rate.png")])
    assert r.exit_code == 0, r.output
    assert "requests" in r.output and str(len(w)) in r.output
    assert (tmp_path / "rate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with ReplayTestServer() as server:
        r = runner.invoke(app, ["replay", str(wl), "--target", server.url, "--out", str(tmp_path / "run"), "--timeout", "5"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["count"] == len(w) == summary["ok"]


def test_from_trace_writes_a_workload(fixture_traces, tmp_path) -> None:
    out = tmp_path / "az.parquet"
    path = fixture_traces / "azure" / "azure2021_first199_invocations_invitro.csv"
    r = runner.invoke(app, ["workload", "from-trace", "azure2021", str(path), "--minutes", "2", "--rate-scale", "2",
                            "--trace-replay", "-o", str(out)])
    assert r.exit_code == 0, r.output
    wl = read_workload(out)
    assert wl.metadata["rate_scale"] == 2.0 and wl.duration_s <= 120.0 and len(wl) > 199


def test_bad_input_is_one_error_line(tmp_path) -> None:
    r = runner.invoke(app, ["workload", "from-trace", "azure2021", str(tmp_path / "absent.csv"), "-o", str(tmp_path / "x")])
    assert r.exit_code != 0
    r = runner.invoke(app, ["replay", str(tmp_path / "absent.parquet"), "--out", str(tmp_path / "run")])
    assert r.exit_code != 0


def test_parse_targets_inline_and_file(tmp_path) -> None:
    assert parse_targets("a=http://h:1/,b=http://h:2/") == {"a": "http://h:1/", "b": "http://h:2/"}
    f = tmp_path / "t.yaml"
    f.write_text("a: http://x/\n")
    assert parse_targets(str(f)) == {"a": "http://x/"}
