"""NodeResourcesBalancedAllocation:
``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go``
(``balancedResourceScorer``), args rule ``ValidateNodeResourcesBalancedAllocationArgs``.

Up to v1.35 the score is the balance with the pod placed, ``int64((1 - std) * 100)`` over the
fractions ``min(1, req/alloc)``; from v1.36 (kubernetes/kubernetes#135573) it is the change of the
node's balance, ``50 + (50 + S_with - S_without) / 2``. A pod requesting none of the resources is
skipped in PreScore.
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

#: the first release scoring the change of the balance
BALANCE_CHANGE_SINCE = (1, 36)


@dataclass(frozen=True)
class BalancedAllocationArgs:
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES


@dataclass(frozen=True)
class _State:
    rows: np.ndarray
    pod: np.ndarray
    skip: np.ndarray
    change: bool


class NodeResourcesBalancedAllocation(ScorePlugin):
    name: ClassVar[str] = "NodeResourcesBalancedAllocation"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go"
    args_type: ClassVar[type] = BalancedAllocationArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        if raw.get("resources") is None:
            return []
        return resources_errors(raw["resources"], f"{path}.resources", exactly_one=True)

    def decode_args(self, raw: Any, path: str) -> BalancedAllocationArgs:
        return BalancedAllocationArgs(decode_resources(raw.get("resources")))

    def encode_args(self, args: BalancedAllocationArgs) -> dict[str, Any] | None:
        if args == BalancedAllocationArgs():
            return None
        return {"resources": encode_resources(args.resources)}

    def pre_score(self, c: Cluster, t: Template, prepared: Any, args: BalancedAllocationArgs) -> _State | None:
        rows, pod, skip = pod_vector(c, t, [r for r, _ in args.resources], t.req)
        if not pod.any():  # a best-effort pod: PreScore returns Skip
            return None
        return _State(rows, pod, skip, c.kube_release >= BALANCE_CHANGE_SINCE)

    def score(self, c: Cluster, state: _State, idx: np.ndarray) -> np.ndarray:
        return kernels.balanced_scores(c.req_actual, c.alloc, state.rows, idx, state.pod, state.skip, state.change)
