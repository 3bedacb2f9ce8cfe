"""Failed requests count at the timeout: a profile cannot look good by failing requests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agent.errors import AgentError
from agent.metrics import metric_from_latencies, metric_from_requests, metric_from_summary


def test_failed_requests_count_at_the_timeout():
    lat = np.array([1.0, 2.0, np.nan, 3.0])
    ok = np.array([True, True, False, True])
    assert metric_from_latencies(lat, ok, "mean", 30.0) == pytest.approx((1 + 2 + 30 + 3) / 4)
    assert metric_from_latencies(lat, ok, "p50", 30.0) == pytest.approx(2.5)
    with pytest.raises(AgentError, match="unknown metric"):
        metric_from_latencies(lat, ok, "p90", 30.0)


def test_from_requests_table():
    frame = pd.DataFrame({"status": ["ok", "timeout", "ok"], "latency_s": [0.5, 30.0, 1.5]})
    assert metric_from_requests(frame, "mean", 10.0) == pytest.approx((0.5 + 10.0 + 1.5) / 3)


def test_from_summary_mean_is_exact_and_percentiles_saturate():
    summary = {"count": 100, "ok": 90, "latency_mean_s": 1.0, "latency_p95_s": 2.0, "latency_p50_s": 0.8}
    assert metric_from_summary(summary, "mean", 30.0) == pytest.approx((90 * 1.0 + 10 * 30.0) / 100)
    assert metric_from_summary(summary, "p95", 30.0) == 30.0  # 10 % failed > top 5 %
    assert metric_from_summary(summary, "p50", 30.0) == 0.8
    assert metric_from_summary({"count": 5, "ok": 0}, "mean", 30.0) == 30.0
    with pytest.raises(AgentError, match="no requests"):
        metric_from_summary({"count": 0}, "mean")
