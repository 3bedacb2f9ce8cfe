"""The host's speed, held to the experiment's first run: a drift beyond the threshold pauses it.

The embedded lab's backend probes the host before every run (``testbed.local.probe``: a fixed CPU
loop and a fixed unpack, ``summary.host.probe``). The first probe an experiment sees is kept in
``host.json``; every later run is compared with it, and when either probe moved by more than
``host_drift`` (a ratio: 1.25 means 25 % slower or faster) the experiment stops with one line
(:class:`HostDrift`) before that run is scored. Its log keeps every finished step, so ``--resume``
continues once the host is back; a host that stays changed means the experiment's latencies can
no longer be compared with its first steps, and a new experiment is the honest answer.

The default 1.5 is measured: twenty back-to-back probes on a quiet 2-core host ranged 1.08x
(CPU) and 1.10x (unpack) from fastest to slowest (`scoretune testbed probe --repeats 20`), but
probes taken between lab runs move more: over 354 A/A runs on 2026-12-07 the worst probe was
1.249x its experiment's first, and a clean-clone `make tune` paused at an unpack probe of 1.33x
with nothing else running (the first default, 1.25, stopped the user's first command). The drift
it exists to catch, between sessions, was 2-2.5x (docs/results/containers/repeatable.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from functions.atomic import write_atomic

HOST_NAME = "host.json"
DEFAULT_HOST_DRIFT = 1.5


class HostDrift(AgentError):
    """The host's speed left the experiment's first probe by more than the threshold."""


def check_host(out_dir: Path, run_dir: Path, summary: dict[str, Any], threshold: float) -> dict[str, float] | None:
    """Compare the run's probe with the experiment's first (recording it if it is the first);
    the ratios, or None when the run has no probe. Raises :class:`HostDrift` beyond ``threshold``
    (0: no check)."""
    from testbed.local.probe import drift, worst

    probe = (summary.get("host") or {}).get("probe")
    if not probe:
        return None
    path = Path(out_dir) / HOST_NAME
    if not path.exists():
        write_atomic(path, json.dumps({"probe": probe, "run": str(run_dir)}, indent=2, sort_keys=True) + "\n")
        return {}
    try:
        base = json.loads(path.read_text(encoding="utf-8"))["probe"]
    except (OSError, ValueError, KeyError, TypeError):
        raise AgentError(f"{path}: not the host record this experiment wrote (delete it to start the record anew)") from None
    ratios = drift(probe, base)
    if threshold and worst(ratios) > threshold:
        what = ", ".join(f"{k.removesuffix('_ms')} probe {v:.2f}x" for k, v in ratios.items())
        raise HostDrift(f"{run_dir}: the host's speed moved beyond {threshold:g}x of this experiment's first run ({what}); "
                        f"paused before scoring this run: `--resume` once the host is back, or start a new experiment")
    return ratios


__all__ = ["DEFAULT_HOST_DRIFT", "HOST_NAME", "HostDrift", "check_host"]
