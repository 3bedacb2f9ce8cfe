"""The KPA decider against knative/serving's own decider tests.

Ported from ``pkg/autoscaler/scaling/autoscaler_test.go`` at commit 98e5ef90: the same specs
(target utilisation 0.75 so ``TotalValue = target / 0.75``, panic threshold 2, rates 10), the same
observed values and the same expected ``ScaleResult`` (EBC compared with upstream's ±1 tolerance).
Go's ``time.Now()`` becomes an explicit ``now``.
"""

from __future__ import annotations

import math

import pytest

from testbed.autoscaler.kpa import Decider, DeciderSpec, ScaleResult

STABLE_WINDOW = 60.0
TARGET_UTILIZATION = 0.75
ACTIVATOR_CAPACITY = 150.0
TICK = 2.0


def expected_ebc(tot_cap: float, target_bc: float, recorded: float, num_pods: float) -> int:
    """``expectedEBC`` of upstream's test file."""
    return int(math.floor(tot_cap / TARGET_UTILIZATION * num_pods - target_bc - recorded))


def make(target: float, tbc: float, *, ready: int = 1, metric: str = "concurrency", start_in_panic: bool = False,
         **overrides) -> Decider:
    """``newTestAutoscalerWithScalingMetric``: the decider is created seeing 1 ready pod (2 to start in panic)."""
    fields = dict(
        scaling_metric=metric,
        target_value=target,
        total_value=target / TARGET_UTILIZATION,
        target_burst_capacity=tbc,
        panic_threshold=2.0,
        max_scale_up_rate=10.0,
        max_scale_down_rate=10.0,
        activator_capacity=ACTIVATOR_CAPACITY,
        stable_window_s=STABLE_WINDOW,
        reachable=True,
    )
    fields.update(overrides)
    return Decider(DeciderSpec(**fields), ready_pods_at_creation=2 if start_in_panic else ready, created_s=0.0)


def expect(d: Decider, now: float, ready: int, stable: float, panic: float, want: ScaleResult) -> None:
    got = d.scale(now, ready, stable, panic)
    assert got.scale_valid == want.scale_valid
    assert got.desired_pod_count == want.desired_pod_count
    assert abs(got.excess_burst_capacity - want.excess_burst_capacity) <= 1, (got, want)


def test_scale_down_delay_simple_and_gradual():
    spec = DeciderSpec(target_value=10, total_value=10, max_scale_down_rate=10, max_scale_up_rate=10,
                       panic_threshold=100, scale_down_delay_s=300, reachable=True, target_burst_capacity=0)
    d = Decider(spec, ready_pods_at_creation=0)
    # simple
    assert d.scale(2, 0, 40, 40).desired_pod_count == 4
    assert d.scale(300, 0, 0, 0).desired_pod_count == 4  # five minutes: still held
    assert d.scale(302, 0, 0, 0).desired_pod_count == 0  # five minutes and 2 s: released
    # gradual
    assert d.scale(540, 0, 40, 40).desired_pod_count == 4
    assert d.scale(600, 0, 30, 30).desired_pod_count == 4  # 4 still dominates
    assert d.scale(660, 0, 0, 0).desired_pod_count == 4
    assert d.scale(840, 0, 0, 0).desired_pod_count == 3  # 4 scrolls out
    assert d.scale(900, 0, 0, 0).desired_pod_count == 0


def test_scale_down_delay_bypassed_when_unreachable():
    spec = DeciderSpec(target_value=10, total_value=10, max_scale_down_rate=10, max_scale_up_rate=10,
                       panic_threshold=100, scale_down_delay_s=300, reachable=True, target_burst_capacity=0)
    d = Decider(spec, ready_pods_at_creation=0)
    assert d.scale(2, 0, 40, 40).desired_pod_count == 4
    assert d.scale(60, 0, 0, 0).desired_pod_count == 4
    d.update(DeciderSpec(target_value=10, total_value=10, max_scale_down_rate=10, max_scale_up_rate=10,
                         panic_threshold=100, scale_down_delay_s=300, reachable=False, target_burst_capacity=0))
    assert d.scale(2, 0, 0, 0).desired_pod_count == 0


def test_scale_down_delay_zero_is_no_window():
    spec = DeciderSpec(target_value=10, total_value=10, max_scale_down_rate=10, max_scale_up_rate=10,
                       panic_threshold=100, scale_down_delay_s=0, reachable=False, target_burst_capacity=0)
    d = Decider(spec, ready_pods_at_creation=0)
    assert d.delay_window is None
    assert d.scale(0, 0, 40, 40).desired_pod_count == 4
    assert d.scale(0.5, 0, 20, 20).desired_pod_count == 2  # same 2 s slot, still scales down


def test_no_data_no_autoscale():
    d = make(10, 100)
    assert d.scale(0, 1, None, None) == ScaleResult(0, 0, False)
    assert d.scale(0, None, 1.0, 1.0) == ScaleResult(0, 0, False)  # TestCantCountPods


