"""Paired intervals, verdicts and the load-generator health check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.stats import (
    IMPROVEMENT,
    NO_DIFFERENCE,
    REGRESSION,
    UNREPLICATED,
    HealthBounds,
    mean_ci,
    paired_improvement,
    run_health,
    verdict,
)


def test_mean_ci_by_hand():
    # values 1, 2, 3: mean 2, sd 1, sem 1/sqrt(3); t(0.975, 2) = 4.302652729911275
    ci = mean_ci([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert ci.mean == pytest.approx(2.0)
    assert ci.low == pytest.approx(2.0 - half)
    assert ci.high == pytest.approx(2.0 + half)
    single = mean_ci([5.0])
    assert single.low is None and single.n == 1


def test_paired_improvement_by_hand():
    ref = [1.0, 2.0, 4.0]
    cand = [0.9, 1.8, 3.6]  # exactly 10 % better in every pair: zero-width interval
    ci = paired_improvement(ref, cand)
    assert ci.mean == pytest.approx(10.0)
    assert ci.low == pytest.approx(10.0) and ci.high == pytest.approx(10.0)
    assert verdict(ci) == IMPROVEMENT
    with pytest.raises(ValueError, match="differ in length"):
        paired_improvement([1.0], [1.0, 2.0])


def test_verdicts():
    noisy = paired_improvement([1.0, 1.0, 1.0], [0.9, 1.1, 0.97])
    assert noisy.low < 0 < noisy.high
    assert verdict(noisy) == NO_DIFFERENCE
    worse = paired_improvement([1.0, 1.0, 1.0], [1.2, 1.25, 1.22])
    assert verdict(worse) == REGRESSION
    one = paired_improvement([1.0], [0.8])
    assert verdict(one) == UNREPLICATED
    assert verdict(one, deterministic=True) == IMPROVEMENT


def test_run_health():
    good = {"count": 100, "dispatch_lag_p99_s": 0.01, "late_dispatches": 1, "latency_mean_s": 0.2, "failed": False}
    assert run_health(good) is None
    assert "failed" in run_health({**good, "failed": True, "failure": "locust died"})
    assert "dispatch lag" in run_health({**good, "dispatch_lag_p99_s": 3.0})
    assert "late dispatches" in run_health({**good, "late_dispatches": 10})
    assert run_health({**good, "late_dispatches": 10}, HealthBounds(max_late_share=0.2)) is None
    assert "no requests" in run_health({"count": 0})


def test_a_confirmation_stops_only_when_no_remaining_pair_can_make_it_an_improvement():
    from agent.stats import can_still_improve, mean_ci

    # three pairs: one difference at or below zero already rules an improvement out (max t = 2/sqrt(3) < 4.30)
    assert not can_still_improve([-5.0], 3) and not can_still_improve([0.0], 3)
    assert not can_still_improve([30.0, -1.0], 3)
    assert can_still_improve([30.0], 3) and can_still_improve([30.0, 25.0], 3)
    # with every pair in, it is the verdict itself
    assert can_still_improve([30.0, 25.0, 28.0], 3) == (mean_ci([30.0, 25.0, 28.0]).low > 0)
    assert not can_still_improve([30.0, 25.0, -40.0], 3)
    # with many pairs left, one bad pair does not end it
    assert can_still_improve([-5.0], 10)


def test_the_futility_rule_never_stops_a_confirmation_that_would_have_succeeded():
    from agent.stats import can_still_improve, mean_ci

    rng = np.random.default_rng(7)
    for _ in range(2000):
        d = rng.normal(10.0, 15.0, 3)
        succeeded = mean_ci(d).low > 0
        stopped = any(not can_still_improve(d[:k], 3) for k in (1, 2))
        assert not (succeeded and stopped), d
