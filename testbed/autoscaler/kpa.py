"""The Knative Pod Autoscaler (KPA), ported: decider, metric collection and the PodAutoscaler
reconciler's scale-to-zero logic, pure and clock-free (every call takes ``now`` in seconds).

One implementation shared by the simulator (``testbed/sim``) and the embedded lab
(``testbed/local``), so both scale a function exactly as Knative would given the same
observations. Ported from knative/serving at commit 98e5ef90 (2026-08-21):

- decider ``Scale``: ``pkg/autoscaler/scaling/autoscaler.go``
- tick and poke: ``pkg/autoscaler/scaling/multiscaler.go`` (2 s tick; an immediate decision when a
  non-zero stat arrives for a revision whose last desired scale is 0)
- windows: ``pkg/autoscaler/aggregation/bucketing.go`` (see :mod:`testbed.autoscaler.buckets`),
  collection: ``pkg/autoscaler/metrics/collector.go``
- the decider spec: ``pkg/reconciler/autoscaling/kpa/resources/decider.go`` and
  ``pkg/reconciler/autoscaling/resources/{target,metric}.go``
- bounds, initial scale and scale to zero: ``pkg/reconciler/autoscaling/kpa/scaler.go``
  (``scale``, ``handleScaleToZero``, ``applyBounds``) and ``kpa.go`` (``computeActiveCondition``,
  ``activeThreshold``, the SKS mode, ``computeNumActivators``)
- defaults: ``pkg/autoscaler/config/config.go``

Observed values are revision-wide *totals* (what the collector returns after the scraper scales
its sample up to all pods), not per-pod averages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from testbed.autoscaler.buckets import MaxTimeWindow, TimedFloat64Buckets, WeightedFloat64Buckets

if TYPE_CHECKING:
    from functions.spec import FunctionSpec

TICK_INTERVAL_S = 2.0  # multiscaler.go tickInterval
SCRAPE_INTERVAL_S = 1.0  # collector.go scrapeTickInterval
BUCKET_SIZE_S = 1.0  # config.go BucketSize
ACTIVATION_TIMEOUT_BUFFER_S = 30.0  # scaler.go activationTimeoutBuffer
MIN_ACTIVATORS = 2  # kpa.go minActivators
SCALE_UNKNOWN = -1


@dataclass(frozen=True)
class AutoscalerConfig:
    """``config-autoscaler`` (and the progress deadline of ``config-deployment``) with Knative's
    defaults (``config.go`` ``defaultConfig``)."""

    enable_scale_to_zero: bool = True
    container_concurrency_target_fraction: float = 0.7
    container_concurrency_target_default: float = 100.0
    target_utilization: float = 0.7
    rps_target_default: float = 200.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    target_burst_capacity: float = 211.0
    panic_window_percentage: float = 10.0
    activator_capacity: float = 100.0
    panic_threshold_percentage: float = 200.0
    stable_window_s: float = 60.0
    scale_to_zero_grace_period_s: float = 30.0
    scale_to_zero_pod_retention_period_s: float = 0.0
    scale_down_delay_s: float = 0.0
    allow_zero_initial_scale: bool = False
    initial_scale: int = 1
    min_scale: int = 0
    max_scale: int = 0
    progress_deadline_s: float = 600.0

    def __post_init__(self) -> None:
        if self.max_scale_up_rate <= 1 or self.max_scale_down_rate <= 1:
            raise ValueError("max_scale_up_rate and max_scale_down_rate must be > 1 (config.go validate)")
        if not 6 <= self.stable_window_s <= 3600:
            raise ValueError(f"stable_window_s must be in [6, 3600], got {self.stable_window_s}")
        if self.target_burst_capacity < 0 and self.target_burst_capacity != -1:
            raise ValueError(f"target_burst_capacity must be >= 0 or -1, got {self.target_burst_capacity}")
        if self.activator_capacity < 1:
            raise ValueError(f"activator_capacity must be >= 1, got {self.activator_capacity}")
        if self.scale_to_zero_grace_period_s <= 0:
            raise ValueError("scale_to_zero_grace_period_s must be > 0")


@dataclass(frozen=True)
class DeciderSpec:
    """``DeciderSpec`` (``scaling/multiscaler.go``). ``panic_threshold`` is a factor (2.0 = 200 %)."""

    target_value: float
    total_value: float
    target_burst_capacity: float = 211.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    activator_capacity: float = 100.0
    stable_window_s: float = 60.0
    scale_down_delay_s: float = 0.0
    reachable: bool = True
    activation_scale: int = 0
    scaling_metric: Literal["concurrency", "rps"] = "concurrency"
    initial_scale: int = 1

    def __post_init__(self) -> None:
        if self.target_value <= 0:
            raise ValueError(f"target_value must be > 0, got {self.target_value}")
        if self.max_scale_down_rate <= 0 or self.max_scale_up_rate <= 0:
            raise ValueError("scale rates must be > 0")


@dataclass(frozen=True)
class ScaleResult:
    """``ScaleResult``: what one decision produced; ``scale_valid`` False means "keep the last one"."""

    desired_pod_count: int
    excess_burst_capacity: int
    scale_valid: bool


INVALID = ScaleResult(0, 0, False)


def _int32(x: float) -> int:
    """Go's ``int32(float64)`` conversion: truncation toward zero."""
    return int(math.trunc(x))


