"""Fixtures of the embedded-lab tests: every lab a test starts is torn down by a finaliser, even
when the test fails, and the test then checks that no process it recorded is left alive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from testbed.local import lab as labmod
from testbed.local.state import LabState

SMALL_CLUSTER = """\
name: test-lab
description: two tiny nodes, one fast with float-ops cached, one slow with nothing cached
groups:
  - {name: fast, count: 1, cpu: "1", memory: 2Gi, speed: 1.0, images: [ghcr.io/scoretune/fn-float-ops:0.1.0], image_pull_bandwidth: 400Mi}
  - {name: slow, count: 1, cpu: "1", memory: 2Gi, speed: 0.5, image_pull_bandwidth: 400Mi}
"""


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "test-lab.yaml"
    path.write_text(SMALL_CLUSTER)
    return path


@pytest.fixture
def state_dir(tmp_path: Path):
    """A private lab state directory; whatever was started in it is stopped afterwards."""
    root = tmp_path / "lab-state"
    state = LabState(root)
    yield root
    recorded = state.procs()
    labmod.down(root)
    leftovers = [r for r in recorded if r.alive()]
    assert not leftovers, f"processes left behind: {leftovers}"


@pytest.fixture
def small_workload():
    """Poisson arrivals alternating over ``functions``: ``small_workload(duration_s, rate, functions, seed)``."""
    from loadgen.workload import make_workload

    def make(duration_s: float = 10.0, rate: float = 4.0, functions=("float-ops", "dynamic-html"), seed: int = 1):
        rng = np.random.default_rng(seed)
        n = int(duration_s * rate)
        t = np.sort(rng.uniform(0.0, duration_s, n))
        return make_workload(t, [functions[i % len(functions)] for i in range(n)], metadata={"name": "test"})

    return make


@pytest.fixture
def cgroup_limiter():
    """A CgroupLimiter under a lab group of its own (skips where no cgroup is writable); the
    groups are removed after the test, and the test's own assertions can check that."""
    import os

    from testbed.local import cpu

    mode = cpu.detect()
    if mode.mode == "duty-cycle":
        pytest.skip(f"no writable cgroup here: {mode.reason}")
    group = f"scoretune-test-{os.getpid()}"
    root = cpu.CgroupLimiter.make_lab_group(mode, group)
    limiter = cpu.CgroupLimiter(mode, group)
    yield limiter
    limiter.close()
    cpu.remove_cgroup(root)
