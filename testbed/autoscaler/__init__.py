"""The Knative Pod Autoscaler, ported from knative/serving: one implementation shared by the
simulator and the embedded lab (see :mod:`testbed.autoscaler.kpa`)."""

from testbed.autoscaler.buckets import MaxTimeWindow, TimedFloat64Buckets, WeightedFloat64Buckets
from testbed.autoscaler.kpa import (
    TICK_INTERVAL_S,
    AutoscalerConfig,
    Decider,
    DeciderSpec,
    MetricCollector,
    PodAutoscaler,
    RevisionAutoscaler,
    ScaleResult,
    resolve_decider_spec,
)

__all__ = [
    "TICK_INTERVAL_S",
    "AutoscalerConfig",
    "Decider",
    "DeciderSpec",
    "MaxTimeWindow",
    "MetricCollector",
    "PodAutoscaler",
    "RevisionAutoscaler",
    "ScaleResult",
    "TimedFloat64Buckets",
    "WeightedFloat64Buckets",
    "resolve_decider_spec",
]
