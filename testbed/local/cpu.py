"""Enforcing node CPU capacity and speed on one machine: cgroup quotas, or a duty-cycle limiter.

A lab node is a set of processes on this machine, so its capacity is a CPU *bandwidth* limit on
those processes. Three ways, chosen once per lab by :func:`detect`:

- ``cgroup-v2``: a ``cpu.max`` quota per node (and per instance) under a lab cgroup, when the
  unified hierarchy has the cpu controller and we may create children;
- ``cgroup-v1``: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` in the v1 cpu hierarchy, likewise;
- ``duty-cycle``: no writable cgroup, so each node agent meters its own instances' CPU time with
  psutil and stops them (SIGSTOP) for the rest of a 100 ms period once the node's (or the
  instance's) budget for that period is spent, resuming them (SIGCONT) when the next period starts
  -- the CFS bandwidth controller's algorithm (kernel/sched/fair.c, ``tg_throttle``) done in user
  space, with a coarser period.

Speed factor. A real core cannot be made faster, so speed is emulated as CPU-*bandwidth* scaling:
the fastest node of the cluster runs at the machine's speed, and a node of speed ``s`` gets
``s / s_max`` of the bandwidth a node of the same size would get. Every process on it therefore
runs its work ``s_max / s`` times slower. Concretely, ``quota(node) = cpu_milli * s / s_max`` and
``quota(instance) = min(cpu_limit_milli, 1000) * s / s_max`` (an instance is one Python process,
so it cannot use more than one core anyway). This is honest about what it is: relative speed
between nodes is exact up to the kernel's bandwidth accounting; absolute speed is this machine's.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import psutil

log = logging.getLogger(__name__)

Mode = Literal["cgroup-v2", "cgroup-v1", "duty-cycle"]
MODES: tuple[str, ...] = ("auto", "cgroup-v2", "cgroup-v1", "duty-cycle")
PERIOD_US = 100_000
HARNESS_GROUP = "harness"
"""The lab's own processes (controller, agents, registry, the load generator) run in this child of
the lab group, a sibling of the nodes: with autogroup on, niceness does not order processes of
different sessions, so the harness gets its CPU from a group weight (:func:`weight_for`) instead."""


def weight_for(milli: int, v2: bool) -> int:
    """The CPU weight of a group entitled to ``milli`` millicores: ``cpu.shares`` (v1, 1024 a core)
    or ``cpu.weight`` (v2, 100 a core), so that under contention siblings split the CPU in
    proportion to their quotas (a node of 1.5 cores gets three times a node of 0.5), as the CFS
    shares of kubelet's QoS groups do (``MilliCPUToShares`` in pkg/kubelet/cm/helpers_linux.go)."""
    if v2:
        return max(1, min(10_000, int(round(milli * 100 / 1000))))
    return max(2, min(262_144, int(round(milli * 1024 / 1000))))


@dataclass(frozen=True)
class CpuMode:
    """The enforcement chosen for a lab, with the base cgroup directory (cgroup modes) and why."""

    mode: Mode
    base: str | None
    reason: str

    @property
    def notice(self) -> str:
        what = {
            "cgroup-v2": "cgroup v2 cpu.max quota per node",
            "cgroup-v1": "cgroup v1 CFS quota per node",
            "duty-cycle": "the node agents' own CPU-share limit (SIGSTOP/SIGCONT duty cycling, 100 ms period)",
        }[self.mode]
        return f"node CPU capacity is enforced with {what} ({self.reason})"


def mounts() -> list[tuple[str, str, set[str]]]:
    out = []
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[1], parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return out


def _own_cgroup_paths() -> dict[str, str]:
    """controller -> our cgroup path from /proc/self/cgroup ('' key for the v2 unified entry)."""
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _probe_mkdir(base: Path) -> str | None:
    """Create and remove a child cgroup; None on success, else why not."""
    probe = base / f"scoretune-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return None
    except OSError as err:
        return f"{base} is not writable: {err.strerror}"


