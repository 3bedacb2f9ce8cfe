"""Talking to Kubernetes' API server: how long each wait of the kube backend may take, and what an
API error says (the status, the reason, the server's own message)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KubeTimeouts:
    """How long each wait may take (seconds). A wait that runs out raises a TestbedError naming it."""

    rollout_s: float = 180.0
    """apply: the new scheduler pods ready and one of them leading."""
    rollback_s: float = 180.0
    """apply: the previous configuration ready again after a failed rollout."""
    drain_s: float = 600.0
    """reset: every function pod gone (the KPA's scale-to-zero takes ~90 s with the defaults)."""
    api_s: float = 30.0
    """one API request."""
    poll_s: float = 1.0
    """between two reads of a status."""
    watch_s: int = 10
    """server-side timeout of one pod watch request (the watch is re-opened until the run ends);
    also the longest a finished watch thread lingers after the run."""
    images_s: float = 600.0
    """reset: the image-state pods done on every node (pulls of whatever is missing included)."""
    settle_s: float = 2.0
    """run: how long to keep watching after the last request, for the last pod transitions."""
    fault_poll_s: float = 2.0
    """run: between two looks at the scheduler pods, the lease and the revisions (:class:`FaultWatch`)."""
    pending_s: float = 60.0
    """run: a function pod no scheduler has placed for this long is a fault (the scheduler is down
    or the cluster cannot hold the pod), not a slow cold start of the profile under test."""
    terminating_s: float = 60.0
    """run: a function pod still Terminating this long after its grace period ended is a fault."""


def api_message(err: Any) -> str:
    """``STATUS Reason: message`` from an ApiException, using the Status body when there is one."""
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", "") or ""
    message = ""
    body = getattr(err, "body", None)
    if body:
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = str(body)[:200]
    return f"{status} {reason}".strip() + (f": {message}" if message else "")


__all__ = ["KubeTimeouts", "api_message"]
