"""NodeResourcesFit's score: ``pkg/scheduler/framework/plugins/noderesources/fit.go`` with the
strategies of ``least_allocated.go``, ``most_allocated.go`` and ``requested_to_capacity_ratio.go``
(shape: ``helper/shape_score.go``), args rules ``ValidateNodeResourcesFitArgs``
(``apis/config/validation/validation_pluginargs.go``).

Its Filter (``fitsRequest``, with ``ignoredResources`` / ``ignoredResourceGroups``) is the
framework's, which reads these args.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from testbed.scheduler import kernels
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.plugins.noderesources import (
    DEFAULT_RESOURCES,
    decode_resources,
    encode_resources,
    pod_vector,
    resources_errors,
)
from testbed.scheduler.validation import invalid, is_int, label_name_errors, required, show, type_error

STRATEGIES: tuple[str, ...] = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")

#: ``MaxNodeScore / MaxCustomPriorityScore``: shape scores are configured in 0..10
SHAPE_SCALE = 100 // 10


@dataclass(frozen=True)
class FitArgs:
    """``NodeResourcesFitArgs``: the scoring strategy, its per-resource weights and the RTCR shape
    (points ``(utilization 0..100, score 0..10)``)."""

    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = ()
    ignored_resources: tuple[str, ...] = ()
    ignored_resource_groups: tuple[str, ...] = ()


def shape_errors(shape: Any, path: str) -> list[str]:
    """``validateFunctionShape``: at least one point, utilization strictly increasing and in
    [0, 100], score in [0, 10]."""
    if not isinstance(shape, list) or not shape:
        return [required(path, "at least one point must be specified")]
    errs = []
    for i, pt in enumerate(shape):
        if not isinstance(pt, dict) or not is_int(pt.get("utilization", 0)) or not is_int(pt.get("score", 0)):
            return [invalid(f"{path}[{i}]", pt, "a point needs integer utilization and score")]
    for i in range(1, len(shape)):
        if shape[i - 1].get("utilization", 0) >= shape[i].get("utilization", 0):
            errs.append(invalid(f"{path}[{i}].utilization", shape[i].get("utilization", 0), "values must be sorted in increasing order"))
            break
    for i, pt in enumerate(shape):
        u, s = pt.get("utilization", 0), pt.get("score", 0)
        if not 0 <= u <= 100:
            errs.append(invalid(f"{path}[{i}].utilization", u, "not in valid range [0, 100]"))
        if not 0 <= s <= 10:
            errs.append(invalid(f"{path}[{i}].score", s, "not in valid range [0, 10]"))
    return errs


@dataclass(frozen=True)
class _State:
    rows: np.ndarray
    pod: np.ndarray
    skip: np.ndarray
    weights: np.ndarray
    most: bool
    #: RequestedToCapacityRatio's score at each utilization 0..100 (empty for the other strategies)
    table: np.ndarray


class NodeResourcesFit(ScorePlugin):
    name: ClassVar[str] = "NodeResourcesFit"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/noderesources/fit.go"
    args_type: ClassVar[type] = FitArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        errs: list[str] = []
        ign = raw.get("ignoredResources")
        if ign is not None and not isinstance(ign, list):
            errs.append(type_error(f"{path}.ignoredResources", ign, "a list of resource names"))
        for i, res in enumerate(ign if isinstance(ign, list) else []):
            errs.extend(label_name_errors(f"{path}.ignoredResources[{i}]", res))
        groups = raw.get("ignoredResourceGroups")
        if groups is not None and not isinstance(groups, list):
            errs.append(type_error(f"{path}.ignoredResourceGroups", groups, "a list of resource group names"))
        for i, g in enumerate(groups if isinstance(groups, list) else []):
            gp = f"{path}.ignoredResourceGroups[{i}]"
            if isinstance(g, str) and "/" in g:
                errs.append(invalid(gp, g, "resource group name can't contain '/'"))
            else:
                errs.extend(label_name_errors(gp, g))
        st = raw.get("scoringStrategy")
        if st is None:
            return errs
        sp = f"{path}.scoringStrategy"
        if not isinstance(st, dict):
            return [invalid(sp, st, "must be a mapping")]
        if st.get("type") not in STRATEGIES:
            errs.append(f"{sp}.type: Unsupported value: {show(st.get('type'))}: supported values: " + ", ".join(f'"{s}"' for s in STRATEGIES))
        if st.get("resources") is not None:
            errs.extend(resources_errors(st["resources"], f"{sp}.resources"))
        rtcr = st.get("requestedToCapacityRatio")
        rp = f"{sp}.requestedToCapacityRatio"
        if rtcr is not None and not isinstance(rtcr, dict):
            errs.append(type_error(rp, rtcr, "a mapping with a shape"))
        elif st.get("type") == "RequestedToCapacityRatio":
            if rtcr is None:
                errs.append(required(rp, "must be specified when type is RequestedToCapacityRatio"))
            else:
                errs.extend(shape_errors(rtcr.get("shape"), f"{rp}.shape"))
        elif rtcr is not None:
            errs.append(f"{rp}: Forbidden: must be nil when type is not RequestedToCapacityRatio")
        return errs

    def decode_args(self, raw: Any, path: str) -> FitArgs:
        st = raw.get("scoringStrategy")
        strategy, resources, shape = FitArgs.strategy, DEFAULT_RESOURCES, ()
        if st is not None:
            strategy, resources = st.get("type"), decode_resources(st.get("resources"))
            if strategy == "RequestedToCapacityRatio":
                points = (st.get("requestedToCapacityRatio") or {}).get("shape") or []
                shape = tuple((int(p.get("utilization", 0)), int(p.get("score", 0))) for p in points)
        return FitArgs(
            strategy=strategy,
            resources=resources,
            shape=shape,
            ignored_resources=tuple(raw.get("ignoredResources") or ()),
            ignored_resource_groups=tuple(raw.get("ignoredResourceGroups") or ()),
        )

    def encode_args(self, args: FitArgs) -> dict[str, Any]:
        st: dict[str, Any] = {"type": args.strategy, "resources": encode_resources(args.resources)}
        if args.strategy == "RequestedToCapacityRatio":
            st["requestedToCapacityRatio"] = {"shape": [{"utilization": u, "score": s} for u, s in args.shape]}
        out: dict[str, Any] = {"scoringStrategy": st}
        if args.ignored_resources:
            out["ignoredResources"] = list(args.ignored_resources)
        if args.ignored_resource_groups:
            out["ignoredResourceGroups"] = list(args.ignored_resource_groups)
        return out

    def pre_score(self, c: Cluster, t: Template, prepared: Any, args: FitArgs) -> _State:
        # cpu/memory enter with their non-zero defaults (fit.go, NonZeroRequested), the rest as requested
        rows, pod, skip = pod_vector(c, t, [r for r, _ in args.resources], t.nonzero)
        table = np.zeros(0, dtype=np.int64)
        if args.strategy == "RequestedToCapacityRatio":
            u = np.array([u for u, _ in args.shape], dtype=np.int64)
            table = kernels.shape_table(u, np.array([s * SHAPE_SCALE for _, s in args.shape], dtype=np.int64))
        return _State(rows, pod, skip, np.array([w for _, w in args.resources], dtype=np.int64), args.strategy == "MostAllocated", table)

    def score(self, c: Cluster, state: _State, idx: np.ndarray) -> np.ndarray:
        return kernels.fit_scores(c.req_nonzero, c.alloc, state.rows, idx, state.pod, state.skip, state.weights, state.most, state.table)