class Decider:
    """The per-revision ``autoscaler`` of ``autoscaler.go``: panic state and scale-down delay.

    ``ready_pods_at_creation`` > 1 starts it in panic at ``created_s`` with ``max_panic_pods`` =
    that count, so a restarted decider without history does not scale down before a stable window
    (``newAutoscaler``). The delay window exists only if the spec at construction has a delay.
    """

    def __init__(self, spec: DeciderSpec, *, ready_pods_at_creation: int = 0, created_s: float = 0.0) -> None:
        self.spec = spec
        cur = max(0, int(ready_pods_at_creation))
        self.panic_time: float | None = created_s if cur > 1 else None
        self.max_panic_pods = cur
        self.delay_window = (
            MaxTimeWindow(spec.scale_down_delay_s, TICK_INTERVAL_S) if spec.scale_down_delay_s > 0 else None
        )

    def update(self, spec: DeciderSpec) -> None:
        """``Update``: replace the spec; the delay window stays as it was created."""
        self.spec = spec

    @property
    def in_panic(self) -> bool:
        return self.panic_time is not None

    def scale(
        self, now: float, ready_pods: int | None, observed_stable: float | None, observed_panic: float | None
    ) -> ScaleResult:
        """``Scale``: ``ready_pods`` None means the pod count could not be read (invalid),
        observed None means no data (``ErrNoData``, invalid)."""
        spec = self.spec
        if ready_pods is None or observed_stable is None or observed_panic is None:
            return INVALID
        original_ready = int(ready_pods)
        ready = max(1.0, float(original_ready))

        max_scale_up = math.ceil(spec.max_scale_up_rate * ready)
        max_scale_down = math.floor(ready / spec.max_scale_down_rate) if spec.reachable else 0.0

        dspc = math.ceil(observed_stable / spec.target_value)
        dppc = math.ceil(observed_panic / spec.target_value)

        stable_pods = _int32(min(max(dspc, max_scale_down), max_scale_up))
        panic_pods = _int32(min(max(dppc, max_scale_down), max_scale_up))

        if spec.activation_scale > 1:
            if dspc > 0 and spec.activation_scale > stable_pods:
                stable_pods = spec.activation_scale
            if dppc > 0 and spec.activation_scale > panic_pods:
                panic_pods = spec.activation_scale

        over = dppc / ready >= spec.panic_threshold
        if over:
            # Enter panic, or extend it: panic lasts a stable window past the last tick over.
            self.panic_time = now
        elif self.panic_time is not None and self.panic_time + spec.stable_window_s < now:
            self.panic_time = None
            self.max_panic_pods = 0

        desired = stable_pods
        if self.panic_time is not None:
            desired = max(desired, panic_pods)
            if desired > self.max_panic_pods:
                self.max_panic_pods = desired
            desired = self.max_panic_pods

        if spec.reachable and self.delay_window is not None:
            self.delay_window.record(now, desired)
            desired = self.delay_window.current()

        if spec.target_burst_capacity == 0:
            ebc = 0.0
        elif spec.target_burst_capacity > 0:
            ebc = math.floor(original_ready * spec.total_value - spec.target_burst_capacity - observed_panic)
        else:
            ebc = -1.0
        return ScaleResult(int(desired), _int32(ebc), True)