def _v2_base() -> tuple[Path | None, str]:
    own = _own_cgroup_paths().get("", "/")
    for mnt, fstype, _ in mounts():
        if fstype != "cgroup2":
            continue
        base = Path(mnt) / own.lstrip("/")
        try:
            ctrls = (base / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "cpu" not in ctrls:
            return None, f"cgroup v2 at {mnt} has no cpu controller delegated"
        why = _probe_mkdir(base)
        if why:
            return None, why
        return base, f"cgroup v2 at {base}"
    return None, "no cgroup v2 mount"


def _v1_base() -> tuple[Path | None, str]:
    own = _own_cgroup_paths()
    for mnt, fstype, opts in mounts():
        if fstype != "cgroup" or "cpu" not in opts:
            continue
        base = Path(mnt) / own.get("cpu", "/").lstrip("/")
        if not (base / "cpu.cfs_quota_us").exists():
            return None, f"cgroup v1 cpu hierarchy at {mnt} has no CFS quota"
        why = _probe_mkdir(base)
        if why:
            return None, why
        return base, f"cgroup v1 cpu hierarchy at {base}"
    return None, "no cgroup v1 cpu hierarchy"


def detect(requested: str = "auto") -> CpuMode:
    """Pick the enforcement: the requested one if it works, else v2, v1, duty-cycle in that order."""
    if requested not in MODES:
        raise ValueError(f"cpu enforcement must be one of {MODES}, got {requested!r}")
    reasons = []
    if requested in ("auto", "cgroup-v2"):
        base, why = _v2_base()
        if base is not None:
            return CpuMode("cgroup-v2", str(base), why)
        reasons.append(why)
    if requested in ("auto", "cgroup-v1"):
        base, why = _v1_base()
        if base is not None:
            return CpuMode("cgroup-v1", str(base), why)
        reasons.append(why)
    if requested == "duty-cycle":
        reasons.append("requested")
    return CpuMode("duty-cycle", None, "; ".join(reasons))


def quota_milli(cpu_milli: int, speed: float, max_speed: float) -> int:
    """Real CPU bandwidth (millicores) for ``cpu_milli`` of capacity at relative speed ``speed``."""
    return max(10, int(round(cpu_milli * speed / max_speed)))


def pod_quota_milli(limit_milli: int, core_speed: float, node_milli: int, *, one_process: bool = False) -> int:
    """A pod's CPU quota (millicores): its CPU limit at the node's core speed, never above its
    node's own quota. A pod cannot use more than its node anyway, and cgroup v1 refuses a child
    ``cpu.cfs_quota_us`` above its parent's (EINVAL, so runc could not start the pod at all: a
    node of 262m whose pods' limits are worth 437m failed every run). ``one_process``: the
    process lab's instance is one Python process, which never uses more than one core."""
    limit = min(limit_milli, 1000) if one_process else limit_milli
    return max(10, min(int(round(limit * core_speed)), node_milli))


class Limiter(Protocol):
    """A node's CPU limiter: one group per node, one subgroup per instance."""

    def create(self, name: str, quota_milli: int, parent: str | None = None) -> str: ...

    def add(self, group: str, pid: int) -> None: ...

    def remove(self, group: str) -> None: ...

    def close(self) -> None: ...


class CgroupLimiter:
    """Quota groups in cgroup v1 (cfs_quota_us/cfs_period_us) or v2 (cpu.max)."""

    def __init__(self, mode: CpuMode, lab_group: str, on_create=None) -> None:
        if mode.base is None:
            raise ValueError("cgroup limiter needs a base cgroup")
        self.v2 = mode.mode == "cgroup-v2"
        self.root = Path(mode.base) / lab_group
        self.created: list[Path] = []
        self._on_create = on_create

    def _path(self, group: str) -> Path:
        return self.root / group

    @staticmethod
    def make_lab_group(mode: CpuMode, lab_group: str) -> Path:
        """The lab's own parent group (created by ``testbed up``); v2 also enables cpu for children."""
        assert mode.base is not None
        path = Path(mode.base) / lab_group
        path.mkdir(exist_ok=True)
        if mode.mode == "cgroup-v2":
            (path / "cgroup.subtree_control").write_text("+cpu\n")
        return path

    @staticmethod
    def make_harness_group(mode: CpuMode, lab_group: str, reserve_milli: int) -> Path:
        """The harness's group inside the lab's (no quota: a weight worth ``reserve_milli``)."""
        assert mode.base is not None
        path = Path(mode.base) / lab_group / HARNESS_GROUP
        path.mkdir(exist_ok=True)
        v2 = mode.mode == "cgroup-v2"
        (path / ("cpu.weight" if v2 else "cpu.shares")).write_text(f"{weight_for(reserve_milli, v2)}\n")
        return path

    def create(self, name: str, quota_milli: int, parent: str | None = None) -> str:
        group = f"{parent}/{name}" if parent else name
        path = self._path(group)
        path.mkdir(parents=False, exist_ok=True)
        if self._on_create:
            self._on_create(str(path))
        self.created.append(path)
        quota_us = max(1000, quota_milli * PERIOD_US // 1000)
        if self.v2:
            (path / "cpu.max").write_text(f"{quota_us} {PERIOD_US}\n")
            (path / "cpu.weight").write_text(f"{weight_for(quota_milli, True)}\n")
            if parent is None:
                (path / "cgroup.subtree_control").write_text("+cpu\n")
        else:
            (path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
            (path / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
            (path / "cpu.shares").write_text(f"{weight_for(quota_milli, False)}\n")
        return group

    def add(self, group: str, pid: int) -> None:
        try:
            (self._path(group) / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as err:
            if err.errno != 3:  # ESRCH: already gone
                raise

    def remove(self, group: str) -> None:
        path = self._path(group)
        remove_cgroup(path)
        if path in self.created:
            self.created.remove(path)

    def close(self) -> None:
        for path in reversed(list(self.created)):
            remove_cgroup(path)
        self.created.clear()


def remove_cgroup(path: str | Path, *, timeout_s: float = 3.0, kill_tasks: bool = False) -> bool:
    """Remove a cgroup directory, deepest children first; waits for exiting tasks to leave.
    ``kill_tasks``: the group is the lab's own, so any task still in it when the wait runs out
    (an instance whose agent died before recording it, a process that ignored its stop) is a
    process of the lab: SIGKILL it and wait once more, rather than leave the group behind."""
    path = Path(path)
    if not path.exists():
        return True
    for child in sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: -len(p.parts)):
        remove_cgroup(child, timeout_s=timeout_s, kill_tasks=kill_tasks)
    deadline = time.monotonic() + timeout_s
    killed = False
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as err:
            if time.monotonic() > deadline:
                if kill_tasks and not killed:
                    killed = True
                    n = _kill_tasks(path)
                    log.warning("cgroup %s still held %d task(s): killed them", path, n)
                    deadline = time.monotonic() + timeout_s
                    continue
                log.warning("cannot remove cgroup %s: %s", path, err.strerror)
                return False
            time.sleep(0.05)


def enter(path: str | Path) -> None:
    """Move the calling process into the cgroup ``path`` (a ``preexec_fn`` for the harness's
    children: they start inside it, so nothing they fork runs outside it)."""
    Path(path, "cgroup.procs").write_text(f"{os.getpid()}\n")


def entering(group: str | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that starts a child inside ``group`` (None: nothing to do); the harness's
    children use it, since niceness orders nothing across autogroup sessions."""
    if group is None:
        return None
    return lambda: enter(group)


def leave(tree: str | Path) -> None:
    """Move the calling process out of ``tree`` (to the group above it) if it is inside: a lab
    process tearing its own lab down must not hold, or be killed with, the group it removes."""
    tree = Path(tree)
    for mnt, fstype, opts in mounts():
        if fstype not in ("cgroup", "cgroup2") or (fstype == "cgroup" and "cpu" not in opts):
            continue
        try:
            rel = tree.relative_to(mnt)
        except ValueError:
            continue
        own = _own_cgroup_paths().get("cpu" if fstype == "cgroup" else "", "")
        if own.lstrip("/").startswith(str(rel)):
            try:
                (tree.parent / "cgroup.procs").write_text(f"{os.getpid()}\n")
            except OSError as err:
                log.warning("cannot leave cgroup %s: %s", tree, err.strerror)


def _kill_tasks(path: Path) -> int:
    """SIGKILL every task of the cgroup ``path``; how many there were."""
    try:
        pids = [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return 0
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


class DutyCycleLimiter:
    """User-space CFS bandwidth control: per period, a group whose processes used their CPU budget
    are SIGSTOPped until the period ends. Child groups are limited by their own budget *and* their
    parent's (a node's instances share the node's budget)."""

    def __init__(self, period_s: float = PERIOD_US / 1e6, poll_s: float = 0.01) -> None:
        self.period_s = period_s
        self.poll_s = poll_s
        self._groups: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="duty-cycle", daemon=True)
        self._thread.start()

    def create(self, name: str, quota_milli: int, parent: str | None = None) -> str:
        group = f"{parent}/{name}" if parent else name
        with self._lock:
            self._groups[group] = {"quota": quota_milli / 1000.0, "parent": parent, "procs": {}, "stopped": False}
        return group

    def add(self, group: str, pid: int) -> None:
        try:
            proc = psutil.Process(pid)
            with self._lock:
                self._groups[group]["procs"][pid] = proc
        except psutil.NoSuchProcess:
            pass

    def remove(self, group: str) -> None:
        with self._lock:
            g = self._groups.pop(group, None)
        if g:
            self._signal(g, signal.SIGCONT)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            for g in self._groups.values():
                self._signal(g, signal.SIGCONT)
            self._groups.clear()

    @staticmethod
    def _signal(g: dict, sig: int) -> None:
        for pid, proc in list(g["procs"].items()):
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                g["procs"].pop(pid, None)

    @staticmethod
    def _cpu(g: dict) -> float:
        total = 0.0
        for pid, proc in list(g["procs"].items()):
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                g["procs"].pop(pid, None)
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            with self._lock:
                groups = dict(self._groups)
                base = {name: self._cpu(g) for name, g in groups.items()}
            end = start + self.period_s
            while not self._stop.is_set() and time.monotonic() < end:
                with self._lock:
                    for name, g in groups.items():
                        if g["stopped"] or name not in self._groups:
                            continue
                        used_self = self._cpu(g) - base.get(name, 0.0)
                        over = used_self >= g["quota"] * self.period_s
                        parent = g["parent"]
                        if not over and parent in groups:
                            pg = groups[parent]
                            children = [c for c, cg in groups.items() if cg["parent"] == parent]
                            used = sum(self._cpu(groups[c]) - base.get(c, 0.0) for c in children)
                            over = used >= pg["quota"] * self.period_s
                        if over:
                            self._signal(g, signal.SIGSTOP)
                            g["stopped"] = True
                time.sleep(self.poll_s)
            with self._lock:
                for g in groups.values():
                    if g["stopped"]:
                        self._signal(g, signal.SIGCONT)
                        g["stopped"] = False
