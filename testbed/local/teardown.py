"""Tearing the embedded lab down: every process its state directory records (controller, node
agents, instances), any lab process of that directory no record names, and its cgroups.

Below the controllers and above the state: ``lab.down`` (a user's ``testbed down``, a failed
``up``) and a controller whose owner died (it tears its own lab down) both call :func:`down`.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

import psutil

from testbed.local import cpu
from testbed.local.state import LabState, ProcRecord, record_for, stop_process

log = logging.getLogger(__name__)

LAB_MODULES = {"testbed.local.controllers": "controller", "testbed.local.node_agent": "agent"}
"""The module each lab process runs (``python -m MODULE --state-dir DIR``), by role."""


ROLES_STOPPED = ("controller", "agent", "instance", "neighbour", "registry", "cgroups")


def stray_processes(state_root: Path) -> list[ProcRecord]:
    """Lab processes no record names any more: a controller or agent (``python -m
    testbed.local.controllers`` or ``testbed.local.node_agent --state-dir DIR``) of this state directory whose record was
    lost (an earlier lab there failed or was cleared), or of a state directory that no longer
    exists (its experiment's folder was deleted). Found by their command line."""
    root = state_root.resolve()
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        role = next((LAB_MODULES[a] for a in cmd if a in LAB_MODULES), None)
        if role is None or "--state-dir" not in cmd or p.info["pid"] == os.getpid():
            continue
        i = cmd.index("--state-dir")
        if i + 1 >= len(cmd):
            continue
        theirs = Path(cmd[i + 1])
        if (theirs.exists() and theirs.resolve() == root) or not theirs.exists():
            try:
                found.append(record_for(role, f"stray-{p.info['pid']}", p.info["pid"]))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return found


def down(state_dir: str | Path | None = None) -> dict[str, int]:
    """Stop every process the lab in ``state_dir`` started (controller, agents, instances, noisy
    neighbours, the registry), by pid, then any lab process of this state directory (or of one
    that no longer exists) that no record names; remove a container lab's containers, mounts and
    network; remove its cgroups, and forget its state. Returns how many of each were stopped.
    Several callers at once (agents of a lab whose controller died) take turns on a lock file."""
    state = LabState(state_dir)
    if not state.root.exists():
        return dict.fromkeys(ROLES_STOPPED, 0)
    with open(state.root / "down.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _down(state)


def _down(state: LabState) -> dict[str, int]:
    stopped: dict[str, int] = dict.fromkeys(ROLES_STOPPED, 0)
    lab = state.read_lab()
    for role in ("controller", "agent", "instance", "neighbour", "registry"):
        for rec in state.procs(role):
            if rec.pid == os.getpid():
                continue  # the controller tearing down its own lab (its owner died) exits by itself
            if stop_process(rec):
                stopped[role] += 1
            state.remove_proc(rec.role, rec.name)
    for rec in stray_processes(state.root):
        if stop_process(rec):
            log.warning("stopped a stray lab %s (pid %d) no record named", rec.role, rec.pid)
            stopped[rec.role] += 1
    if (lab or {}).get("containers") or (state.root / "containers").exists():
        from testbed.local.containers.teardown import remove

        for key, n in remove(state.root, lab).items():
            stopped[key] = n
    cpu_info = (lab or {}).get("cpu") or {}
    if cpu_info.get("base") and cpu_info.get("lab_group"):
        # a controller or agent tearing its own lab down runs in the harness group it removes
        cpu.leave(Path(cpu_info["base"]) / cpu_info["lab_group"])
    for path in sorted(state.cgroups(), key=lambda p: -len(Path(p).parts)):
        if Path(path).exists() and cpu.remove_cgroup(path, kill_tasks=True):
            stopped["cgroups"] += 1
    # instances whose records were not written yet (the agent died mid-spawn) die with their agent
    # (PDEATHSIG); cgroups they were in are gone above.
    state.clear()
    return stopped


__all__ = ["LAB_MODULES", "down", "stray_processes"]