def panic_window_s(stable_window_s: float, panic_window_percentage: float) -> float:
    """``MakeMetric``: stable × pct / 100 rounded to a whole second (halves away from zero), at
    least one bucket."""
    x = stable_window_s * panic_window_percentage / 100.0
    rounded = math.floor(x + 0.5)
    return max(BUCKET_SIZE_S, float(rounded))


def population_mean_sample_size(population: int) -> int:
    """``populationMeanSampleSize`` (``metrics/sample_size.go``): pods the scraper samples."""
    if population < 0:
        return 0
    if population <= 3:
        return population
    x = 1.96 * 1.96 * 100.0 / (5.0 * 5.0)
    return int(math.ceil(population * x / (population + x - 1)))


class MetricCollector:
    """A revision's ``collection`` (``metrics/collector.go``): the stable and panic bucket sets for
    concurrency and rps. ``record`` adds a stat (already net of proxied requests) to the second it
    falls in; several stats in one second add up (scraper plus activator)."""

    def __init__(
        self,
        stable_window_s: float = 60.0,
        panic_window_percentage: float = 10.0,
        *,
        algorithm: Literal["linear", "weightedExponential"] = "linear",
    ) -> None:
        cls = WeightedFloat64Buckets if algorithm == "weightedExponential" else TimedFloat64Buckets
        pw = panic_window_s(stable_window_s, panic_window_percentage)
        self.stable_window_s = stable_window_s
        self.panic_window_s = pw
        self.concurrency = cls(stable_window_s, BUCKET_SIZE_S)
        self.concurrency_panic = cls(pw, BUCKET_SIZE_S)
        self.rps = cls(stable_window_s, BUCKET_SIZE_S)
        self.rps_panic = cls(pw, BUCKET_SIZE_S)

    def record(self, now: float, concurrency: float, rps: float) -> None:
        self.concurrency.record(now, concurrency)
        self.concurrency_panic.record(now, concurrency)
        self.rps.record(now, rps)
        self.rps_panic.record(now, rps)

    def stable_and_panic(
        self, now: float, metric: str = "concurrency", *, has_scrape_target: bool = True
    ) -> tuple[float, float] | None:
        """``StableAndPanicConcurrency``/``RPS``; None is ``ErrNoData`` (an empty stable window)."""
        if metric == "rps":
            stable, panic = self.rps, self.rps_panic
        else:
            stable, panic = self.concurrency, self.concurrency_panic
        if stable.is_empty(now) and has_scrape_target:
            return None
        return stable.window_average(now), panic.window_average(now)


