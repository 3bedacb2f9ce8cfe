"""The lab's state directory: which processes it started, on which ports, and where they log.

Everything the embedded lab starts is recorded here the moment it starts, so ``testbed down`` (or a
test's finaliser) can stop exactly those processes by pid, even after the process that started them
died. A pid alone is not an identity (pids are reused), so each record also keeps the process's
start time as the kernel reports it, and nothing is signalled unless both match.

Layout::

    <state>/lab.json            what `up` started: cluster, ports, cpu enforcement, lab cgroup
    <state>/procs/<role>-<name>.json   one record per live process (controller, agents, instances)
    <state>/ports/<name>.port   the port each server bound (written by the server itself)
    <state>/cgroups.json        cgroups created (removed by `down`, deepest first)
    <state>/logs/<name>.log     stdout+stderr of each process
    <state>/openwhisk/auth.guest  the lab's OpenWhisk guest key (``UUID:KEY``, 0600), on that platform
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from functions.atomic import write_atomic

log = logging.getLogger(__name__)

STATE_ENV = "SCORETUNE_LAB_DIR"
GUEST_KEY_FILE = Path("openwhisk") / "auth.guest"
"""Where a lab on OpenWhisk keeps its guest key, under the state directory."""


def default_state_dir() -> Path:
    """``$SCORETUNE_LAB_DIR``, else a per-user directory under the system temp dir (never the repo)."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    import tempfile

    return Path(tempfile.gettempdir()) / f"scoretune-lab-{os.getuid()}"


_PROC_STAT = Path("/proc/self/stat").exists()


