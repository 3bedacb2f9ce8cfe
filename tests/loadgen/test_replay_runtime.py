"""Replay against the suite's real function runtime (functions/runtime.py) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest

from loadgen.replay import _free_port, replay
from loadgen.workload import make_workload

pytestmark = pytest.mark.integration


@pytest.fixture()
def trace_driven_url(tmp_path):
    import functions.runtime  # noqa: F401 - the project's own module: a broken import fails, never skips

    port = _free_port()
    env = {**os.environ, "NODE_NAME": "node-7", "POD_NAME": "trace-driven-00001-deployment-abc"}
    proc = subprocess.Popen([sys.executable, "-m", "functions.runtime", "--function", "trace-driven", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("function runtime did not become ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def test_replay_records_the_runtime_placement_headers(trace_driven_url, tmp_path) -> None:
    payloads = [json.dumps({"cpu_s": 0.005, "memory_bytes": 1 << 20})] * 6
    wl = make_workload([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], ["trace-driven"] * 6, payloads)
    result = replay(wl, {"trace-driven": trace_driven_url}, tmp_path / "run", timeout_s=10.0)
    assert result.summary["ok"] == 6, result.requests[["status", "http_status"]]
    req = result.requests.sort_values("scheduled_s")
    assert (req["node"] == "node-7").all()
    assert (req["pod"] == "trace-driven-00001-deployment-abc").all()  # the pod that answered, from the Downward API
    assert (pd.read_parquet(tmp_path / "run" / "requests.parquet")["pod"] == "trace-driven-00001-deployment-abc").all()
    assert req["cold_start"].tolist() == [True] + [False] * 5
    assert (req["latency_s"] >= 0.005).all()
