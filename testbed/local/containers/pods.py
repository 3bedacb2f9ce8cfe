"""A pod as runc runs it: an overlay root over the image's layers and an OCI runtime spec.

The runtime spec follows ``runc spec``'s defaults (mounts, masked paths, capabilities) with what a
kubelet adds for a pod: the image config's entrypoint, env, user and working directory; the
node's network namespace (pods here share it, one port each, as hostNetwork pods do); a cgroup
under the node's (``linux.cgroupsPath``), so the node's CPU quota caps every pod on it and the
pod's own CPU limit (CFS quota) and memory limit apply as a kubelet sets them.
All containers of a lab live under one runc state root in the lab's state directory, so ``runc
--root ROOT list`` names exactly them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

PERIOD_US = 100_000

_MASKED = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
           "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"]
_READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
_CAPS = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]


def runtime_spec(
    image_config: dict[str, Any],
    *,
    args: list[str],
    env: dict[str, str],
    netns_path: str,
    cgroups_path: str,
    cpu_quota_milli: int,
    memory_limit_bytes: int,
    hostname: str,
) -> dict[str, Any]:
    """The OCI runtime spec (``config.json``) of one pod; ``args`` are appended to the image's
    entrypoint and cmd, ``env`` overrides the image's."""
    cfg = image_config.get("config", {})
    image_env = dict(e.split("=", 1) for e in cfg.get("Env", []) if "=" in e)
    user = str(cfg.get("User") or "0")
    uid, _, gid = user.partition(":")
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": int(uid), "gid": int(gid or 0)},
            "args": [*cfg.get("Entrypoint", []), *cfg.get("Cmd", []), *args],
            "env": [f"{k}={v}" for k, v in {**image_env, **env}.items()],
            "cwd": cfg.get("WorkingDir") or "/",
            "capabilities": {k: list(_CAPS) for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        ],
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "cpu": {"quota": max(1000, cpu_quota_milli * PERIOD_US // 1000), "period": PERIOD_US},
                "memory": {"limit": int(memory_limit_bytes), "swap": int(memory_limit_bytes)},
            },
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                           {"type": "network", "path": netns_path}],
            "maskedPaths": _MASKED,
            "readonlyPaths": _READONLY,
        },
    }


def mount_overlay(lowerdirs: list[Path], pod_dir: Path) -> Path:
    """``pod_dir/rootfs``: an overlay of the image's layers with the pod's own upper directory."""
    upper, work, rootfs = pod_dir / "upper", pod_dir / "work", pod_dir / "rootfs"
    for d in (upper, work, rootfs):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={':'.join(str(d) for d in lowerdirs)},upperdir={upper},workdir={work}"
    proc = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(rootfs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mounting the pod's root failed: {proc.stderr.strip()}")
    return rootfs


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def lab_mounts(under: Path) -> list[Path]:
    """Mount points below ``under`` (a crashed lab's pod roots), deepest first."""
    root = str(under.resolve())
    found = []
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            mnt = line.split()[1].replace("\\040", " ")
            if mnt == root or mnt.startswith(root + "/"):
                found.append(Path(mnt))
    except OSError:
        pass
    return sorted(found, key=lambda p: -len(p.parts))


class Runc:
    """runc with the lab's own state root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _argv(self, *args: str) -> list[str]:
        return ["runc", "--root", str(self.root), *args]

    async def run_detached(self, cid: str, bundle: Path, log: Path) -> int:
        """``runc run --detach``: the container's output goes to ``log``; returns its init pid."""
        self.root.mkdir(parents=True, exist_ok=True)
        pid_file = bundle / "pid"
        # runc hands its own stdio to a detached container, so both go to the log (a pipe would
        # stay open for the container's lifetime); runc's own error is the log's last line
        with open(log, "ab") as out:
            start = out.tell()
            proc = await asyncio.create_subprocess_exec(
                *self._argv("run", "--detach", "--bundle", str(bundle), "--pid-file", str(pid_file), cid),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            )
            await proc.wait()
        if proc.returncode != 0:
            with open(log, "rb") as f:
                f.seek(start)
                err = f.read().decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"runc could not start {cid}: {err[0][-300:]}")
        return int(pid_file.read_text().strip())

    async def delete(self, cid: str) -> None:
        proc = await asyncio.create_subprocess_exec(*self._argv("delete", "--force", cid),
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await proc.wait()

    def list(self) -> list[dict[str, Any]]:
        if not self.root.exists():
            return []
        proc = subprocess.run(self._argv("list", "--format", "json"), capture_output=True, text=True)
        try:
            return json.loads(proc.stdout or "null") or []
        except ValueError:
            return []

    def delete_all(self) -> int:
        n = 0
        for c in self.list():
            if subprocess.run(self._argv("delete", "--force", c["id"]), capture_output=True).returncode == 0:
                n += 1
        return n


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie whose parent has not reaped it yet has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


__all__ = ["Runc", "lab_mounts", "mount_overlay", "pid_alive", "runtime_spec", "unmount"]
