"""What the container runtime needs from this machine, and the one-line answer when it is missing."""

from __future__ import annotations

import os
import shutil
import subprocess

from testbed.local import cpu

TOOLS: dict[str, str] = {
    "runc": "runc",
    "docker-registry": "docker-registry",
    "skopeo": "skopeo",
    "umoci": "umoci",
    "mmdebstrap": "mmdebstrap",
    "ip": "iproute2",
    "tc": "iproute2",
    "tar": "tar",
    "mount": "mount",
}
"""Executable -> the Debian package that provides it (`make setup-containers` installs them)."""

RUNTIMES = ("auto", "process", "containers")


def missing_packages() -> list[str]:
    return sorted({pkg for exe, pkg in TOOLS.items() if shutil.which(exe) is None})


def unavailable() -> str | None:
    """Why the container runtime cannot run here, or None when it can: not root, a package
    missing, no writable cgroup hierarchy for node quotas, or network namespaces refused."""
    if os.geteuid() != 0:
        return "the container runtime needs root (network namespaces, mounts, runc)"
    missing = missing_packages()
    if missing:
        return f"the container runtime needs Debian's {', '.join(missing)}: `make setup-containers` (apt-get install {' '.join(missing)})"
    mode = cpu.detect("auto")
    if mode.mode == "duty-cycle":
        return f"the container runtime needs a writable cgroup hierarchy for node CPU quotas ({mode.reason})"
    probe = f"st-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are refused here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def choose(requested: str) -> tuple[str, str]:
    """(runtime, why): ``containers`` when asked for or (``auto``) when it works, else ``process``.
    Asking for ``containers`` where it cannot run is an error the caller reports in one line."""
    if requested not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {requested!r}")
    if requested == "process":
        return "process", "asked for"
    why = unavailable()
    if why is None:
        return "containers", "asked for" if requested == "containers" else "root, runc, a registry and cgroups are available"
    if requested == "containers":
        raise RuntimeError(why)
    return "process", why
