"""Removing everything a container lab made: containers (``runc --root``), pod mounts, the
namespaces, veths and bridge carrying the lab's id, the nodes' memory groups, the image stores.
Idempotent and safe after a crash at any point (it finds objects by the names the lab owns)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from testbed.local.containers import network, pods

log = logging.getLogger(__name__)


def remove(state_root: Path, lab: dict[str, Any] | None) -> dict[str, int]:
    """Counts of what was removed: containers, mounts, network objects."""
    out = {"containers": 0, "mounts": 0, "network": 0}
    root = state_root / "containers"
    if (root / "runc").exists():
        out["containers"] = pods.Runc(root / "runc").delete_all()
    for m in pods.lab_mounts(root) if root.exists() else []:
        pods.unmount(m)
        out["mounts"] += 1
    lab_id = ((lab or {}).get("containers") or {}).get("lab_id")
    if lab_id:
        out["network"] = network.destroy(lab_id)
    cgroups = (lab or {}).get("cpu") or {}
    if cgroups.get("base") and cgroups.get("mode") == "cgroup-v1" and lab_id:
        _remove_lab_groups(Path(cgroups["base"]) / cgroups["lab_group"])
    if root.exists():
        if (root / "nodes").exists():  # unlinking every unpacked layer is disk-bound: minutes, not silent
            log.info("removing the nodes' image stores (%s); on a slow disk this takes a minute or two", root / "nodes")
        shutil.rmtree(root / "nodes", ignore_errors=True)
        shutil.rmtree(root / "registry", ignore_errors=True)
        shutil.rmtree(root / "runc", ignore_errors=True)
    return out


def _remove_lab_groups(cpu_group: Path) -> None:
    """runc makes a pod's cgroup in every v1 hierarchy, with the lab's and node's groups above it;
    remove the lab's group from each (the cpu and memory ones are also recorded, and go either way)."""
    from testbed.local import cpu
    from testbed.local.containers.runtime import _v1_mount

    cpu_mount = _v1_mount("cpu")
    if cpu_mount is None:
        return
    try:
        rel = cpu_group.relative_to(cpu_mount)
    except ValueError:
        return
    for mnt, fstype, _ in cpu.mounts():
        if fstype in ("cgroup", "cgroup2"):  # runc also makes one in the empty v2 "unified"
            path = Path(mnt) / rel
            if path.exists():
                cpu.remove_cgroup(path)


__all__ = ["remove"]
