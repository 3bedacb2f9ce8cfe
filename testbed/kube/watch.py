"""The watch of a run's function pods: what the API server says of each pod from creation to
deletion (node, scheduled, ready, restarts, failures), read by a thread for the whole run and
written as the run's placements table (:class:`loadgen.results.PodTimes`, one record for every
backend)."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from loadgen.results import PodTimes, placements_table
from testbed.errors import TestbedError
from testbed.kube.api import KubeTimeouts, api_message
from testbed.kube.faults import (
    SERVICE_LABEL,
    condition,
    failed_reason,
    last_exit,
    restarts,
)
from testbed.kube.nodes import get_path as _get
from testbed.kube.nodes import k8s_time

log = logging.getLogger(__name__)


@dataclass
class PodRecord:
    """What the watch saw of one function pod; times are Unix seconds observed locally."""

    pod: str
    function: str
    node: str | None = None
    created: float | None = None
    scheduled: float | None = None
    ready: float | None = None
    deleted: float | None = None
    start_s: float | None = None
    init_s: float | None = None
    image_pull_s: float | None = None
    """From the kubelet's Pulled event (:mod:`testbed.kube.pulls`): 0 when the image was on the node."""
    restarts_base: int = 0
    """restartCount when the watch first saw the pod if it existed before the run, else 0."""
    restarts: int = 0
    last_exit: str | None = None
    failed: str | None = None
    """Why the pod is phase Failed (Evicted, OutOfcpu, …), None while it is not."""


