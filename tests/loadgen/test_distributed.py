"""Distributed load as a lab with several load generators runs it: the master on the experiment
host, each worker started exactly as the locust_loadgen role's systemd unit starts it (its
``ExecStart`` rendered from the role's template), here over loopback. The master waits for every
expected worker, a worker that never comes fails the run naming it (no hang), and a run a worker
dropped out of is failed (void), never scored on part of the schedule."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jinja2
import numpy as np
import pytest

from loadgen import replay as replay_mod
from loadgen.replay import LOCUSTFILE, replay
from loadgen.testserver import ReplayTestServer
from loadgen.workload import make_workload

pytestmark = pytest.mark.integration

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "locust_loadgen"


def worker_command(port: int) -> list[str]:
    """The role's worker unit's ExecStart for this machine's venv and a master on 127.0.0.1."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["dirname"] = os.path.dirname  # Ansible's filter
    text = (ROLE / "templates" / "scoretune-locust-worker.service.j2").read_text()
    unit = env.from_string(text).render(
        ansible_managed="test", locust_loadgen_master="experiment-host", locust_loadgen_user="nobody",
        locust_loadgen_venv=str(Path(sys.executable).parent.parent), locust_loadgen_master_host="127.0.0.1",
        locust_loadgen_master_port=port, locust_loadgen_locustfile={"stdout": f"{LOCUSTFILE}\n"})
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(exec_start.removeprefix("ExecStart="))


def _start_workers(n: int, port: int, cwd: Path) -> list[subprocess.Popen]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}  # nothing of the master's environment
    return [subprocess.Popen(worker_command(port), cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(n)]


def _replay_in_thread(out: dict, *args, **kw) -> threading.Thread:
    th = threading.Thread(target=lambda: out.setdefault("r", replay(*args, **kw)))
    th.start()
    return th


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_the_worker_unit_runs_locust_as_a_worker_of_the_master():
    cmd = worker_command(5557)
    assert cmd[0] == str(Path(sys.executable).parent / "locust") and cmd[1:3] == ["-f", str(LOCUSTFILE)]
    assert cmd[3:] == ["--worker", "--headless", "--master-host", "127.0.0.1", "--master-port", "5557"]


def test_a_master_and_two_worker_services_split_the_schedule(tmp_path):
    port = replay_mod._free_port()
    wl = make_workload(np.linspace(0.0, 1.5, 30), ["a", "b", "c"] * 10)
    out: dict = {}
    with ReplayTestServer() as server:
        th = _replay_in_thread(out, wl, server.url, tmp_path / "run", timeout_s=5.0, remote_workers=2,
                               master_port=port, workers_wait_s=60)
        workers = _start_workers(2, port, tmp_path)
        th.join(180)
        _stop(workers)
    result = out["r"]
    assert not result.failed, result.summary.get("failure")
    assert result.summary["ok"] == 30 and result.summary["replay"]["remote_workers"] == 2
    ids = [set(json.loads(p.read_text())["request_id"])
           for p in sorted((tmp_path / "run" / "locust").glob("records-*.json"))]
    assert len(ids) == 2 and ids[0].isdisjoint(ids[1]) and ids[0] | ids[1] == set(range(30))
    # every worker's host, versions and clock offset from the master's are in summary.json
    processes = json.loads((tmp_path / "run" / "summary.json").read_text())["replay"]["processes"]
    from importlib.metadata import version

    assert [p["index"] for p in processes] == [0, 1]
    assert {p["locust"] for p in processes} == {version("locust")} and {p["numpy"] for p in processes} == {np.__version__}
    assert all(0.0 <= p["clock_offset_s"] < 5.0 for p in processes)  # one clock: only the message's delay


def test_a_worker_clock_past_the_bound_or_other_versions_void_the_run(tmp_path):
    """Measured for real (two workers on this clock, the bound set below any message delay), and
    the rule by hand: an offset past the bound, a Locust or NumPy version other than the master's."""
    port = replay_mod._free_port()
    wl = make_workload(np.linspace(0.0, 0.5, 6), ["a"] * 6)
    out: dict = {}
    with ReplayTestServer() as server:
        th = _replay_in_thread(out, wl, server.url, tmp_path / "run", timeout_s=5.0, remote_workers=2,
                               master_port=port, workers_wait_s=60, max_clock_offset_s=1e-9)
        workers = _start_workers(2, port, tmp_path)
        th.join(180)
        _stop(workers)
    result = out["r"]
    assert result.failed and result.summary["failure"].startswith("void: load process 0 on ")
    assert "off the master's (bound 1e-09 s): check chrony on that host" in result.summary["failure"]
    assert result.summary["ok"] == 6  # measured and kept, not scored
    from importlib.metadata import version

    facts = {"index": 3, "host": "gen-2", "locust": "0.0.1", "numpy": np.__version__, "clock_offset_s": -0.25}
    problems = replay_mod.process_problems([facts], max_clock_offset_s=0.1)
    assert problems == ["load process 3 on gen-2: its clock is -0.250 s off the master's (bound 0.1 s): check chrony "
                        "on that host",
                        f"load process 3 on gen-2 runs locust 0.0.1, the master {version('locust')}: install the same "
                        "versions (ansible/loadgen.yml pins them)"]
    assert replay_mod.process_problems([{**facts, "locust": version("locust"), "clock_offset_s": 0.01}]) == []


def test_a_worker_that_never_comes_fails_the_run_without_a_hang(tmp_path):
    port = replay_mod._free_port()
    wl = make_workload(np.linspace(0.0, 0.5, 6), ["a"] * 6)
    out: dict = {}
    with ReplayTestServer() as server:
        t0 = time.monotonic()
        th = _replay_in_thread(out, wl, server.url, tmp_path / "run", timeout_s=5.0, remote_workers=2,
                               master_port=port, workers_wait_s=3)
        workers = _start_workers(1, port, tmp_path)  # the second load generator is down
        th.join(120)
        _stop(workers)
    result = out["r"]
    assert result.failed and time.monotonic() - t0 < 60
    assert result.summary["failure"].startswith(
        f"not all 2 Locust workers connected within 3 s (0 local, 2 remote on 127.0.0.1:{port})")
    assert result.summary["count"] == 6 and result.summary["ok"] == 0  # every request kept, as never sent


@pytest.mark.slow
def test_a_worker_that_dies_mid_run_voids_the_run(tmp_path):
    port = replay_mod._free_port()
    wl = make_workload(np.linspace(0.0, 4.0, 40), ["a", "b"] * 20)
    out: dict = {}
    with ReplayTestServer() as server:
        th = _replay_in_thread(out, wl, server.url, tmp_path / "run", timeout_s=2.0, remote_workers=2,
                               master_port=port, workers_wait_s=60)
        workers = _start_workers(2, port, tmp_path)
        deadline = time.monotonic() + 60
        while not list((tmp_path / "run" / "locust").glob("master-0.log")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(4.0)  # connected and dispatching
        workers[1].send_signal(signal.SIGKILL)
        th.join(180)
        _stop(workers)
    result = out["r"]
    assert result.failed
    assert "sent no records: a worker dropped out of the run" in result.summary["failure"]
