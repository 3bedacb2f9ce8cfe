"""Unit tests of the lab's pure parts: state records, CPU quotas, the activator's routing."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict

import psutil
import pytest

from testbed.local import cpu
from testbed.local.routing import MAX_SLOTS, ConcurrencyMeter, Instance, Revision
from testbed.local.state import LabState, ProcRecord, record_for, stop_process


def test_proc_record_identity_survives_pid_reuse(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        rec = record_for("agent", "n0", p.pid)
        assert rec.alive()
        impostor = ProcRecord("agent", "n0", p.pid, rec.create_time - 100.0, os.getpid())
        assert not impostor.alive(), "a record with another start time must not match the live pid"
        state = LabState(tmp_path)
        state.add_proc(rec)
        assert state.procs("agent") == [rec]
        assert stop_process(rec)
        p.wait(5)
        assert not rec.alive()
        assert not stop_process(rec)
    finally:
        if p.poll() is None:
            p.kill()


def test_a_stepped_system_clock_does_not_make_a_live_process_look_dead(monkeypatch):
    """psutil's create_time is boot time by the wall clock plus the start after boot: a clock
    step (NTP, a resumed VM) moves it for every process, which once made a lab's agents and
    controller believe their owner had died and tear the lab down mid-run. The record is the
    start after boot, which no clock step moves."""
    rec = record_for("owner", "owner", os.getpid())
    real = psutil.Process.create_time
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real(self) + 5.0)  # the clock stepped 5 s
    assert rec.alive()
    assert not ProcRecord("owner", "owner", os.getpid(), rec.create_time + 1.0, os.getpid()).alive()


def test_state_clear_keeps_logs(tmp_path):
    state = LabState(tmp_path)
    state.ensure()
    state.write_lab({"x": 1})
    state.write_port("controller", 1234)
    state.log_path("controller").write_text("hello\n")
    assert state.read_port("controller") == 1234 and state.read_lab() == {"x": 1}
    state.clear()
    assert state.read_lab() is None and state.read_port("controller") is None
    assert state.log_path("controller").read_text() == "hello\n"


def test_quota_scales_with_relative_speed():
    assert cpu.quota_milli(1000, 1.0, 1.0) == 1000
    assert cpu.quota_milli(1000, 0.5, 1.0) == 500
    assert cpu.quota_milli(2000, 1.5, 3.0) == 1000
    assert cpu.quota_milli(1, 0.1, 1.0) == 10  # floor: the kernel refuses quotas below 1 ms


def test_detect_reports_a_mode_with_a_reason():
    mode = cpu.detect()
    assert mode.mode in ("cgroup-v2", "cgroup-v1", "duty-cycle")
    words = {"cgroup-v2": "cgroup v2", "cgroup-v1": "cgroup v1", "duty-cycle": "duty cycling"}
    assert mode.reason and words[mode.mode] in mode.notice
    forced = cpu.detect("duty-cycle")
    assert forced.mode == "duty-cycle" and "requested" in forced.reason
    with pytest.raises(ValueError, match="cpu enforcement"):
        cpu.detect("fast")


def _spinner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _cpu_share(proc: subprocess.Popen, wall_s: float) -> float:
    p = psutil.Process(proc.pid)
    t0 = sum(p.cpu_times()[:2])
    time.sleep(wall_s)
    return (sum(p.cpu_times()[:2]) - t0) / wall_s


def test_duty_cycle_limits_a_busy_process_to_its_quota():
    """A spinning process under a 200m budget uses about 0.2 cores, far from the 1 core its node
    would allow (one-sided bound: a busy machine only lowers the share; the bound leaves room for
    the limiter's polling overshoot when its thread is itself delayed on a loaded machine)."""
    limiter = cpu.DutyCycleLimiter()
    proc = _spinner()
    try:
        node = limiter.create("node", 1000)
        group = limiter.create("inst", 200, parent=node)
        limiter.add(group, proc.pid)
        time.sleep(0.3)
        share = _cpu_share(proc, 2.0)
        assert share < 0.5, share
    finally:
        limiter.close()
        proc.kill()
        proc.wait()


def test_duty_cycle_node_budget_is_shared_by_its_instances():
    """Two spinning instances with 1000m each on a 200m node share the node's 0.2 cores, far from
    the 2 cores their own budgets would allow (each can overshoot by a polling interval)."""
    limiter = cpu.DutyCycleLimiter()
    procs = [_spinner(), _spinner()]
    try:
        node = limiter.create("node", 200)
        for i, p in enumerate(procs):
            limiter.add(limiter.create(f"i{i}", 1000, parent=node), p.pid)
        time.sleep(0.3)
        ps = [psutil.Process(p.pid) for p in procs]
        t0 = sum(sum(p.cpu_times()[:2]) for p in ps)
        time.sleep(2.0)
        share = (sum(sum(p.cpu_times()[:2]) for p in ps) - t0) / 2.0
        assert share < 0.6, share
    finally:
        limiter.close()
        for p in procs:
            p.kill()
            p.wait()


def test_cgroup_quota_limits_a_busy_process(cgroup_limiter):
    limiter = cgroup_limiter
    proc = _spinner()
    try:
        node = limiter.create("node", 1000)
        inst = limiter.create("inst", 200, parent=node)
        limiter.add(inst, proc.pid)
        time.sleep(0.3)
        assert _cpu_share(proc, 2.0) < 0.2 * 1.3
    finally:
        proc.kill()
        proc.wait()
        limiter.close()
        cpu.remove_cgroup(limiter.root)
    assert not limiter.root.exists()


# --- routing ------------------------------------------------------------------------------


def _rev(cc: int, n: int) -> Revision:
    rev = Revision("f", cc, rng=random.Random(0))
    for i in range(n):
        rev.instances[f"i{i}"] = Instance(f"i{i}", "f", f"p{i}", rev.slots_per_instance, state="ready", seq=i)
    return rev


def test_slots_follow_container_concurrency():
    assert _rev(0, 1).slots_per_instance == MAX_SLOTS
    rev = _rev(2, 2)
    got = [rev.try_acquire() for _ in range(5)]
    assert [g.id if g else None for g in got] == ["i0", "i0", "i1", "i1", None]  # first available (CC <= 3)


def test_round_robin_above_three_and_random_of_two_at_zero():
    rev = _rev(10, 3)
    ids = [rev.try_acquire().id for _ in range(6)]
    assert sorted(ids) == ["i0", "i0", "i1", "i1", "i2", "i2"]
    rev0 = _rev(0, 2)
    for _ in range(100):
        rev0.try_acquire()
    actives = sorted(i.active for i in rev0.instances.values())
    assert actives[1] - actives[0] <= 1, "random choice of two keeps loads within one request"


def test_buffered_requests_are_served_first_come_first_served():
    async def scenario():
        rev = _rev(1, 0)
        futs = [rev.enqueue(float(i)) for i in range(3)]
        rev.dispatch()
        assert not any(f.done() for f in futs)
        inst = Instance("a", "f", "pa", 1, state="ready")
        rev.instances["a"] = inst
        rev.dispatch()
        assert futs[0].done() and not futs[1].done()
        rev.release(await futs[0])
        assert futs[1].done() and not futs[2].done()
        rev.fail_waiters(RuntimeError("reset"))
        with pytest.raises(RuntimeError):
            await futs[2]

    asyncio.run(scenario())


def test_draining_instance_takes_no_new_requests():
    rev = _rev(1, 1)
    rev.instances["i0"].state = "draining"
    assert rev.try_acquire() is None


def test_meter_is_time_weighted():
    m = ConcurrencyMeter(last_s=0.0, since_s=0.0)
    m.change(0.0, +1)
    m.change(0.5, +1)  # two in flight from 0.5 s
    m.change(0.75, -2)
    avg, arrivals = m.scrape(1.0)
    assert avg == pytest.approx((1 * 0.5 + 2 * 0.25) / 1.0)
    assert arrivals == 2
    avg2, arr2 = m.scrape(2.0)
    assert avg2 == 0.0 and arr2 == 0


def test_profile_crosses_processes_by_scheduler_name():
    from testbed.local.placement import profile_from_config_dict, profile_to_config_dict
    from testbed.scheduler.config import profile_from_weights, profile_weights

    prof = profile_from_weights({"ImageLocality": 77, "TaintToleration": None}, strategy="MostAllocated", scheduler_name="tuned")
    back = profile_from_config_dict(profile_to_config_dict(prof), "tuned")
    assert back.scheduler_name == "tuned"
    assert profile_weights(back) == profile_weights(prof)
    assert back.fit.strategy == "MostAllocated"


def test_a_lab_cgroup_still_holding_a_task_is_removed_by_killing_it(cgroup_limiter):
    """``down`` removes the lab's cgroups with ``kill_tasks``: a process left in one (an instance
    its dying agent never recorded) is killed, not left to keep an empty group forever (issue 43:
    ``scoretune-lab-*`` groups outlived the labs that made them)."""
    import subprocess

    limiter = cgroup_limiter
    root = limiter.root
    proc = subprocess.Popen(["sleep", "60"])
    try:
        node = limiter.create("node", 1000)
        limiter.add(node, proc.pid)
        assert cpu.remove_cgroup(root, timeout_s=0.2) is False and root.exists()  # held: not removable
        assert cpu.remove_cgroup(root, timeout_s=2.0, kill_tasks=True) is True
        assert not root.exists() and proc.wait(timeout=5) == -9
    finally:
        proc.kill()
        proc.wait()
        cpu.remove_cgroup(root, kill_tasks=True)


def test_a_lab_whose_bring_up_fails_with_a_testbed_error_leaves_no_cgroup(tmp_path, monkeypatch):
    """``up`` tears down whatever ``prepare`` made when the bring-up raises anything, not only the
    errors it rewraps (a TestbedError of the container bring-up left the lab's cgroup and state)."""
    from testbed.errors import TestbedError
    from testbed.local import lab as labmod
    from testbed.local.state import LabState

    if cpu.detect().mode == "duty-cycle":
        pytest.skip("no writable cgroup here")

    def broken(*args, **kwargs):
        raise TestbedError("the registry did not start")

    made = []
    real = cpu.CgroupLimiter.make_lab_group

    def recording(mode, name):
        made.append(real(mode, name))
        return made[-1]

    monkeypatch.setattr(labmod, "start_agents", broken)
    monkeypatch.setattr(cpu.CgroupLimiter, "make_lab_group", staticmethod(recording))
    root = tmp_path / "state"
    with pytest.raises(TestbedError, match="the registry did not start"):
        labmod.up("lab-small", state_dir=root, port=0)
    assert len(made) == 1 and not made[0].exists(), f"left behind: {made}"
    assert LabState(root).cgroups() == []


def _dead_record(role: str) -> ProcRecord:
    proc = subprocess.Popen(["sleep", "30"])
    rec = record_for(role, role, proc.pid)
    proc.kill()
    proc.wait()
    return rec


def test_agents_wait_for_a_controller_while_the_lab_is_still_coming_up(tmp_path):
    """Agents start before the controller; on the container runtime the nodes' start (pulling and
    unpacking images under their quota) took longer than the grace on a loaded machine, and agents
    counting it from their own start tore down a healthy lab before its controller ran. The process
    bringing the lab up vouches for it until a controller has been seen; after that only a
    controller does, and a lab nobody vouches for is gone after the grace."""
    from testbed.local.node_agent import CONTROLLER_GRACE_S, OrphanCheck

    state = LabState(tmp_path / "lab")
    state.root.mkdir(parents=True)
    state.write_lab({"owner": None, "starter": asdict(record_for("starter", "starter", os.getpid()))})
    check = OrphanCheck(state, 0.0)
    assert check(10 * CONTROLLER_GRACE_S) is None  # still coming up: no verdict however long it takes

    controller = subprocess.Popen(["sleep", "30"])
    try:
        state.add_proc(record_for("controller", "controller", controller.pid))
        assert check(11 * CONTROLLER_GRACE_S) is None
    finally:
        controller.kill()
        controller.wait()
    # the controller has run and died: the starter, still alive, no longer vouches
    assert check(11 * CONTROLLER_GRACE_S + 1.0) is None
    assert check(12 * CONTROLLER_GRACE_S + 0.5) == "the lab's controller is gone"

    # the process bringing the lab up died before any controller ran: gone after the grace
    state.remove_proc("controller", "controller")
    state.write_lab({"owner": None, "starter": asdict(_dead_record("starter"))})
    check = OrphanCheck(state, 0.0)
    assert check(CONTROLLER_GRACE_S - 1.0) is None
    assert check(CONTROLLER_GRACE_S) == "the lab's controller is gone"


def test_the_controller_gives_up_an_idle_connection_before_the_instance_server_does():
    """uvicorn closed idle keep-alive connections after 5 s, the controller's client kept them 15
    s: a request sent on a connection the server was closing failed as a 502 and marked a warm
    instance gone (one such error in an A/A run of 30 requests moved its mean by 85 %, counted at
    the timeout). The client must close first (planted: the old 15 s against 5 s fails here)."""
    from functions.runtime import KEEP_ALIVE_S
    from testbed.local.controllers.base import FORWARD_KEEPALIVE_S

    assert FORWARD_KEEPALIVE_S < KEEP_ALIVE_S


def test_a_pod_whose_limit_is_worth_more_than_its_node_still_starts(cgroup_limiter):
    """A node of 262m whose pod's limit is worth 437m at the node's core speed (lab-hidden-
    neighbour scaled to this host): the pod's quota is capped at the node's, so its group is
    made; cgroup v1 refuses a child quota above its parent's (EINVAL), which made runc fail every
    pod there. Planted: the uncapped quota (437m) fails here with OSError on cgroup v1."""
    limiter = cgroup_limiter
    try:
        node = limiter.create("node", 262)
        quota = cpu.pod_quota_milli(1000, 0.4375, 262)
        limiter.create("pod", quota, parent=node)
        assert quota == 262
        assert cpu.pod_quota_milli(1000, 0.4375, 2000) == 438
        assert cpu.pod_quota_milli(4000, 1.0, 8000, one_process=True) == 1000
        assert cpu.pod_quota_milli(1, 0.5, 262) == 10
    finally:
        limiter.close()
        cpu.remove_cgroup(limiter.root)
    assert not limiter.root.exists()