def test_metrics_basic_and_rps():
    expect(make(10, 100), 0, 1, 50, 50, ScaleResult(5, expected_ebc(10, 100, 50, 1), True))
    d = make(10, 100, metric="rps")
    expect(d, 61, 1, 100, 99, ScaleResult(10, expected_ebc(10, 100, 99, 1), True))
    assert d.in_panic  # 10 pods from 1 is over the threshold


def test_stable_mode_increase_with_concurrency_default():
    d = make(10, 101)
    expect(d, 0, 1, 50, 10, ScaleResult(5, expected_ebc(10, 101, 10, 1), True))
    expect(d, 0, 1, 100, 10, ScaleResult(10, expected_ebc(10, 101, 10, 1), True))


def test_stable_mode_increase_with_rps():
    d = make(10, 101, metric="rps")
    expect(d, 0, 1, 50, 50, ScaleResult(5, expected_ebc(10, 101, 50, 1), True))
    expect(d, 0, 1, 100, 99, ScaleResult(10, expected_ebc(10, 101, 99, 1), True))


def test_unpanic_after_slow_increase():
    d = make(1, 98)
    start = 1000.0
    expect(d, start, 10, 11, 25, ScaleResult(25, expected_ebc(1, 98, 25, 10), True))
    assert d.panic_time == start
    tm = start + STABLE_WINDOW / 2
    expect(d, tm, 40, 30, 41, ScaleResult(41, expected_ebc(1, 98, 41, 40), True))
    assert d.panic_time == start  # 41/40 is under the threshold: panic not extended
    tm += STABLE_WINDOW / 2 + TICK
    expect(d, tm, 55, 50, 56, ScaleResult(50, expected_ebc(1, 98, 56, 55), True))
    assert d.panic_time is None


def test_extend_panic_window():
    d = make(1, 98)
    start = 1000.0
    expect(d, start, 10, 11, 25, ScaleResult(25, expected_ebc(1, 98, 25, 10), True))
    tm = start + STABLE_WINDOW / 2
    expect(d, tm, 40, 30, 80, ScaleResult(80, expected_ebc(1, 98, 80, 40), True))
    assert d.panic_time == tm


def test_stable_mode_decrease():
    d = make(10, 98)
    expect(d, 0, 8, 100, 100, ScaleResult(10, expected_ebc(10, 98, 100, 8), True))
    expect(d, 0, 8, 50, 50, ScaleResult(5, expected_ebc(10, 98, 50, 8), True))


def test_stable_mode_no_traffic_scale_to_zero():
    d = make(10, 75)
    expect(d, 0, 1, 1, 0, ScaleResult(1, expected_ebc(10, 75, 0, 1), True))
    expect(d, 0, 1, 0, 0, ScaleResult(0, expected_ebc(10, 75, 0, 1), True))


def test_activation_scale():
    d = make(10, 75, activation_scale=2)
    expect(d, 0, 1, 0, 0, ScaleResult(0, expected_ebc(10, 75, 0, 1), True))
    expect(d, 0, 1, 1, 0, ScaleResult(2, expected_ebc(10, 75, 0, 1), True))


def test_panic_mode_exponential_track_and_stabilize():
    d = make(1, 101)
    expect(d, 0, 1, 6, 6, ScaleResult(6, expected_ebc(1, 101, 6, 1), True))
    tm = 10.0
    expect(d, tm, 6, 36, 36, ScaleResult(36, expected_ebc(1, 101, 36, 6), True))
    assert d.panic_time == tm
    tm += 1
    expect(d, tm, 36, 216, 216, ScaleResult(216, expected_ebc(1, 101, 216, 36), True))
    assert d.panic_time == tm
    expect(d, tm, 216, 1296, 1296, ScaleResult(1296, expected_ebc(1, 101, 1296, 216), True))
    assert d.panic_time == tm
    tm += 1
    expect(d, tm, 1296, 1296, 1296, ScaleResult(1296, expected_ebc(1, 101, 1296, 1296), True))


