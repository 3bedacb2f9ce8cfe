"""Replay failures say why, per request and in one line: a refused connection, an HTTP error, a
timeout, a load generator that never reported; no request succeeding is a non-zero exit."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

import loadgen.replay as replay_mod
from agent.cli import app
from loadgen.errors import InputError
from loadgen.replay import UNREPORTED, _free_port, merge_records, replay, resolve_targets
from loadgen.testserver import Behaviour, ReplayTestServer
from loadgen.workload import make_workload, write_workload

runner = CliRunner()


def _error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.mark.integration
def test_refused_connections_are_recorded_and_exit_non_zero(tmp_path) -> None:
    wl = write_workload(make_workload([0.0, 0.05, 0.1], ["aes"] * 3), tmp_path / "w.parquet")
    port = _free_port()  # nothing listens there
    run = tmp_path / "run"
    r = runner.invoke(app, ["replay", str(wl), "--target", f"http://127.0.0.1:{port}/", "--out", str(run), "--timeout", "2"])
    assert r.exit_code == 1, r.output
    line = _error_line(r.output)
    assert "0 of 3 requests succeeded" in line and "connection refused" in line and str(run) in line
    requests = pd.read_parquet(run / "requests.parquet")
    assert requests["status"].tolist() == ["error"] * 3
    assert requests["error"].tolist() == ["connection refused"] * 3
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ok"] == 0 and summary["errors"] == 3


@pytest.mark.integration
def test_http_errors_and_timeouts_say_which(tmp_path) -> None:
    server = ReplayTestServer(per_function={"broken": Behaviour(status=503), "hang": Behaviour(hang=True)})
    wl = make_workload([0.0, 0.05, 0.1], ["ok", "broken", "hang"])
    with server:
        result = replay(wl, server.url, tmp_path / "run", timeout_s=1.0)
    req = result.requests.set_index("function")
    assert req.loc["ok", "status"] == "ok" and pd.isna(req.loc["ok", "error"])
    assert (req.loc["broken", "status"], req.loc["broken", "error"]) == ("error", "HTTP 503")
    assert (req.loc["hang", "status"], req.loc["hang", "error"]) == ("timeout", "timeout after 1 s")
    back = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert back["error"].isna().tolist() == [True, False, False]


@pytest.mark.integration
def test_a_broken_load_generator_is_one_line_and_exit_1(tmp_path, monkeypatch) -> None:
    bad = tmp_path / "broken_locustfile.py"
    bad.write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(replay_mod, "LOCUSTFILE", bad)
    wl = write_workload(make_workload([0.0, 0.1], ["aes", "aes"]), tmp_path / "w.parquet")
    r = runner.invoke(app, ["replay", str(wl), "--target", "http://127.0.0.1:9/", "--out", str(tmp_path / "run"),
                            "--timeout", "1"])
    assert r.exit_code == 1
    assert "replay failed: locust exited with status" in _error_line(r.output)
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert requests["error"].tolist() == [UNREPORTED, UNREPORTED]


def _errors(table: pd.DataFrame) -> list[str | None]:
    return [None if pd.isna(e) else e for e in table["error"]]


def test_merge_fills_the_error_column(tmp_path) -> None:
    wl = make_workload([0.0, 1.0, 2.0], ["a", "a", "a"])
    rec = {"request_id": [0, 1], "sent_s": [0.0, 1.0], "finished_s": [0.1, 1.1], "status": ["ok", "error"],
           "http_status": [200, None], "node": ["n", None], "cold_start": [False, None], "error": [None, "connection refused"]}
    (tmp_path / "records-0.json").write_text(json.dumps(rec))
    table, unsent = merge_records(wl, tmp_path)
    assert unsent == 1
    assert _errors(table) == [None, "connection refused", UNREPORTED]
    rec.pop("error")  # records from an older locustfile
    (tmp_path / "records-0.json").write_text(json.dumps(rec))
    assert _errors(merge_records(wl, tmp_path)[0]) == [None, None, UNREPORTED]


@pytest.mark.parametrize("template,words", [("{fn}.example.com", "KeyError"), ("{", "Single '{'"),
                                            ("{function} x", "spaces")])
def test_bad_host_templates_are_input_errors(template, words) -> None:
    with pytest.raises(InputError) as err:
        resolve_targets(["a"], "http://127.0.0.1:9/", host_template=template)
    assert err.value.field == "host_template" and words in str(err.value)


def test_cli_names_the_options_and_refuses_a_file_as_out(tmp_path) -> None:
    wl = write_workload(make_workload([0.0], ["aes"]), tmp_path / "w.parquet")
    r = runner.invoke(app, ["replay", str(wl), "--target", "http://127.0.0.1:9/", "--host-template", "{fn}",
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "field --host-template: " in _error_line(r.output)
    r = runner.invoke(app, ["replay", str(wl), "--target", "http://127.0.0.1:9/", "--timeout", "0",
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "field --timeout: " in _error_line(r.output)
    (tmp_path / "taken").write_text("x")
    r = runner.invoke(app, ["replay", str(wl), "--target", "http://127.0.0.1:9/", "--out", str(tmp_path / "taken")])
    assert r.exit_code == 1 and f"{tmp_path / 'taken'}: is a file" in _error_line(r.output)
    targets = tmp_path / "targets.yaml"
    targets.write_bytes(b"\xff\xfe\x00garbage")
    r = runner.invoke(app, ["replay", str(wl), "--targets", str(targets), "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and f"{targets}: not UTF-8" in _error_line(r.output)
    targets.write_text("")
    r = runner.invoke(app, ["replay", str(wl), "--targets", str(targets), "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "the file is empty" in _error_line(r.output)
    assert not (tmp_path / "run").exists()