def resolve_decider_spec(
    spec: FunctionSpec, config: AutoscalerConfig | None = None, *, reachable: bool = True
) -> DeciderSpec:
    """``MakeDecider`` + ``ResolveMetricTarget`` for a function spec (its Knative annotations).

    The spec's ``autoscaling.target`` is the ``autoscaling.knative.dev/target`` annotation; with
    containerConcurrency > 0 the total is min(target, CC); target = max(0.01, total × tu).
    """
    cfg = config or AutoscalerConfig()
    a = spec.autoscaling
    cc = spec.container_concurrency
    tu = a.target_utilization_percentage / 100.0
    total = float(a.target)
    if a.metric == "concurrency" and cc > 0:
        total = min(total, float(cc))
    target = max(0.01, total * tu)
    initial = a.initial_scale
    if initial == 0 and not cfg.allow_zero_initial_scale:
        initial = cfg.initial_scale
    return DeciderSpec(
        target_value=target,
        total_value=total,
        target_burst_capacity=cfg.target_burst_capacity,
        panic_threshold=a.panic_threshold_percentage / 100.0,
        max_scale_up_rate=cfg.max_scale_up_rate,
        max_scale_down_rate=cfg.max_scale_down_rate,
        activator_capacity=cfg.activator_capacity,
        stable_window_s=a.stable_window_s,
        scale_down_delay_s=a.scale_down_delay_s,
        reachable=reachable,
        activation_scale=0,
        scaling_metric="rps" if a.metric == "rps" else "concurrency",
        initial_scale=initial,
    )


def initial_excess_burst_capacity(spec: DeciderSpec) -> int:
    """The decider status before its first tick (``MultiScaler.Create``): truncates toward zero."""
    if spec.target_burst_capacity in (0.0, -1.0):
        return int(spec.target_burst_capacity)
    return _int32(spec.initial_scale * spec.total_value - spec.target_burst_capacity)


def compute_num_activators(ready_pods: int, spec: DeciderSpec) -> int:
    """``computeNumActivators``: how many activators the SKS puts in the path."""
    if spec.target_burst_capacity == 0:
        return MIN_ACTIVATORS
    cap = ready_pods * spec.total_value
    if spec.target_burst_capacity > 0:
        cap += spec.target_burst_capacity
    return int(max(MIN_ACTIVATORS, math.ceil(cap / spec.activator_capacity)))


PAState = Literal["activating", "active", "inactive"]
SKSMode = Literal["proxy", "serve"]


