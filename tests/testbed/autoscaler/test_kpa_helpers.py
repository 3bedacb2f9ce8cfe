"""Small KPA formulas against upstream's numbers (knative/serving 98e5ef90): scraper sample size
(``metrics/sample_size.go``), panic window rounding (``resources/metric.go``), the decider spec from
annotations (``resources/target.go``), activator count (``kpa.go``), initial EBC (``multiscaler.go``)
and the poke path."""

from __future__ import annotations

import pytest

from functions.spec import parse_spec
from testbed.autoscaler.kpa import (
    AutoscalerConfig,
    DeciderSpec,
    RevisionAutoscaler,
    compute_num_activators,
    initial_excess_burst_capacity,
    panic_window_s,
    population_mean_sample_size,
    resolve_decider_spec,
)


@pytest.mark.parametrize(("n", "want"), [(0, 0), (1, 1), (3, 3), (5, 4), (10, 7), (100, 14), (1000, 16)])
def test_population_mean_sample_size(n, want):
    assert population_mean_sample_size(n) == want


@pytest.mark.parametrize(("stable", "pct", "want"), [(60, 10, 6), (60, 51, 31), (6, 1, 1), (60, 100, 60), (7, 50, 4)])
def test_panic_window_rounds_half_away_and_at_least_a_bucket(stable, pct, want):
    assert panic_window_s(stable, pct) == want


def _spec(cc=0, **autoscaling):
    return parse_spec({
        "name": "fn", "handler": "m:f", "image": {"name": "i", "size": "1Mi"},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
        "container_concurrency": cc, "autoscaling": autoscaling,
        "cold_start": {"start_s": 0.1, "init_s": 0.1},
        "work": {"cpu_s": {"distribution": "constant", "mean": 0.1}, "memory": "1Mi"},
    })


def test_resolve_decider_spec_targets():
    d = resolve_decider_spec(_spec())
    assert (d.target_value, d.total_value) == (pytest.approx(70.0), 100.0)
    d = resolve_decider_spec(_spec(cc=10, target=50))
    assert (d.target_value, d.total_value) == (pytest.approx(7.0), 10.0)  # min(annotation, CC)
    d = resolve_decider_spec(_spec(target=10, target_utilization_percentage=50))
    assert d.target_value == pytest.approx(5.0)
    d = resolve_decider_spec(_spec(panic_threshold_percentage=300, stable_window_s=120, scale_down_delay_s=30))
    assert (d.panic_threshold, d.stable_window_s, d.scale_down_delay_s) == (3.0, 120.0, 30.0)
    assert d.target_burst_capacity == 211 and d.max_scale_up_rate == 1000 and d.max_scale_down_rate == 2


def test_activators_and_initial_ebc():
    spec = DeciderSpec(target_value=70, total_value=100, target_burst_capacity=211, activator_capacity=100)
    assert compute_num_activators(0, spec) == 3  # ceil(211/100)
    assert compute_num_activators(10, spec) == 13  # ceil((1000 + 211) / 100)
    assert compute_num_activators(5, DeciderSpec(target_value=1, total_value=1, target_burst_capacity=0)) == 2
    assert initial_excess_burst_capacity(spec) == int(1 * 100 - 211)
    assert initial_excess_burst_capacity(DeciderSpec(target_value=1, total_value=1, target_burst_capacity=-1)) == -1


def test_config_validation():
    with pytest.raises(ValueError, match="> 1"):
        AutoscalerConfig(max_scale_down_rate=1.0)
    with pytest.raises(ValueError, match="stable_window_s"):
        AutoscalerConfig(stable_window_s=5)


def test_poke_only_when_last_desired_is_zero():
    ra = RevisionAutoscaler(_spec(), now=0.0, at_zero=True)
    assert ra.needs_poke()
    assert ra.poke(0.5, ready_pods=0) == 1
    assert ra.desired_scale == 1 and not ra.needs_poke()
    assert ra.poke(0.7, ready_pods=0) is None  # recorded, no out-of-band decision


def test_steady_revision_does_not_scale_down_before_data_ages():
    """A revision at 3 pods (steady state) with no traffic goes down at most by the scale-down rate
    per tick: maxDown = floor(3 / 2) = 1 clamps the desired 0 to 1."""
    ra = RevisionAutoscaler(_spec(min_scale=0), now=0.0, steady_pods=3)
    assert ra.pa.state == "active" and ra.pa.replicas == 3
    for t in (1.0, 2.0):
        ra.record(t, 0.0, 0.0)
    assert ra.tick(2.0, ready_pods=3) == 1
    assert ra.last_result.desired_pod_count == 1
