"""Image-pull times of a run's pods, read from the kubelet's ``Pulled`` events.

A pod's status says when it was scheduled and when its container started, never how long the
image pull took; the kubelet says it only in the Event it records for the container
(kubernetes/kubernetes ``pkg/kubelet/images/image_manager.go`` at cfce511, ``EnsureImageExists``):

- ``Successfully pulled image "IMG" in 1.234s (1.5s including waiting). Image size: 123 bytes.``
  (the first duration is the pull itself, the second includes the wait for a serialised puller;
  kubelets before 1.28 wrote ``... in 1.234s`` and stopped there);
- ``Container image "IMG" already present on machine``: no pull (0 s).

Durations are Go's ``time.Duration.String()``: ``1.234s``, ``850ms``, ``1m2.5s``, ``12µs``.
The pull time is what the twin's pull fit reads (``where.pulls``), so without it a real
cluster's pull bandwidths are never fitted (issue 44, item 5)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from testbed.kube.nodes import get_path as _get
from testbed.kube.nodes import k8s_time

log = logging.getLogger(__name__)

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|μs|ns|h|m|s)")
_PULLED = re.compile(r'^Successfully pulled image "[^"]*" in (?P<pull>[0-9.a-zµμ]+)'
                     r'(?: \((?P<waiting>[0-9.a-zµμ]+) including waiting\))?')
_PRESENT = re.compile(r'^Container image "[^"]*" already present on machine')


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string (``1m2.5s``, ``850ms``, ``0s``); None if it is not one."""
    parts = _PART.findall(text)
    if not parts or "".join(v + u for v, u in parts) != text:
        return None
    return sum(float(v) * _UNITS[u] for v, u in parts)


def pull_seconds(message: str) -> float | None:
    """The image pull of one ``Pulled`` event's message: its duration in seconds, 0.0 when the image
    was already on the node, None when the message is neither (a kubelet wording not known here)."""
    if _PRESENT.match(message):
        return 0.0
    m = _PULLED.match(message)
    return go_duration(m.group("pull")) if m else None


def container_of(field_path: str | None) -> str | None:
    """``spec.containers{user-container}`` -> ``user-container`` (the event's container)."""
    m = re.fullmatch(r"spec\.(?:init)?[cC]ontainers\{(.+)\}", field_path or "")
    return m.group(1) if m else None


def pulls_of(events: Iterable[Any], pods: Iterable[str], container: str) -> dict[str, float]:
    """Pod name -> its ``container``'s pull time (s) from ``Pulled`` events, for ``pods`` only. A
    pod's sidecars (Knative's queue-proxy) have events of their own and are left out; a pod with
    several events for the container (a restart) keeps its first pull, the cold start's."""
    wanted = set(pods)
    found: dict[str, tuple[float, float]] = {}
    for ev in events:
        if _get(ev, "reason") != "Pulled":
            continue
        obj = _get(ev, "involved_object") or _get(ev, "involvedObject") or {}
        name = _get(obj, "name")
        if name not in wanted or (_get(obj, "kind") or "Pod") != "Pod":
            continue
        if container_of(_get(obj, "field_path") or _get(obj, "fieldPath")) != container:
            continue
        seconds = pull_seconds(str(_get(ev, "message") or ""))
        if seconds is None:
            continue
        when = _event_time(ev)
        if name not in found or when < found[name][0]:
            found[name] = (when, seconds)
    return {name: s for name, (_, s) in found.items()}


def _event_time(ev: Any) -> float:
    for key in (("first_timestamp",), ("firstTimestamp",), ("event_time",), ("eventTime",),
                ("metadata", "creation_timestamp"), ("metadata", "creationTimestamp")):
        t = k8s_time(_get(ev, *key))
        if t is not None:
            return t
    return float("inf")


def read_pulls(core: Any, namespace: str, pods: Iterable[str], container: str,
               request_timeout_s: float) -> tuple[dict[str, float], str | None]:
    """List the namespace's ``Pulled`` events once and return (pull times, problem): a failed list
    leaves every pull unknown (NaN in the placements, never a void run) and says why."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from testbed.kube.api import api_message

    try:
        events = core.list_namespaced_event(namespace, field_selector="reason=Pulled",
                                            _request_timeout=request_timeout_s)
    except ApiException as err:
        return {}, f"image-pull times unknown: listing Pulled events in {namespace} failed: {api_message(err)}"
    except HTTPError as err:
        return {}, f"image-pull times unknown: listing Pulled events in {namespace} failed: {err}"
    return pulls_of(getattr(events, "items", None) or [], pods, container), None


def fill(records: Mapping[str, Any], pulls: Mapping[str, float]) -> None:
    """Set ``image_pull_s`` on the watch's records that have a pull time."""
    for name, seconds in pulls.items():
        if name in records:
            records[name].image_pull_s = seconds


__all__ = ["container_of", "fill", "go_duration", "pull_seconds", "pulls_of", "read_pulls"]
