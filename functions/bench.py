"""``scoretune bench functions``: what the runtime itself costs a request and a cold start.

Starts a real runtime subprocess (``python -m functions.runtime``) on 127.0.0.1, measures the time
from spawn to ``/readyz`` = 200 (the runtime's share of a cold start), then sends back-to-back
requests over one keep-alive connection with a near-empty payload (``float-ops`` with n=1), so
the latency is the runtime's overhead, not the handler's work. Also times :func:`revision_pod`,
which the simulator calls per pod. Prints one JSON object.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import numpy as np

from functions.errors import FunctionsError
from functions.process import free_port, start_runtime, wait_ready


def run(requests: int = 500) -> dict[str, Any]:
    from functions.knative import revision_pod
    from functions.spec import discover_specs

    port = free_port()
    spawned = time.perf_counter()
    proc = start_runtime("float-ops", port)
    try:
        wait_ready(port, proc)
        ready_s = time.perf_counter() - spawned
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
        body = json.dumps({"n": 1})
        latencies = []
        for _ in range(requests):
            t0 = time.perf_counter()
            conn.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise FunctionsError(f"runtime answered {resp.status}")
            latencies.append(time.perf_counter() - t0)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    spec = discover_specs()["matmul"]
    n_pods = 2000
    t0 = time.perf_counter()
    for i in range(n_pods):
        revision_pod(spec, name=f"p{i}")
    pods_per_s = n_pods / (time.perf_counter() - t0)
    lat = np.asarray(latencies)
    return {
        "benchmark": "functions-runtime",
        "runtime_ready_s": round(ready_s, 4),
        "requests": requests,
        "request_overhead_p50_ms": round(float(np.percentile(lat, 50)) * 1e3, 3),
        "request_overhead_p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 3),
        "requests_per_s": round(requests / float(lat.sum()), 1),
        "revision_pods_per_s": round(pods_per_s, 1),
    }
