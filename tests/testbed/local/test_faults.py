"""Fault injection: a node agent killed in the middle of a run."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import psutil
import pytest

from loadgen.workload import make_workload
from testbed.local.backend import LocalBackend
from testbed.local.state import LabState

pytestmark = [pytest.mark.lab, pytest.mark.slow]

KILL_AT_S = 12.0
LOCUST_START_S = 3.0
"""Locust is up and has picked t = 0 about this long after a run starts (it reports the epoch it chose)."""


def _long_requests(duration_s: float = 36.0, rate: float = 2.0, seed: int = 3):
    """Requests that hold their slot for ~2 s (I/O wait, little CPU), so some are always in flight."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, duration_s, int(duration_s * rate)))
    payload = json.dumps({"cpu_s": 0.02, "io_s": 2.0, "memory_bytes": 1 << 20})
    return make_workload(t, ["trace-driven"] * len(t), [payload] * len(t), metadata={"name": "fault"})


def test_agent_killed_mid_run(state_dir, tmp_path):
    backend = LocalBackend("lab-small", state_dir=state_dir, timeout_s=20.0)
    killed: dict = {}

    def kill_busiest_agent() -> None:
        time.sleep(LOCUST_START_S + KILL_AT_S)
        counts: dict[str, int] = {}
        deadline = time.monotonic() + 8.0
        while not counts and time.monotonic() < deadline:  # wait for a moment with requests in flight
            for inst in backend.client.status()["instances"]:
                if inst["state"] == "ready" and inst["active"] > 0:
                    counts[inst["node"]] = counts.get(inst["node"], 0) + inst["active"]
            if not counts:
                time.sleep(0.1)
        node = max(counts, key=counts.get)
        rec = next(r for r in LabState(state_dir).procs("agent") if r.name == node)
        killed.update(node=node, in_flight=counts[node], t=time.time())
        psutil.Process(rec.pid).kill()

    killer = threading.Thread(target=kill_busiest_agent, daemon=True)
    try:
        backend.reset()
        killer.start()
        result = backend.run(_long_requests(), tmp_path / "run")
        killer.join(timeout=5)
        status = backend.client.status()
    finally:
        backend.close()
    node = killed["node"]
    s = result.summary
    assert s["count"] == s["ok"] + s["errors"] + s["timeouts"]
    assert s["nodes_lost"] == [node]
    req = result.requests
    failed = req[req["status"] != "ok"]
    # the requests in flight on the lost node failed, and are counted as errors on that node
    assert s["errors"] >= 1 and (failed["node"] == node).sum() >= 1, failed
    assert not result.failed, "a lost node is a recorded fault of the lab, not a broken load generator"
    # the node is marked not ready and nothing was placed there after the kill
    assert [n["ready"] for n in status["nodes"] if n["name"] == node] == [False]
    pl = result.placements
    (lost,) = [e for e in s["lab_events"] if e["event"] == "node_lost"]
    assert lost["node"] == node and 0.0 < lost["t_s"] < 30.0  # lost during the run
    after = pl[pl["scheduled_s"] > lost["t_s"]]
    assert node not in set(after["node"].dropna())
    # the lab kept serving: later requests succeeded elsewhere
    late = req[(req["scheduled_s"] > lost["t_s"] + 8.0)]
    assert (late["status"] == "ok").mean() > 0.8


def test_duty_cycle_fallback_runs_the_lab(cluster_file, state_dir, tmp_path):
    """Without cgroups (forced here), the agents' own CPU-share limit enforces the nodes."""
    backend = LocalBackend(cluster_file, state_dir=state_dir, cpu_enforcement="duty-cycle")
    try:
        assert "duty cycling" in backend.cpu_notice
        rng = np.random.default_rng(5)
        t = np.sort(rng.uniform(0, 8.0, 24))
        result = backend.run(make_workload(t, ["float-ops"] * len(t), metadata={"name": "dc"}), tmp_path / "run")
        assert not LabState(state_dir).cgroups()
    finally:
        backend.close()
    assert result.summary["ok"] == result.summary["lab_scale"]["requests_replayed"] and result.summary["cpu_enforcement"] == "duty-cycle"
