"""Scale-to-zero timing and bounds of the KPA reconciler.

Cases from ``pkg/reconciler/autoscaling/kpa/scaler_test.go`` ``TestScaler`` (knative/serving
98e5ef90; there the grace period and stable window are 60 s): an Active PA idles at one pod for a
stable window, is then marked inactive, and goes to zero after the grace period (or at once when
the SKS has been proxying for a grace period); an Activating PA gives up after the progress
deadline + 30 s. Then the whole revision loop: collector, decider ticks and reconciler together.
"""

from __future__ import annotations

import pytest

from functions.spec import parse_spec
from testbed.autoscaler.kpa import SCALE_UNKNOWN, AutoscalerConfig, PodAutoscaler, RevisionAutoscaler

GRACE = 60.0
STABLE = 60.0
NOW = 10_000.0


def pa(state: str, since: float, *, replicas: int = 1, sks: str = "serve", proxy_for: float | None = None,
       retention: float = 0.0, **kw) -> PodAutoscaler:
    cfg = AutoscalerConfig(scale_to_zero_grace_period_s=GRACE, scale_to_zero_pod_retention_period_s=retention)
    p = PodAutoscaler(stable_window_s=STABLE, config=cfg, state=state, state_since=since, replicas=replicas,
                      scale_target_initialized=True, sks_mode=sks, **kw)
    p.proxy_since = NOW - proxy_for if proxy_for is not None else (None if sks == "serve" else NOW)
    return p


@pytest.mark.parametrize(
    ("label", "p", "start", "want", "applied"),
    [
        ("waits to scale to zero (just before idle period)", lambda: pa("active", NOW - STABLE + 1), 1, 1, 1),
        ("scale to 1 waiting for idle expires", lambda: pa("active", NOW - STABLE + 1, replicas=10), 10, 1, 1),
        ("waits to scale to zero after idle period", lambda: pa("active", NOW - STABLE), 1, 0, 1),
        ("scale to zero after grace period", lambda: pa("inactive", NOW - GRACE), 1, 0, 0),
        ("waits to scale to zero (just before grace period)", lambda: pa("inactive", NOW - GRACE + 1), 1, 0, 1),
        ("just before grace period, sks short", lambda: pa("inactive", NOW - GRACE + 1, sks="proxy",
                                                           proxy_for=GRACE - 1), 1, 0, 1),
        ("just before grace period, sks in proxy long", lambda: pa("inactive", NOW - GRACE + 1, sks="proxy",
                                                                   proxy_for=GRACE), 1, 0, 0),
        ("can't scale to zero before last pod retention", lambda: pa("inactive", NOW - GRACE, retention=2 * GRACE),
         1, 0, 1),
        ("scale to zero after grace and retention", lambda: pa("inactive", NOW - GRACE, retention=GRACE), 1, 0, 0),
        ("waits while activating until the deadline", lambda: pa("activating", NOW - 315), 1, SCALE_UNKNOWN, 1),
        ("scale to zero while activating after the deadline", lambda: pa("activating", NOW - 631), 1, 0, 0),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_scaler_table(label, p, start, want, applied):
    x = p()
    assert x.replicas == start
    assert x.scale(NOW, 0) == want
    assert x.replicas == applied


def test_bounds_and_initial_scale():
    p = pa("active", NOW, min_scale=2, max_scale=5)
    assert p.scale(NOW, 0) == 2
    assert p.scale(NOW, 9) == 5
    p = pa("activating", NOW, initial_scale=3)
    p.scale_target_initialized = False
    assert p.scale(NOW, 1) == 3  # initial scale raises the minimum until attained
    p.reachable = False
    assert p.scale(NOW, 1) == 1  # unreachable revisions ignore initial scale
    p = PodAutoscaler(config=AutoscalerConfig(enable_scale_to_zero=False), state="active", state_since=0.0)
    assert p.scale(NOW, 0) == 1


def _spec(cc: int = 0, **autoscaling):
    return parse_spec(
        {
            "name": "fn",
            "handler": "functions.float_ops.handler:handle",
            "image": {"name": "img", "size": "100Mi"},
            "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
            "container_concurrency": cc,
            "autoscaling": autoscaling,
            "cold_start": {"start_s": 0.5, "init_s": 0.5},
            "work": {"cpu_s": {"distribution": "constant", "mean": 0.1}, "memory": "1Mi"},
        }
    )


def _drive(ra: RevisionAutoscaler, busy_until: float, pod_ready_at: float, end: float) -> list[tuple[float, int]]:
    """One request in flight until ``busy_until``; one pod that becomes ready at ``pod_ready_at``
    once the revision is scaled up. Returns (t, replicas) at every change."""
    history: list[tuple[float, int]] = []
    replicas = ra.poke(0.2, ready_pods=0)
    assert replicas == 1, "the activator's poke scales a revision at zero up at once"
    history.append((0.2, replicas))
    t = 1.0
    while t <= end:
        ready = 1 if (replicas >= 1 and t >= pod_ready_at) else 0
        conc = 1.0 if t <= busy_until else 0.0
        if ready or conc:
            ra.record(t, conc, conc)
        if t % 2 == 0:
            new = ra.tick(t, ready)
            if new != replicas:
                history.append((t, new))
                replicas = new
        t += 1.0
    return history


def test_idle_revision_goes_to_zero_a_stable_window_after_traffic_stops():
    """The default path: one pod, TBC 211 keeps the activator in the path (EBC < 0), so once the
    stable window is silent the PA is marked inactive and the next reconcile scales to zero."""
    ra = RevisionAutoscaler(_spec(), now=0.0, at_zero=True)
    history = _drive(ra, busy_until=20, pod_ready_at=3, end=200)
    assert history[0] == (0.2, 1)
    (t0, r0), = history[1:]
    assert r0 == 0
    # the stable average is exactly 0 once buckets 21..80 are all zero -> desired 0 at t=80;
    # Active for >= 60 s then -> inactive at 80; proxying long -> applied at the next tick.
    assert t0 == 82.0
    assert ra.pa.state == "inactive"


def test_serve_mode_waits_a_grace_period_in_proxy():
    """With TBC = 0 the SKS serves directly (EBC 0 >= 0); on going inactive it switches to Proxy and
    must proxy for the 30 s grace period before the pod goes."""
    cfg = AutoscalerConfig(target_burst_capacity=0)
    ra = RevisionAutoscaler(_spec(), cfg, now=0.0, at_zero=True)
    history = _drive(ra, busy_until=20, pod_ready_at=3, end=200)
    assert history[-1][1] == 0
    assert history[-1][0] == 80.0 + 30.0


def test_min_scale_never_goes_below():
    ra = RevisionAutoscaler(_spec(min_scale=1), now=0.0, at_zero=True)
    history = _drive(ra, busy_until=5, pod_ready_at=2, end=300)
    assert all(r >= 1 for _, r in history)


def test_container_concurrency_one_targets_seventy_percent():
    """CC = 1 gives target 0.7 per pod, so one in-flight request asks for ceil(1/0.7) = 2 pods."""
    ra = RevisionAutoscaler(_spec(cc=1), now=0.0, at_zero=True)
    assert ra.decider_spec.target_value == pytest.approx(0.7)
    assert ra.decider_spec.total_value == 1.0
    assert ra.poke(0.2, ready_pods=0) == 2
