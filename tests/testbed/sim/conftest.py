"""Fixtures of the simulator's tests (builders live in sim_fixtures.py)."""

from __future__ import annotations

import pytest
from sim_fixtures import make_cluster, make_spec

from functions.spec import FunctionSpec
from testbed.cluster import ClusterSpec


@pytest.fixture(scope="session")
def small_cluster() -> ClusterSpec:
    return make_cluster(
        [
            {"name": "fast", "count": 2, "cpu": "2", "memory": "4Gi", "speed": 1.5},
            {"name": "slow", "count": 2, "cpu": "2", "memory": "1Gi", "speed": 0.5,
             "images": ["registry.example/a:1"]},
        ]
    )


@pytest.fixture(scope="session")
def small_specs() -> dict[str, FunctionSpec]:
    return {
        "a": make_spec("a", cc=1, cpu_mean=0.2, dist="exponential", cv=1.0),
        "b": make_spec("b", cc=4, cpu_mean=0.3, dist="lognormal", cv=0.5, work_memory="60Mi", memory_request="128Mi",
                       memory_limit="512Mi", io_s=0.05),
        "c": make_spec("c", cc=0, cpu_mean=0.02, target=10),
    }
