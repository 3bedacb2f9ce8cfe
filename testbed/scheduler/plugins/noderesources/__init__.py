"""``pkg/scheduler/framework/plugins/noderesources``: NodeResourcesFit (:mod:`.fit`) and
NodeResourcesBalancedAllocation (:mod:`.balanced_allocation`), and what they share: the
``resources`` list of their args and the per-resource view of a pod (``resource_allocation.go``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from testbed.scheduler.objects import is_scalar_resource
from testbed.scheduler.plugins.base import Cluster, Template
from testbed.scheduler.validation import invalid, is_int, required

#: ``defaults.go``: cpu and memory, weight 1 each
DEFAULT_RESOURCES: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))


def resources_errors(resources: Any, path: str, *, exactly_one: bool = False) -> list[str]:
    """``validateResources`` (fit: weights in (0, 100]) and, with ``exactly_one``,
    ``ValidateNodeResourcesBalancedAllocationArgs`` (weight 1, no repeated name)."""
    if not isinstance(resources, list):
        return [invalid(path, resources, "must be a list of {name, weight}")]
    errs = []
    seen: set[str] = set()
    for i, r in enumerate(resources):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r.get("name"):
            errs.append(required(f"{path}[{i}].name", "a resource needs a name"))
            continue
        w = r.get("weight", 0)
        w = 1 if w in (0, None) else w  # v1 defaulting: a weight of 0 becomes 1 before validation
        if exactly_one:
            if r["name"] in seen:
                errs.append(f"{path}[{i}].name: Duplicate value: {json.dumps(r['name'])}")
            if w != 1:
                errs.append(invalid(f"{path}[{i}].weight", w, "must be 1"))
        elif not is_int(w) or w <= 0 or w > 100:
            errs.append(invalid(f"{path}[{i}].weight", w, f"resource weight of {r['name']} not in valid range (0, 100]"))
        seen.add(r["name"])
    return errs


def decode_resources(raw: Any) -> tuple[tuple[str, int], ...]:
    """A validated ``resources`` list (an unset or 0 weight is 1); the defaults when empty."""
    return tuple((r["name"], int(r.get("weight") or 1)) for r in raw or []) or DEFAULT_RESOURCES


def encode_resources(resources: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"name": n, "weight": w} for n, w in resources]


def pod_vector(c: Cluster, t: Template, names: Sequence[str], values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(framework row of each configured resource or -1, the pod's request of it from ``values``
    (the template's actual or non-zero row vector; the pod's own request for a resource no node
    has), and whether the resource is skipped: absent from every node, or a scalar resource the
    pod does not request (``resource_allocation.go``, ``score``))."""
    rows = np.array([c.res_index.get(r, -1) for r in names], dtype=np.int64)
    pod = np.array([int(values[row]) if row >= 0 else int(t.pod.requests.get(r, 0)) for r, row in zip(names, rows, strict=True)], dtype=np.int64)
    skip = np.array([row < 0 or (is_scalar_resource(r) and v == 0) for r, row, v in zip(names, rows, pod, strict=True)], dtype=bool)
    return rows, pod, skip
