"""The embedded lab's own costs (``scoretune bench lab``): what the lab adds to what it measures.

Start-up of a one-node lab, one cold start, the ingress/activator's added latency over calling the
instance directly, an instance start with its image cached (the process runtime: a process;
containers: runc create + start, until the server answers), and the CPU the lab's own processes
(controller, node agent) spend per request while the lab workload is replayed at its rate. A
study of the lab beside its noise and its fidelity, not part of its mechanics.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.local import lab as labmod
from testbed.local.state import LabState


def measure_overhead(runtime: str = "process", *, requests_n: int = 200, starts: int = 10,
                     load_s: float = 15.0) -> dict[str, Any]:
    """One measurement of the lab's costs on ``runtime`` (module docstring), as ``bench lab``
    prints it; the lab is torn down whatever happens."""
    import statistics
    import tempfile

    import psutil
    import requests as http

    from functions.spec import discover_specs
    from loadgen.replay import replay
    from testbed.cluster import parse_cluster
    from testbed.scenarios import LAB_FUNCTIONS, lab_workload

    specs = discover_specs()
    images = [specs[fn].image for fn in sorted({"float-ops", *dict(LAB_FUNCTIONS)})]
    spec = parse_cluster({"name": "bench", "groups": [{"name": "n", "cpu": "2", "memory": "4Gi", "images": images}]})
    state = Path(tempfile.mkdtemp(prefix="scoretune-bench-lab-"))
    t0 = time.perf_counter()
    handle = labmod.up(spec, state_dir=state, port=0, runtime=runtime)
    up_s = time.perf_counter() - t0
    try:
        s = http.Session()
        hdr = {"X-Scoretune-Function": "float-ops"}
        body = json.dumps({"n": 1})
        t1 = time.perf_counter()
        s.post(handle.url + "/", data=body, headers=hdr, timeout=120).raise_for_status()
        cold_s = time.perf_counter() - t1
        url = next(i["url"] for i in handle.client.status()["instances"] if i["state"] == "ready")

        def timed(target: str, headers: dict[str, str]) -> list[float]:
            out = []
            for _ in range(requests_n):
                t = time.perf_counter()
                s.post(target + "/", data=body, headers=headers, timeout=30).raise_for_status()
                out.append((time.perf_counter() - t) * 1e3)
            return out

        direct = timed(url, {})
        via = timed(handle.url, hdr)
        # instance starts with the image on the node: the runtime's own start, no pull
        lab_state = LabState(state)
        agent = f"http://127.0.0.1:{lab_state.read_port('agent-n-0')}"
        start_wall: list[float] = []
        for i in range(starts):
            t = time.perf_counter()
            got = s.post(f"{agent}/instances", json={"id": f"bench-{i}", "function": "float-ops"}, timeout=300).json()
            start_wall.append(time.perf_counter() - t)
            s.delete(f"{agent}/instances/bench-{i}", timeout=60)
            if not got.get("ok"):
                raise TestbedError(f"bench lab: an instance did not start: {got.get('error')}")
            if got.get("image_pull_s", 0.0) > 0.05:
                raise TestbedError("bench lab: the image was pulled again; the start would not be the runtime's alone")
        # the lab's own CPU per request while the lab workload is replayed
        own = [psutil.Process(r.pid) for r in (*lab_state.procs("controller"), *lab_state.procs("agent"))]
        cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in own)
        wl = lab_workload(0, duration_s=load_s)
        result_run = replay(wl, handle.target, state / "load", timeout_s=30.0)
        cpu_s = sum(p.cpu_times().user + p.cpu_times().system for p in own) - cpu0
        served = int(result_run.summary.get("ok") or 0)
    finally:
        labmod.down(state)
    result = {
        "benchmark": "lab",
        "runtime": runtime,
        "lab_up_s": round(up_s, 3),
        "cold_start_s": round(cold_s, 3),
        "requests": requests_n,
        "direct_p50_ms": round(statistics.median(direct), 3),
        "ingress_p50_ms": round(statistics.median(via), 3),
        "ingress_overhead_p50_ms": round(statistics.median(via) - statistics.median(direct), 3),
        "instance_starts": starts,
        "instance_start_p50_s": round(statistics.median(start_wall), 3),
        "instance_start_max_s": round(max(start_wall), 3),
        "load_requests": len(wl),
        "load_ok": served,
        "load_rate_per_s": round(len(wl) / load_s, 2),
        "lab_cpu_ms_per_request": round(1e3 * cpu_s / max(1, len(wl)), 2),
        "cpu_enforcement": handle.cpu_mode.mode,
    }
    return result


__all__ = ["measure_overhead"]
