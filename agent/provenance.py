"""What every experiment, training run and evaluation records about how it was produced."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("scoretune", "numpy", "gymnasium", "stable-baselines3", "torch", "optuna")


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def code_revision() -> str:
    """What code computed a result (a kept evaluation task reuses only its own): ``<commit>``, or
    ``<commit>-dirty`` when tracked files differ from it, in a git checkout; else the
    installed scoretune version."""
    rev = git_revision()
    if rev is None:
        return f"scoretune {versions().get('scoretune')}"
    try:
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO, capture_output=True,
                               timeout=10).returncode != 0
    except (OSError, subprocess.SubprocessError):
        dirty = True  # cannot tell: never reuse on a guess
    return f"{rev}-dirty" if dirty else rev


def provenance() -> dict[str, Any]:
    return {
        "git_revision": git_revision(),
        "versions": versions(),
        "platform": platform.platform(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
    }
