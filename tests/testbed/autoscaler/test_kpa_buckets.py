"""Knative's metric windows against ``pkg/autoscaler/aggregation/bucketing_test.go`` and the
scale-down-delay maximum against ``max/window_test.go`` semantics (knative/serving 98e5ef90)."""

from __future__ import annotations

import math

import pytest

from testbed.autoscaler.buckets import (
    MIN_EXPONENT,
    MaxTimeWindow,
    TimedFloat64Buckets,
    WeightedFloat64Buckets,
    compute_smoothing_coeff,
    round_to_n_digits,
)

NOW = 1_000_000.0  # a whole second, like time.Now().Truncate(time.Second) in the Go tests


@pytest.mark.parametrize(("nb", "want"), [(100, MIN_EXPONENT), (60, MIN_EXPONENT), (40, 0.20567), (6, 0.78456)])
def test_compute_decay_multiplier(nb, want):
    assert abs(compute_smoothing_coeff(nb) - want) < 1e-4


def test_simple_granularity_1s():
    b = TimedFloat64Buckets(120, 1)
    assert b.is_empty(NOW)
    for t, v in [(NOW, 1.0), (NOW + 0.1, 10.0), (NOW + 1, 1.0), (NOW + 3, 1.0)]:
        b.record(t, v)
    got = {t: v for t, v in b.for_each_bucket(NOW + 60) if v > 0}
    assert got == {NOW: 11.0, NOW + 1: 1.0, NOW + 3: 1.0}


def test_simple_granularity_5s():
    b = TimedFloat64Buckets(120, 5)
    for t, v in [(NOW, 1.0), (NOW + 3, 11.0), (NOW + 6, 1.0)]:
        b.record(t, v)
    got = {t: v for t, v in b.for_each_bucket(NOW + 60) if v > 0}
    assert got == {NOW: 12.0, NOW + 5: 1.0}


def test_many_reps_and_non_monotonic_order():
    b = TimedFloat64Buckets(60, 1)
    t = NOW
    for p in range(5):
        t += 1
        for k in range(5):
            b.record(t, float(p + k))
    assert sum(v for _, v in b.for_each_bucket(t)) == 100.0
    b = TimedFloat64Buckets(60, 1)
    end = NOW
    for p, d in enumerate([0, 3, 2, 1, 4]):
        end = NOW + d
        for k in range(5):
            b.record(end, float(p + k))
    assert sum(v for _, v in b.for_each_bucket(end)) == 100.0


def test_weighted_average():
    b = WeightedFloat64Buckets(5, 1)
    b.record(NOW, 2)
    want = 2 * b.smoothing_coeff
    assert b.window_average(NOW) == want
    want *= 1 - b.smoothing_coeff
    assert b.window_average(NOW + 1) == want
    b.record(NOW + 1, 2)
    want += 2 * b.smoothing_coeff
    assert b.window_average(NOW + 1) == pytest.approx(want, rel=1e-15)
    for i in range(5):
        b.record(NOW + 2 + i, float(i + 2))
    m = b.smoothing_coeff
    want = 6 * m + 5 * m * (1 - m) + 4 * m * (1 - m) ** 2 + 3 * m * (1 - m) ** 3 + 2 * m * (1 - m) ** 4
    assert b.window_average(NOW + 6) == pytest.approx(want, rel=1e-12)
    assert b.window_average(NOW + 16) == 0.0


def test_window_average():
    b = TimedFloat64Buckets(5, 1)
    now = NOW + 0.25
    b.record(now, 1)
    assert b.window_average(now) == 1.0  # firstWrite is honoured, not 0.2
    for i in range(1, 5):
        b.record(now + i, float(i + 1))
    assert b.window_average(now + 4) == 15.0 / 5
    assert b.window_average(now + 3.6) == 15.0 / 5  # now lags behind
    assert b.window_average(now + 6) == (15.0 - 1 - 2) / (5 - 2)  # short hole
    assert b.window_average(now + 10) == 0.0  # long hole
    b.record(now + 6, 91)
    assert b.window_average(now + 6) == (15.0 - 1 - 2 + 91) / 5
    now += 60
    b.record(now, 1984)
    assert b.window_average(now) == 1984.0
    b.record(now - 3, 4)
    assert b.window_average(now) == (4.0 + 1984) / 4
    now += 1
    b.record(now, 5)
    assert b.window_average(now) == (4.0 + 1984 + 5) / 5
    b.record(now - 3, 10)
    assert b.window_average(now) == (4.0 + 10 + 1984 + 5) / 5
    b.record(now - 6, 10)  # too early: ignored
    assert b.window_average(now) == (4.0 + 10 + 1984 + 5) / 5
    b.record(now - 5, 10)  # exactly a window old: ignored
    assert b.window_average(now) == (4.0 + 10 + 1984 + 5) / 5
    b.record(now + 5, 10)  # exactly a window of silence resets
    assert b.window_average(now + 5) == 10.0


def test_descending_record():
    b = TimedFloat64Buckets(5, 1)
    for i in range(8, -1, -1):
        b.record(NOW + i, 5)
    assert b.window_average(NOW + 5) == 5.0


def test_holes():
    b = TimedFloat64Buckets(5, 1)
    for i in range(5):
        b.record(NOW + i, float(i + 1))
    assert sum(v for _, v in b.for_each_bucket(NOW + 4)) == 15.0
    assert b.window_average(NOW + 4) == 3.0
    b.record(NOW + 8, 2.0)  # seconds 5, 6, 7 become 0
    assert sum(v for _, v in b.for_each_bucket(NOW + 8)) == 7.0


def test_weighted_resize_initial_average():
    b = WeightedFloat64Buckets(5, 1)
    for i in range(6):
        b.record(NOW + i, float(i + 1))
    assert sum(v for _, v in b.for_each_bucket(NOW + 5)) == 2.0 + 3 + 4 + 5 + 6
    assert round_to_n_digits(3, b.window_average(NOW + 5)) == 5.812


def test_round_half_away_from_zero():
    assert round_to_n_digits(0, 0.5) == 1.0 and round_to_n_digits(0, -0.5) == -1.0
    assert round_to_n_digits(0, 2.5) == 3.0  # Python's round() would give 2


def test_max_window_slides_and_keeps_largest_per_slot():
    w = MaxTimeWindow(300, 2)
    assert w.size == 150
    w.record(2, 4)
    w.record(300, 0)
    assert w.current() == 4
    w.record(302, 0)
    assert w.current() == 0
    w.record(310, 3)
    w.record(311, 1)  # same 2 s slot: the larger stays
    assert w.current() == 3
    assert math.isclose(w.size * 2, 300)