@dataclass
class PodAutoscaler:
    """The PA status the KPA reconciler keeps, and its decisions (``kpa.go``, ``scaler.go``).

    ``replicas`` is the Deployment's replica count as last applied. ``state_since`` is the last
    transition time of the Active condition; ``proxy_since`` when the SKS last entered Proxy mode.
    The activator probe is taken to succeed (the activator is always there).
    """

    min_scale: int = 0
    max_scale: int = 0
    initial_scale: int = 1
    stable_window_s: float = 60.0
    target_burst_capacity: float = 211.0
    reachable: bool = True
    config: AutoscalerConfig = field(default_factory=AutoscalerConfig)
    state: PAState = "activating"
    state_since: float = 0.0
    scale_target_initialized: bool = False
    sks_mode: SKSMode = "proxy"
    proxy_since: float | None = 0.0
    replicas: int = 1

    @classmethod
    def for_function(
        cls, spec: FunctionSpec, config: AutoscalerConfig | None = None, *, at_zero: bool, now: float = 0.0
    ) -> PodAutoscaler:
        """A PA for a function: ``at_zero`` gives the state of a revision that has been idle long
        enough to sit at zero (Inactive, SKS proxying, initialised, 0 replicas); otherwise a
        freshly created revision (Activating with initial-scale replicas)."""
        cfg = config or AutoscalerConfig()
        a = spec.autoscaling
        initial = a.initial_scale if (a.initial_scale > 0 or cfg.allow_zero_initial_scale) else cfg.initial_scale
        pa = cls(
            min_scale=a.min_scale,
            max_scale=a.max_scale,
            initial_scale=initial,
            stable_window_s=a.stable_window_s,
            target_burst_capacity=cfg.target_burst_capacity,
            config=cfg,
        )
        if at_zero:
            pa.state, pa.state_since = "inactive", now - 1e9
            pa.scale_target_initialized = True
            pa.proxy_since = now - 1e9
            pa.replicas = 0
        else:
            pa.state, pa.state_since = "activating", now
            pa.replicas = initial
        return pa

    def _mark(self, state: PAState, now: float) -> None:
        if state != self.state:
            self.state = state
            self.state_since = now

    def _bounds(self) -> tuple[int, int]:
        lo = self.min_scale if self.reachable else 0
        return lo, self.max_scale

    def _handle_scale_to_zero(self, now: float, desired: int) -> tuple[int, bool]:
        if desired != 0:
            return desired, True
        cfg = self.config
        if not cfg.enable_scale_to_zero:
            return 1, True
        if self.state == "activating":
            if now - self.state_since > cfg.progress_deadline_s + ACTIVATION_TIMEOUT_BUFFER_S:
                return desired, True
            return SCALE_UNKNOWN, False
        if self.state == "active":
            if now - self.state_since >= self.stable_window_s:
                return desired, False  # marks the PA inactive; nothing applied yet
            return 1, True
        retention = 0.0 if not self.reachable else cfg.scale_to_zero_pod_retention_period_s
        inactive_for = now - self.state_since
        if inactive_for >= max(cfg.scale_to_zero_grace_period_s, retention):
            return desired, True
        if retention > 0 and inactive_for < retention:
            return desired, False
        proxy_for = 0.0 if self.proxy_since is None or self.sks_mode != "proxy" else now - self.proxy_since
        if cfg.scale_to_zero_grace_period_s - proxy_for <= 0:
            return desired, True
        return desired, False

    def scale(self, now: float, desired: int) -> int:
        """``scaler.scale``: returns ``want`` and applies it to ``replicas`` when upstream would."""
        if desired < 0 and self.state != "activating":
            return desired
        lo, hi = self._bounds()
        if self.initial_scale > 1 and not self.scale_target_initialized and self.reachable:
            lo = max(self.initial_scale, lo)
        if desired < lo:
            desired = lo
        elif hi != 0 and desired > hi:
            desired = hi
        want, apply = self._handle_scale_to_zero(now, desired)
        if apply:
            self.replicas = want
        return want

    def _active_threshold(self) -> int:
        lo, _ = self._bounds()
        if not self.scale_target_initialized:
            return max(lo, self.initial_scale)
        return max(lo, 1)

    def reconcile(self, now: float, desired_scale: int, excess_burst_capacity: int, ready_pods: int) -> int:
        """One ``ReconcileKind`` pass: bounds and scale-to-zero gating, the SKS mode, the Active
        condition. Returns the Deployment replicas to run."""
        want = self.scale(now, desired_scale)
        if want == SCALE_UNKNOWN and self.state == "inactive":
            mode: SKSMode = "proxy"
        elif want > 0 and excess_burst_capacity >= 0:
            mode = "serve"
        else:
            mode = "proxy"
        if mode != self.sks_mode:
            self.sks_mode = mode
            self.proxy_since = now if mode == "proxy" else None
        min_ready = self._active_threshold()
        if ready_pods >= min_ready:
            self.scale_target_initialized = True
        if want == 0 or min_ready == 0:
            self._mark("inactive", now)
        elif ready_pods < min_ready:
            if want > 0 or self.state != "inactive":
                self._mark("activating", now)
            else:
                self._mark("inactive", now)
        elif want > 0 or self.state != "inactive":
            self._mark("active", now)
        return self.replicas