class PodWatch:
    """Watches the function pods of one namespace in a thread and keeps a :class:`PodRecord` each.

    It lists first (to know the pods that already exist and the resourceVersion to watch from),
    then watches; a watch that ends (server timeout) is re-opened from the last resourceVersion,
    and a ``410 Gone`` (history compacted) re-lists. Errors are kept and reported by :meth:`stop`.
    """

    def __init__(self, core: Any, namespace: str, functions: Sequence[str], timeouts: KubeTimeouts,
                 clock: Callable[[], float] = time.time, *, selector: str | None = None,
                 function_of: Callable[[Any], str | None] | None = None, container: str = "user-container") -> None:
        self._core = core
        self._namespace = namespace
        self._selector = selector or f"{SERVICE_LABEL} in ({','.join(sorted(functions))})"
        self._function_of = function_of or (lambda pod: (_get(pod, "metadata", "labels") or {}).get(SERVICE_LABEL))
        """The function a pod serves (Knative: its Service label; OpenWhisk: its image), None: not one of ours."""
        self._container = container
        self._timeouts = timeouts
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.pods: dict[str, PodRecord] = {}
        self.latest: dict[str, Any] = {}
        """The last object seen of every pod not yet DELETED (what :class:`FaultWatch` inspects)."""
        self.error: str | None = None
        self._thread = threading.Thread(target=self._loop, name="scoretune-pod-watch", daemon=True)
        self._watch: Any = None
        self._initial = False

    def start(self) -> PodWatch:
        self._initial = True  # pods the first list finds existed before the run: their restarts are the baseline
        self._resource_version = self._list()
        self._initial = False
        self._thread.start()
        return self

    def _list(self) -> str:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            pods = self._core.list_namespaced_pod(self._namespace, label_selector=self._selector,
                                                  _request_timeout=self._timeouts.api_s)
        except ApiException as err:
            raise TestbedError(f"Kubernetes API: listing function pods in {self._namespace} failed: "
                               f"{api_message(err)}") from None
        except HTTPError as err:
            raise TestbedError(f"Kubernetes API: listing function pods in {self._namespace} failed: {err}") from None
        for pod in pods.items or []:
            self._observe("ADDED", pod)
        return str(pods.metadata.resource_version or "")

    def _observe(self, kind: str, pod: Any) -> None:
        name = _get(pod, "metadata", "name")
        function = self._function_of(pod)
        if not name or not function:
            return
        now = self._clock()
        with self._lock:
            if self._stop.is_set():  # after stop() the records are final
                return
            count = restarts(pod)
            rec = self.pods.setdefault(name, PodRecord(pod=name, function=function, created=now,
                                                       restarts_base=count if self._initial else 0))
            if count > rec.restarts:
                rec.restarts, rec.last_exit = count, last_exit(pod)
            rec.failed = failed_reason(pod) or rec.failed
            if kind == "DELETED":
                self.latest.pop(name, None)
            else:
                self.latest[name] = pod
            node = _get(pod, "spec", "node_name") or _get(pod, "spec", "nodeName")
            if node and rec.node is None:
                rec.node = node
                rec.scheduled = now
            ready = condition(pod, "Ready")
            if ready is not None and _get(ready, "status") == "True" and rec.ready is None:
                rec.ready = now
                self._cold_start_parts(rec, pod)
            if rec.deleted is None and (kind == "DELETED" or _get(pod, "metadata", "deletion_timestamp")
                                        or _get(pod, "metadata", "deletionTimestamp")):
                rec.deleted = now

    def _cold_start_parts(self, rec: PodRecord, pod: Any) -> None:
        """Start and init from the pod's own timestamps (1 s resolution, kubelet and scheduler
        clocks): start = user container started - scheduled (includes the image pull), init =
        Ready - started. The image pull alone is in the kubelet's Events: :meth:`read_pulls`."""
        scheduled = k8s_time(_get(condition(pod, "PodScheduled"), "last_transition_time")
                        or _get(condition(pod, "PodScheduled"), "lastTransitionTime"))
        ready = k8s_time(_get(condition(pod, "Ready"), "last_transition_time")
                    or _get(condition(pod, "Ready"), "lastTransitionTime"))
        started = None
        for cs in _get(pod, "status", "container_statuses") or _get(pod, "status", "containerStatuses") or []:
            if _get(cs, "name") == self._container:
                started = k8s_time(_get(cs, "state", "running", "started_at") or _get(cs, "state", "running", "startedAt"))
        if scheduled is not None and started is not None:
            rec.start_s = max(0.0, started - scheduled)
        if started is not None and ready is not None:
            rec.init_s = max(0.0, ready - started)

    def _loop(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            self._watch = watch.Watch()
            try:
                for event in self._watch.stream(
                    self._core.list_namespaced_pod, self._namespace, label_selector=self._selector,
                    resource_version=self._resource_version, timeout_seconds=self._timeouts.watch_s,
                    _request_timeout=self._timeouts.watch_s + self._timeouts.api_s,
                ):
                    obj = event["object"]
                    rv = _get(obj, "metadata", "resource_version")
                    if rv:
                        self._resource_version = str(rv)
                    self._observe(event["type"], obj)
                    if self._stop.is_set():
                        break
            except ApiException as err:
                if err.status == 410:
                    log.info("pod watch: resourceVersion %s expired, listing again", self._resource_version)
                    try:
                        self._resource_version = self._list()
                    except TestbedError as again:
                        self.error = str(again)
                        return
                    continue
                self.error = f"watching pods in {self._namespace} failed: {api_message(err)}"
                return
            except Exception as err:  # connection lost: the run's placements are incomplete
                if self._stop.is_set():
                    return
                self.error = f"watching pods in {self._namespace} failed: {err}"
                return

    def stop(self) -> None:
        """Stop watching. The client's stream only notices between events, so the thread is not
        waited for beyond a moment: it ends by itself when its request times out (``watch_s``),
        and events it reads after this are ignored, so the records are final once this returns."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=1.0)

    def read_pulls(self) -> str | None:
        """After :meth:`stop`: each pod's image-pull time from the kubelet's ``Pulled`` events (one
        list call). Returns why they are unknown if the list failed (the run still counts)."""
        from testbed.kube.pulls import fill, read_pulls

        with self._lock:
            names = list(self.pods)
        pulls, problem = read_pulls(self._core, self._namespace, names, self._container, self._timeouts.api_s)
        with self._lock:
            fill(self.pods, pulls)
        if problem:
            log.warning("%s", problem)
        return problem

    def records(self) -> list[PodRecord]:
        """A copy of every record (deleted pods included), under the lock."""
        with self._lock:
            return [dataclasses.replace(r) for r in self.pods.values()]

    def live(self) -> list[tuple[PodRecord, Any]]:
        """(record, last object) of every pod not yet deleted, under the lock."""
        with self._lock:
            return [(self.pods[n], obj) for n, obj in self.latest.items() if n in self.pods]

    def placements(self, epoch: float) -> pd.DataFrame:
        """The placements table, times relative to ``epoch`` (the replay's t = 0)."""
        with self._lock:
            recs = sorted(self.pods.values(), key=lambda r: (r.created or 0.0, r.pod))

        def rel(v: float | None) -> float | None:
            return None if v is None else v - epoch

        return placements_table([
            PodTimes(pod=r.pod, function=r.function, node=r.node, created_s=rel(r.created) if r.created else math.nan,
                     scheduled_s=rel(r.scheduled), ready_s=rel(r.ready), deleted_s=rel(r.deleted),
                     image_pull_s=r.image_pull_s, start_s=r.start_s, init_s=r.init_s)
            for r in recs
        ])


__all__ = ["PodRecord", "PodWatch", "k8s_time"]