def start_time(pid: int) -> float:
    """When process ``pid`` started, in seconds after boot: ``/proc/PID/stat``'s ``starttime``,
    which a step of the system clock (NTP, a resumed VM) does not move. psutil's ``create_time``
    adds the boot time as the wall clock now puts it, so a clock step of a second makes every live
    process look like another one (and a lab tear itself down). Without ``/proc``: psutil's.
    Raises ``psutil.NoSuchProcess`` when there is no such process."""
    if not _PROC_STAT:
        return psutil.Process(pid).create_time()
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise psutil.NoSuchProcess(pid) from None
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    # fields after the command (which may hold spaces and parentheses): state is field 3, starttime 22
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[22 - 3]) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcRecord:
    """One started process: its role (controller, agent, instance), a name, pid and start time
    (:func:`start_time`: seconds after boot, immune to clock steps)."""

    role: str
    name: str
    pid: int
    create_time: float
    started_by: int

    def alive(self) -> bool:
        """True while *this* process (same pid and same start time) exists and is not a zombie."""
        try:
            return (abs(start_time(self.pid) - self.create_time) < 0.05
                    and psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False


def record_for(role: str, name: str, pid: int) -> ProcRecord:
    return ProcRecord(role, name, pid, start_time(pid), os.getpid())


class LabState:
    """Reads and writes one state directory; safe to use from several processes at once (each file
    has one writer, writes are atomic renames)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_state_dir()

    # --- paths ---
    @property
    def lab_file(self) -> Path:
        return self.root / "lab.json"

    @property
    def procs_dir(self) -> Path:
        return self.root / "procs"

    @property
    def ports_dir(self) -> Path:
        return self.root / "ports"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def cgroups_file(self) -> Path:
        return self.root / "cgroups.json"

    @property
    def guest_key_file(self) -> Path:
        return self.root / GUEST_KEY_FILE

    def log_path(self, name: str) -> Path:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        return self.logs_dir / f"{name}.log"

    def ensure(self) -> None:
        for d in (self.root, self.procs_dir, self.ports_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)

    # --- lab description ---
    def write_lab(self, info: dict[str, Any]) -> None:
        write_atomic(self.lab_file, json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")

    def read_lab(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.lab_file.read_text())
        except (OSError, ValueError):
            return None

    # --- process records ---
    def _proc_path(self, role: str, name: str) -> Path:
        return self.procs_dir / f"{role}-{name}.json"

    def add_proc(self, rec: ProcRecord) -> None:
        write_atomic(self._proc_path(rec.role, rec.name), json.dumps(asdict(rec)) + "\n")

    def remove_proc(self, role: str, name: str) -> None:
        self._proc_path(role, name).unlink(missing_ok=True)

    def procs(self, role: str | None = None) -> list[ProcRecord]:
        out: list[ProcRecord] = []
        if not self.procs_dir.exists():
            return out
        for path in sorted(self.procs_dir.glob("*.json")):
            try:
                rec = ProcRecord(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if role is None or rec.role == role:
                out.append(rec)
        return out

    def live_procs(self, role: str | None = None) -> list[ProcRecord]:
        return [r for r in self.procs(role) if r.alive()]

    # --- ports ---
    def write_port(self, name: str, port: int) -> None:
        write_atomic(self.ports_dir / f"{name}.port", f"{port}\n")

    def read_port(self, name: str) -> int | None:
        try:
            return int((self.ports_dir / f"{name}.port").read_text().strip())
        except (OSError, ValueError):
            return None

    def wait_port(self, name: str, rec: ProcRecord, timeout_s: float) -> int:
        """Wait until the server ``name`` wrote its port; fail early if its process died."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            port = self.read_port(name)
            if port is not None:
                return port
            if not rec.alive():
                raise RuntimeError(f"{name} exited before listening; see {self.log_path(name)}")
            time.sleep(0.05)
        raise TimeoutError(f"{name} did not start listening within {timeout_s:.0f} s; see {self.log_path(name)}")

    # --- cgroups ---
    def add_cgroup(self, path: str) -> None:
        """Remember a created cgroup. Several processes add entries; each writes its own file."""
        d = self.root / "cgroups"
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / f"{abs(hash(path))}.json", json.dumps({"path": path}) + "\n")

    def cgroups(self) -> list[str]:
        d = self.root / "cgroups"
        out = []
        for p in sorted(d.glob("*.json")) if d.exists() else []:
            try:
                out.append(json.loads(p.read_text())["path"])
            except (OSError, ValueError, KeyError):
                continue
        return out

    # --- OpenWhisk's guest key ---
    def write_guest_key(self) -> str:
        """A fresh ``UUID:KEY`` for this lab (never the chart's public default), 0600."""
        path = self.guest_key_file
        path.parent.mkdir(parents=True, exist_ok=True)
        key = f"{uuid.uuid4()}:{secrets.token_hex(32)}"
        path.unlink(missing_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(key + "\n")
        return key

    def read_guest_key(self) -> str | None:
        try:
            return self.guest_key_file.read_text().strip() or None
        except OSError:
            return None

    def clear(self) -> None:
        """Forget everything but the logs (kept for post-mortems)."""
        for d in (self.procs_dir, self.ports_dir, self.root / "cgroups", self.guest_key_file.parent):
            if d.exists():
                for p in d.iterdir():
                    p.unlink(missing_ok=True)
                d.rmdir()
        self.lab_file.unlink(missing_ok=True)


def stop_process(rec: ProcRecord, *, grace_s: float = 3.0) -> bool:
    """Stop one recorded process by pid (SIGCONT first, in case a CPU limiter had stopped it, then
    SIGTERM, then SIGKILL after ``grace_s``). Returns True if it was alive."""
    if not rec.alive():
        return False
    try:
        p = psutil.Process(rec.pid)
        for sig in (signal.SIGCONT, signal.SIGTERM):
            p.send_signal(sig)
        try:
            p.wait(grace_s)
        except psutil.TimeoutExpired:
            p.kill()
            p.wait(grace_s)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        log.warning("pid %d (%s %s) did not exit after SIGKILL", rec.pid, rec.role, rec.name)
    return True
