"""Builders of small specs and clusters for the simulator's tests."""

from __future__ import annotations

from typing import Any

from functions.spec import FunctionSpec, parse_spec
from testbed.cluster import ClusterSpec, parse_cluster


def make_spec(name: str = "fn", *, cc: int = 1, cpu_mean: float = 0.1, dist: str = "constant", cv: float = 0.0,
              cpu_limit: str = "1", memory_request: str = "64Mi", memory_limit: str = "128Mi",
              work_memory: str = "1Mi", io_s: float = 0.0, image_size: str = "100Mi", start_s: float = 0.5,
              init_s: float = 0.5, **autoscaling: Any) -> FunctionSpec:
    return parse_spec(
        {
            "name": name,
            "handler": "functions.float_ops.handler:handle",
            "image": {"name": f"registry.example/{name}:1", "size": image_size},
            "resources": {"requests": {"cpu": "250m", "memory": memory_request},
                          "limits": {"cpu": cpu_limit, "memory": memory_limit}},
            "container_concurrency": cc,
            "autoscaling": autoscaling,
            "cold_start": {"start_s": start_s, "init_s": init_s},
            "work": {"cpu_s": {"distribution": dist, "mean": cpu_mean, "cv": cv}, "memory": work_memory, "io_s": io_s},
        }
    )


def make_cluster(groups: list[dict[str, Any]], name: str = "test") -> ClusterSpec:
    return parse_cluster({"name": name, "groups": groups})