class RevisionAutoscaler:
    """Everything Knative runs for one revision's scaling, driven by a caller's clock: the
    collector, the decider on the 2 s tick (and on poke), and the PA reconciler.

    The caller records one stat per second (:meth:`record`), calls :meth:`poke` when the activator
    sees the first request of a revision, and :meth:`tick` every 2 s; both return the Deployment
    replicas to run. ``desired_scale`` is the decider status (−1 until the first valid decision).
    """

    def __init__(
        self,
        spec: FunctionSpec,
        config: AutoscalerConfig | None = None,
        *,
        now: float = 0.0,
        at_zero: bool = True,
        ready_pods: int = 0,
        steady_pods: int | None = None,
        algorithm: Literal["linear", "weightedExponential"] = "linear",
    ) -> None:
        """``at_zero``: an idle revision sitting at zero; ``at_zero=False``: a revision just created
        with ``ready_pods`` ready (the decider starts in panic if more than one);
        ``steady_pods=n``: a revision that has run at ``n`` pods for longer than a stable window
        (Active, initialised, last decision n, no panic), e.g. one kept up by min-scale."""
        self.config = config or AutoscalerConfig()
        self.decider_spec = resolve_decider_spec(spec, self.config)
        self.collector = MetricCollector(
            spec.autoscaling.stable_window_s, spec.autoscaling.panic_window_percentage, algorithm=algorithm
        )
        tbc = self.decider_spec.target_burst_capacity
        if steady_pods is not None and steady_pods > 0:
            self.decider = Decider(self.decider_spec, ready_pods_at_creation=0, created_s=now)
            self.pa = PodAutoscaler.for_function(spec, self.config, at_zero=True, now=now)
            self.pa.state = "active"
            self.pa.replicas = steady_pods
            self.desired_scale = steady_pods
            ebc = steady_pods * self.decider_spec.total_value - tbc
            self.excess_burst_capacity = int(tbc) if tbc in (0.0, -1.0) else _int32(math.floor(ebc))
            if self.excess_burst_capacity >= 0:
                self.pa.sks_mode, self.pa.proxy_since = "serve", None
        elif at_zero or steady_pods == 0:
            self.decider = Decider(self.decider_spec, ready_pods_at_creation=0, created_s=now)
            self.pa = PodAutoscaler.for_function(spec, self.config, at_zero=True, now=now)
            # An idle revision's last decision was 0 with no ready pods, so EBC = -TBC.
            self.desired_scale = 0
            self.excess_burst_capacity = int(tbc) if tbc in (0.0, -1.0) else _int32(math.floor(-tbc))
        else:
            self.decider = Decider(self.decider_spec, ready_pods_at_creation=ready_pods, created_s=now)
            self.pa = PodAutoscaler.for_function(spec, self.config, at_zero=False, now=now)
            if ready_pods > 0:
                self.pa.replicas = max(self.pa.replicas, ready_pods)
            self.desired_scale = SCALE_UNKNOWN
            self.excess_burst_capacity = initial_excess_burst_capacity(self.decider_spec)
        self.last_result: ScaleResult = INVALID

    @property
    def activator_in_path(self) -> bool:
        return self.pa.sks_mode == "proxy"

    def record(self, now: float, concurrency: float, rps: float) -> None:
        self.collector.record(now, concurrency, rps)

    def needs_poke(self) -> bool:
        """Whether a non-zero stat would trigger an immediate decision (``MultiScaler.Poke``)."""
        return self.desired_scale == 0

    def poke(self, now: float, ready_pods: int, concurrency: float = 1.0) -> int | None:
        """The activator's immediate stat for a revision it has just seen a request for: recorded,
        and a decision taken at once if the last desired scale is 0. Returns replicas, or None if
        no decision was triggered."""
        trigger = self.needs_poke() and concurrency != 0
        self.collector.record(now, concurrency, 0.0)
        if not trigger:
            return None
        return self.tick(now, ready_pods)

    def tick(self, now: float, ready_pods: int) -> int:
        """A decider tick followed by a reconcile; returns the Deployment replicas."""
        observed = self.collector.stable_and_panic(now, self.decider_spec.scaling_metric)
        if observed is None:
            result = INVALID
        else:
            result = self.decider.scale(now, ready_pods, observed[0], observed[1])
        self.last_result = result
        if result.scale_valid:
            self.desired_scale = result.desired_pod_count
            self.excess_burst_capacity = result.excess_burst_capacity
        return self.pa.reconcile(now, self.desired_scale, self.excess_burst_capacity, ready_pods)

