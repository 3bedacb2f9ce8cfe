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


RUN_FACTS = ("cold_share", "failure_share", "tail_p99_p50", "tail_mean_p50")
"""What a run says about its cluster beside the metric, the same on every backend (they come from
the run's summary): the share of requests that met a cold start, the share that failed, and the
tail's shape as ``ln(p99 / p50)`` and ``ln(mean / p50)`` of the successful requests. No absolute
latency: a simulated cluster and a real one differ in scale, not in these shapes."""


def run_facts(summary: Mapping[str, Any]) -> dict[str, float]:
    """The :data:`RUN_FACTS` of one run's summary (``loadgen.results.summarize``'s figures); a run
    without a successful request has no tail (0)."""
    count = int(summary.get("count") or 0)
    if count <= 0:
        raise AgentError("the run has no requests to describe")
    failed = int(summary.get("errors") or 0) + int(summary.get("timeouts") or 0)
    p50, p99, mean = (summary.get(k) for k in ("latency_p50_s", "latency_p99_s", "latency_mean_s"))
    shaped = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (p50, p99, mean))
    return {
        "cold_share": int(summary.get("cold_starts") or 0) / count,
        "failure_share": failed / count,
        "tail_p99_p50": math.log(float(p99) / float(p50)) if shaped else 0.0,
        "tail_mean_p50": math.log(float(mean) / float(p50)) if shaped else 0.0,
    }


def mean_facts(facts: list[Mapping[str, float]]) -> dict[str, float]:
    """The facts of repeated runs of one step, averaged per fact (empty when none were recorded)."""
    if not facts:
        return {}
    return {k: float(np.mean([f[k] for f in facts])) for k in RUN_FACTS}
