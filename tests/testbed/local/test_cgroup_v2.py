"""The lab's cgroup v2 path, on a fake cgroup2 tree: this project's machines have the hybrid v1
layout, so the code that writes ``cpu.max``, ``memory.max`` and ``cgroup.subtree_control`` (and
reads ``memory.events`` and ``memory.current``) never runs here on a real kernel. These tests hold
it to the v2 interface's file names and formats (Documentation/admin-guide/cgroup-v2.rst: ``cpu.max``
is "$MAX $PERIOD", controllers are enabled for children by "+cpu" in the parent's
``cgroup.subtree_control``, ``memory.events`` has an ``oom_kill N`` line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.local import cpu
from testbed.local.containers import runtime


@pytest.fixture
def unified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cgroup2 mount at ``tmp_path/unified`` whose root delegates cpu and memory, with this
    process in ``/user.slice`` (as /proc/self/cgroup would say: ``0::/user.slice``)."""
    mount = tmp_path / "unified"
    own = mount / "user.slice"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    monkeypatch.setattr(cpu, "mounts", lambda: [(str(mount), "cgroup2", {"rw", "nosuid"})])
    monkeypatch.setattr(cpu, "_own_cgroup_paths", lambda: {"": "/user.slice"})
    return mount


def test_v2_is_chosen_where_the_cpu_controller_is_delegated(unified: Path) -> None:
    mode = cpu.detect()
    assert (mode.mode, mode.base) == ("cgroup-v2", str(unified / "user.slice"))
    assert "cpu.max" in mode.notice
    (unified / "user.slice" / "cgroup.controllers").write_text("memory pids\n")
    fallback = cpu.detect()  # no cpu controller for us: nothing to set a quota with
    assert fallback.mode == "duty-cycle" and "no cpu controller delegated" in fallback.reason


def test_v2_quotas_are_cpu_max_with_cpu_enabled_for_the_children(unified: Path) -> None:
    mode = cpu.detect()
    lab = cpu.CgroupLimiter.make_lab_group(mode, "scoretune-lab-test")
    assert (lab / "cgroup.subtree_control").read_text() == "+cpu\n"
    limiter = cpu.CgroupLimiter(mode, "scoretune-lab-test")
    node = limiter.create("node-0", 1500)
    pod = limiter.create("pod-1", 250, parent=node)
    assert (lab / "node-0" / "cpu.max").read_text() == "150000 100000\n"  # 1.5 cores
    assert (lab / "node-0" / "cgroup.subtree_control").read_text() == "+cpu\n"  # its pods get quotas too
    assert (lab / "node-0" / "pod-1" / "cpu.max").read_text() == "25000 100000\n"
    assert not (lab / "node-0" / "pod-1" / "cgroup.subtree_control").exists()
    assert not list(lab.rglob("cpu.cfs_*"))  # no v1 file in a v2 tree
    assert pod == "node-0/pod-1"


def test_v2_memory_lives_in_the_same_directory_and_its_counters_are_read(unified: Path) -> None:
    mode = cpu.CpuMode("cgroup-v2", str(unified / "user.slice"), "test")
    group = unified / "user.slice" / "scoretune-lab-test" / "node-0"
    group.mkdir(parents=True)
    rel = runtime.cgroup_relpath(mode, group)
    assert rel == "/user.slice/scoretune-lab-test/node-0"  # runc's cgroupsPath, from the mount's root
    assert runtime.memory_group(mode, rel) == group  # one hierarchy: memory beside cpu
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 3\noom_kill 2\noom_group_kill 0\n")
    (group / "memory.current").write_text("123456789\n")
    assert runtime.oom_kills(group) == 2
    assert runtime.memory_usage(group) == 123456789