# TestAutoscalerScale's table: (label, target, tbc, stable, panic, base_scale, prep, want_scale, want_ebc)
NOW = 1000.0
TABLE = [
    ("AutoscalerNoDataAtZeroNoAutoscale", 10, 100, 0, 0, 1, {}, None, 0, expected_ebc(10, 100, 0, 1)),
    ("AutoscalerStableModeUnlimitedTBC", 181, -1, 21, 26, 1, {}, None, 1, -1),
    ("Autoscaler0TBC", 10, 0, 50, 49, 1, {}, None, 5, 0),
    ("AutoscalerStableModeNoChange", 10, 100, 50, 50, 1, {}, None, 5, expected_ebc(10, 100, 50, 1)),
    ("AutoscalerPanicStableLargerThanPanic", 1, 100, 50, 30, 5, {}, (NOW - 5, 5), 50, expected_ebc(1, 100, 30, 5)),
    ("AutoscalerPanicStableLessThanPanic", 1, 100, 20, 30, 5, {}, (NOW - 5, 5), 30, expected_ebc(1, 100, 30, 5)),
    ("AutoscalerStableModeNoChangeAlreadyScaled", 10, 100, 50, 50, 5, {}, None, 5, expected_ebc(10, 100, 50, 5)),
    ("AutoscalerStableModeIncreaseWithSmallScaleUpRate", 1, 1982, 3, 3.1, 2, {"max_scale_up_rate": 1.1}, None, 3,
     expected_ebc(1, 1982, 3.1, 2)),
    ("AutoscalerStableModeDecreaseWithSmallScaleDownRate", 10, 1982, 1, 1, 100, {"max_scale_down_rate": 1.1}, None, 90,
     expected_ebc(10, 1982, 1, 100)),
    ("AutoscalerStableModeDecreaseNonReachable", 10, 1982, 1, 1, 100,
     {"max_scale_down_rate": 1.1, "reachable": False}, None, 1, expected_ebc(10, 1982, 1, 100)),
    ("AutoscalerPanicModeDoublePodCount", 10, 84, 50, 100, 1, {}, None, 10, expected_ebc(10, 84, 100, 1)),
]


@pytest.mark.parametrize(("label", "target", "tbc", "stable", "panic", "base", "prep", "panic_state", "want", "ebc"),
                         TABLE, ids=[row[0] for row in TABLE])
def test_autoscaler_scale_table(label, target, tbc, stable, panic, base, prep, panic_state, want, ebc):
    d = make(target, tbc, **prep)
    if panic_state is not None:
        d.panic_time, d.max_panic_pods = panic_state
    expect(d, NOW, base, stable, panic, ScaleResult(want, ebc, True))


def test_panic_then_unpanic_scale_down():
    d = make(10, 93)
    expect(d, 0, 1, 100, 100, ScaleResult(10, expected_ebc(10, 93, 100, 1), True))
    panic_time = 100.0
    expect(d, panic_time, 10, 100, 1000, ScaleResult(100, expected_ebc(10, 93, 1000, 10), True))
    expect(d, panic_time + 30, 10, 1, 1, ScaleResult(100, expected_ebc(10, 93, 1, 10), True))
    expect(d, panic_time + 61, 10, 1, 1, ScaleResult(1, expected_ebc(10, 93, 1, 10), True))


def test_panic_exit_is_strict():
    """``panicTime.Add(StableWindow).Before(now)``: exactly a stable window later is still panic."""
    d = make(10, 93)
    d.scale(100, 10, 100, 1000)
    assert d.scale(160, 10, 1, 1).desired_pod_count == 100
    assert d.in_panic
    assert d.scale(160.001, 10, 1, 1).desired_pod_count == 1
    assert not d.in_panic and d.max_panic_pods == 0


def test_rate_limit_scale_up_and_down():
    d = make(10, 61)
    expect(d, 0, 1, 1000, 1001, ScaleResult(10, expected_ebc(10, 61, 1001, 1), True))
    expect(d, 0, 10, 1000, 1001, ScaleResult(100, expected_ebc(10, 61, 1001, 10), True))
    d = make(10, 61)
    expect(d, 0, 100, 1, 1, ScaleResult(10, expected_ebc(10, 61, 1, 100), True))
    expect(d, 0, 10, 1, 1, ScaleResult(1, expected_ebc(10, 61, 1, 10), True))


def test_one_pod_as_minimum_if_endpoints_not_found():
    d = make(10, 81)
    expect(d, 0, 0, 1000, 888, ScaleResult(10, expected_ebc(10, 81, 888, 0), True))


def test_update_target():
    d = make(10, 77)
    expect(d, 0, 1, 100, 101, ScaleResult(10, expected_ebc(10, 77, 101, 1), True))
    d.update(DeciderSpec(target_value=1, total_value=1 / TARGET_UTILIZATION, activator_capacity=21,
                         target_burst_capacity=71, panic_threshold=2, max_scale_down_rate=10,
                         max_scale_up_rate=10, stable_window_s=STABLE_WINDOW))
    expect(d, 0, 10, 100, 101, ScaleResult(100, expected_ebc(1, 71, 101, 10), True))


def test_start_in_panic_mode():
    spec = DeciderSpec(target_value=100, total_value=120, target_burst_capacity=11, panic_threshold=220,
                       max_scale_up_rate=10, max_scale_down_rate=10, stable_window_s=STABLE_WINDOW)
    for i in range(2):
        d = Decider(spec, ready_pods_at_creation=i)
        assert not d.in_panic
        assert d.max_panic_pods == i
    d = Decider(spec, ready_pods_at_creation=2)
    assert d.in_panic and d.max_panic_pods == 2
