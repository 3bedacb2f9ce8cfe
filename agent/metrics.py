"""The latency metric a tuner minimises, with failed requests counted, not dropped.

``RunResult.metric`` reports latency over *successful* requests only. A tuner optimising that
would learn to fail requests: a profile that strands half the pods and times out half the
requests can show a lower mean over the survivors. So scoretune's metric counts every failed
request (error or timeout) at the client timeout — the latency the caller actually waited before
giving up — and takes the mean or percentile over all requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import numpy as np

from agent.errors import AgentError


class Metric(StrEnum):
    """The latency metrics a tuner can minimise: the one list every option, config check and
    validator reads (a typer option annotated ``Metric`` lists them in ``--help``)."""

    MEAN = "mean"
    P50 = "p50"
    P95 = "p95"
    P99 = "p99"


METRICS: tuple[str, ...] = tuple(m.value for m in Metric)
DEFAULT_TIMEOUT_S = 30.0
_Q = {"p50": 50.0, "p95": 95.0, "p99": 99.0}


def _check(name: str) -> None:
    if name not in METRICS:
        raise AgentError(f"unknown metric {name!r}; valid: {list(METRICS)}")


def metric_from_latencies(latency_s: np.ndarray, ok: np.ndarray, name: str, timeout_s: float) -> float:
    """Exact: failed requests (``~ok``) count at ``timeout_s``."""
    _check(name)
    lat = np.where(ok, np.minimum(np.nan_to_num(latency_s, nan=timeout_s), timeout_s), timeout_s)
    if lat.size == 0:
        raise AgentError("the run has no requests to measure")
    if name == "mean":
        return float(lat.mean())
    return float(np.percentile(lat, _Q[name]))


def metric_from_requests(requests: Any, name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """From a requests table (loadgen.results.REQUESTS_SCHEMA)."""
    ok = requests["status"].to_numpy(dtype=object) == "ok"
    lat = requests["latency_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    return metric_from_latencies(lat, ok, name, timeout_s)


def metric_from_summary(summary: Mapping[str, Any], name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """From summary figures only: exact for the mean; for a percentile ``q``, the timeout once
    failures exceed the top ``100 - q`` %, else the successful requests' percentile (failed requests
    sit at the top of the distribution, so this is the percentile up to the rank shift)."""
    _check(name)
    count = int(summary.get("count") or 0)
    ok = int(summary.get("ok") or 0)
    if count == 0:
        raise AgentError("the run has no requests to measure")
    failed = count - ok
    if ok == 0:
        return float(timeout_s)
    if name == "mean":
        mean_ok = float(summary["latency_mean_s"])
        return (mean_ok * ok + timeout_s * failed) / count
    value = summary.get(f"latency_{name}_s")
    if failed / count > 1.0 - _Q[name] / 100.0 or value is None or not math.isfinite(value):
        return float(timeout_s)
    return float(value)


def run_timeout_s(summary: Mapping[str, Any]) -> float:
    """The client timeout a run's failed requests count at: the replay's, else the default (30 s)."""
    replay = summary.get("backend_replay") or {}
    return float(replay.get("timeout_s") or summary.get("timeout_s") or DEFAULT_TIMEOUT_S)
