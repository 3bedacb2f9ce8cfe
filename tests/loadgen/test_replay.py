"""Replay against a test server on 127.0.0.1: accounting, open loop, errors, timeouts, workers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import loadgen.replay as replay_mod
from loadgen.errors import InputError
from loadgen.replay import merge_records, replay, resolve_targets
from loadgen.results import read_run
from loadgen.testserver import Behaviour, ReplayTestServer
from loadgen.workload import make_workload


def _mixed_workload():
    t = np.linspace(0.0, 1.5, 30)
    fn = np.array(["fast", "broken", "hang"] * 10, dtype=object)
    return make_workload(t, fn, metadata={"name": "mixed", "seed": 0})


@pytest.mark.integration
def test_every_request_is_accounted_for_with_its_status(tmp_path) -> None:
    server = ReplayTestServer(per_function={"broken": Behaviour(status=500), "hang": Behaviour(hang=True)})
    with server:
        result = replay(_mixed_workload(), server.url, tmp_path / "run", timeout_s=1.0, info={"seed": 7})
    s = result.summary
    assert not result.failed, s.get("failure")
    assert s["count"] == 30 and s["ok"] + s["errors"] + s["timeouts"] == 30
    assert (s["ok"], s["errors"], s["timeouts"]) == (10, 10, 10)
    req = result.requests.set_index("request_id")
    by_fn = req.groupby("function")["status"].unique().apply(list).to_dict()
    assert by_fn == {"broken": ["error"], "fast": ["ok"], "hang": ["timeout"]}
    assert set(req.loc[req.function == "broken", "http_status"]) == {500}
    assert req.loc[req.function == "hang", "http_status"].isna().all()
    assert (req.loc[req.function == "fast", "node"] == "node-a").all()
    # the first request of each answered function is the cold one, as the server reported
    fast = req[req.function == "fast"].sort_values("scheduled_s")
    assert fast["cold_start"].tolist() == [True] + [False] * 9
    # latency is finished - scheduled, exactly
    assert np.allclose(req["latency_s"], req["finished_s"] - req["scheduled_s"])
    assert (req.loc[req.function == "hang", "latency_s"] >= 1.0).all()
    back = read_run(tmp_path / "run")
    assert back.summary["seed"] == 7 and len(back.requests) == 30
    assert back.summary["dispatch_lag_p99_s"] is not None


@pytest.mark.integration
def test_slow_server_does_not_slow_the_schedule(tmp_path) -> None:
    """Open loop: with 1.5 s responses, a closed loop would need 60 s for these 40 requests."""
    wl = make_workload(np.linspace(0.0, 2.0, 40), ["slow"] * 40)
    with ReplayTestServer(default=Behaviour(delay_s=1.5)) as server:
        result = replay(wl, server.url, tmp_path / "run", timeout_s=10.0)
        arrivals = sorted(a[0] for a in server.arrivals)
    req = result.requests
    assert result.summary["ok"] == 40
    lag = req["sent_s"] - req["scheduled_s"]
    assert lag.max() < 0.5  # every request left while earlier ones were still being served
    assert (req["latency_s"] >= 1.5).all()
    assert len(arrivals) == 40 and arrivals[-1] - arrivals[0] < 1.5 + 2.0


@pytest.mark.integration
def test_host_template_and_function_header(tmp_path) -> None:
    wl = make_workload([0.0, 0.1, 0.2], ["a", "b", "a"])
    with ReplayTestServer() as server:
        replay(wl, server.url, tmp_path / "run", timeout_s=5.0, host_template="{function}.default.example.com")
        seen = sorted((fn, host) for _, fn, host in server.arrivals)
    assert seen == [("a", "a.default.example.com"), ("a", "a.default.example.com"), ("b", "b.default.example.com")]


@pytest.mark.integration
def test_connection_refused_is_error_not_failure(tmp_path) -> None:
    wl = make_workload([0.0, 0.05], ["a", "a"])
    with ReplayTestServer() as server:
        url = server.url
    result = replay(wl, {"a": url}, tmp_path / "run", timeout_s=2.0)  # server is gone now
    assert result.summary["errors"] == 2 and not result.failed
    assert result.requests["sent_s"].notna().all()


@pytest.mark.integration
def test_broken_load_generator_marks_the_run_failed(tmp_path, monkeypatch) -> None:
    bad = tmp_path / "broken_locustfile.py"
    bad.write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(replay_mod, "LOCUSTFILE", bad)
    wl = make_workload([0.0, 0.1, 0.2], ["a", "a", "a"])
    result = replay(wl, "http://127.0.0.1:9/", tmp_path / "run", timeout_s=1.0)
    assert result.failed and "locust exited" in result.summary["failure"]
    assert result.summary["errors"] == 3 and result.requests["sent_s"].isna().all()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["failed"] is True


def test_merge_marks_unreported_requests(tmp_path) -> None:
    wl = make_workload([0.0, 1.0, 2.0], ["a", "a", "a"])
    rec = {"request_id": [1], "sent_s": [1.001], "finished_s": [1.05], "status": ["ok"], "http_status": [200],
           "node": ["n"], "cold_start": [False]}
    (tmp_path / "records-0.json").write_text(json.dumps(rec))
    table, unsent = merge_records(wl, tmp_path)
    assert unsent == 2
    assert table["status"].tolist() == ["error", "ok", "error"]
    assert table["sent_s"].isna().tolist() == [True, False, True]
    assert table.loc[1, "latency_s"] == pytest.approx(0.05)


def test_targets_must_cover_every_function() -> None:
    with pytest.raises(InputError, match="no target URL for function"):
        resolve_targets(["a", "b"], {"a": "http://127.0.0.1:1/"})
    with pytest.raises(InputError, match="http"):
        resolve_targets(["a"], "localhost:80")


@pytest.mark.integration
def test_distributed_workers_split_the_schedule(tmp_path) -> None:
    wl = make_workload(np.linspace(0.0, 1.0, 21), ["a", "b", "c"] * 7)
    with ReplayTestServer() as server:
        result = replay(wl, server.url, tmp_path / "run", timeout_s=5.0, workers=2)
    assert not result.failed, result.summary.get("failure")
    assert result.summary["ok"] == 21
    records = sorted((tmp_path / "run" / "locust").glob("records-*.json"))
    ids = [set(json.loads(p.read_text())["request_id"]) for p in records]
    assert len(ids) == 2 and ids[0].isdisjoint(ids[1]) and ids[0] | ids[1] == set(range(21))
    assert {i % 2 for i in ids[0]} == {0} and {i % 2 for i in ids[1]} == {1}


@pytest.mark.slow
@pytest.mark.integration
def test_a_worker_with_nothing_but_the_master_address_gets_the_plan(tmp_path) -> None:
    """A 'remote' worker: no schedule file, no SCORETUNE_* variables, another working directory."""
    import os
    import subprocess
    import threading

    port = replay_mod._free_port()
    wl = make_workload(np.linspace(0.0, 1.0, 10), ["a", "b"] * 5)
    out: dict = {}
    with ReplayTestServer() as server:
        th = threading.Thread(target=lambda: out.setdefault("r", replay(
            wl, server.url, tmp_path / "run", timeout_s=5.0, workers=1, remote_workers=1, master_port=port)))
        th.start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCORETUNE_")}
        cmd = replay_mod._command("worker", users=0, run_time_s=0, stop_timeout_s=0, port=port, workers=0)
        remote = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        th.join(120)
        remote.wait(30)
    result = out["r"]
    assert not result.failed, result.summary.get("failure")
    assert result.summary["ok"] == 10
    assert sorted(p.name for p in (tmp_path / "run" / "locust").glob("records-*.json")) == ["records-0.json", "records-1.json"]


@pytest.mark.integration
def test_missing_locust_binary_is_a_failed_run(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(replay_mod, "_command", lambda role, **kw: [str(tmp_path / "no-such-locust")])
    wl = make_workload([0.0, 0.1], ["a", "a"])
    result = replay(wl, "http://127.0.0.1:9/", tmp_path / "run", timeout_s=1.0)
    assert result.failed and "cannot start locust" in result.summary["failure"]
    assert result.summary["count"] == result.summary["errors"] == 2


@pytest.mark.integration
def test_relative_out_dir_is_resolved_before_locust_starts(tmp_path, monkeypatch) -> None:
    """Locust runs in its own working directory; a relative run directory must still work."""
    monkeypatch.chdir(tmp_path)
    wl = make_workload(np.linspace(0.0, 0.5, 5), ["fast"] * 5)
    with ReplayTestServer() as server:
        result = replay(wl, server.url, "relative-run", timeout_s=5.0)
    assert not result.failed, result.summary.get("failure")
    assert result.summary["ok"] == 5
    assert (tmp_path / "relative-run" / "requests.parquet").exists()
