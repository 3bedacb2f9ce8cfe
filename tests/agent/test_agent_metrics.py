"""Failed requests count at the timeout: a profile cannot look good by failing requests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agent.errors import AgentError
from agent.metrics import (
    mean_facts,
    metric_from_latencies,
    metric_from_requests,
    metric_from_summary,
    run_facts,
)


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


def test_run_facts_from_a_requests_summary():
    from loadgen.results import summarize

    frame = pd.DataFrame({"request_id": range(5), "function": ["f"] * 5, "scheduled_s": [0.0] * 5,
                          "sent_s": [0.0] * 5, "finished_s": [1.0] * 5, "latency_s": [1.0, 2.0, 4.0, None, 1.0],
                          "status": ["ok", "ok", "ok", "error", "ok"], "http_status": [200] * 5,
                          "node": ["n"] * 5, "cold_start": [True, False, True, False, False]})
    facts = run_facts(summarize(frame))
    assert facts["cold_share"] == pytest.approx(2 / 5) and facts["failure_share"] == pytest.approx(1 / 5)
    # ok latencies 1, 2, 4, 1: p50 1.5, p99 3.94, mean 2
    assert facts["tail_p99_p50"] == pytest.approx(np.log(np.percentile([1, 2, 4, 1], 99) / 1.5))
    assert facts["tail_mean_p50"] == pytest.approx(np.log(2.0 / 1.5))
    nothing_ok = run_facts({"count": 3, "errors": 1, "timeouts": 2, "cold_starts": 0})
    assert nothing_ok == {"cold_share": 0.0, "failure_share": 1.0, "tail_p99_p50": 0.0, "tail_mean_p50": 0.0}
    assert mean_facts([facts, nothing_ok])["failure_share"] == pytest.approx(0.6) and mean_facts([]) == {}
    with pytest.raises(AgentError, match="no requests"):
        run_facts({"count": 0})


def test_the_simulator_objective_reports_the_facts_of_the_run_it_memoised():
    from agent.actions import ActionCodec
    from agent.objectives.sim import scenario_objective
    from testbed.sim import evaluate

    codec = ActionCodec()
    objective = scenario_objective("lab-web", 0)
    metric = objective(codec.reference())
    facts = objective.facts(codec.reference())
    assert objective.runs == 1 and metric > 0
    summary = evaluate(objective.cluster, objective.workload, codec.reference().to_profile(), seed=0)
    assert facts == run_facts(summary) and 0 < facts["cold_share"] < 1
