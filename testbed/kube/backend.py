"""The ``kube`` backend: tune a real kube-scheduler on a Kubernetes cluster with Knative Serving.

It drives a lab brought up by ``make testbed-up INVENTORY=...`` (ansible/): a second scheduler,
``scoretune-scheduler``, runs as a Deployment in kube-system with its KubeSchedulerConfiguration
in a ConfigMap; every function is a Knative Service whose pods name that scheduler.

- :meth:`KubeBackend.apply` validates the profile (the scheduler package's own validation, via
  :func:`testbed.kube.render.scheduler_config`), creates the configuration's own immutable
  ConfigMap (``scoretune-scheduler-config-<10 hex of its hash>``; already there is fine: same name,
  same content), rolls the Deployment by pointing its config volume at that ConfigMap and putting
  the hash on its pod template, waits until the new pods (carrying that hash and mounting that
  ConfigMap) are ready *and* one of them holds the leader lease (only the leader schedules), and
  on failure or timeout points the Deployment back at the previous ConfigMap and hash and waits for
  that to be ready again. Then it deletes the hashed ConfigMaps beyond the last few
  (:attr:`KubeBackend.config_history`; the one in use and the previous one are always kept).
- :meth:`KubeBackend.reset` waits until no function pod remains. Knative's autoscaler owns the
  replica count of a revision (scaling the Deployment by hand is undone by the KPA on its next
  reconcile), so "scale every function to zero" means: no traffic, and wait for the KPA's
  scale-to-zero (stable window + grace period, about 90 s with the defaults).
- :meth:`KubeBackend.run` records the real cluster as a cluster spec (:meth:`snapshot_cluster`),
  checks every function's Knative Service is Ready, replays the workload
  with Locust (:func:`loadgen.replay.replay`) against the Knative routes (the ingress URL with each
  route's Host header, or the route URLs themselves), and watches the function pods through the
  API for the whole run to fill ``placements.parquet`` and the requests' ``node``.

API errors and timeouts become :class:`~testbed.errors.TestbedError` with what was being done,
the object, and the API's own message; a run that fails is written as a failed run
(``summary["failed"]``, ``summary["failure"]``), never as a good number.

**Not run against a real cluster here.** The machine this was written on has no Kubernetes
cluster; the tests (tests/testbed/kube/) run this code against a fake API server at the HTTP level
that speaks the REST shapes the official client uses, and check the exact sequence of API calls,
the rollback path and the timeouts. docs/lab.md says the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from functions.platform import Platform
from loadgen.replay import MAX_CLOCK_OFFSET_S
from loadgen.results import RunResult, empty_placements, write_run
from testbed.cluster import ClusterSpec, cluster_to_dict
from testbed.errors import ClusterSpecError, LabFault, TestbedError
from testbed.kube.access import DRIVER_NAMESPACE
from testbed.kube.faults import (
    FAILING_WAIT_REASONS,
    INFRA_PODS,
    REVISION_API,
    SERVICE_LABEL,
    FaultWatch,
    condition,
    failed_reason,
    last_exit,
    oom_kills,
    parse_infra,
    restarts,
    void_reason,
)
from testbed.kube.images import FunctionImage, NodeImages, parse_report, repository
from testbed.kube.images import problems as image_problems
from testbed.kube.nodes import describe, health_problems, node_state, schedulable
from testbed.kube.nodes import get_path as _get
from testbed.kube.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    FUNCTION_LABEL,
    IMAGE_TOOL_IMAGE,
    SchedulerSettings,
    config_hash,
    config_map,
    config_text,
    config_volume_patch,
    image_state_pod,
    mounted_config_map,
    scheduler_config,
)
from testbed.kube.versions import KNATIVE_SERVICE_API, KUBERNETES_VERSION

if TYPE_CHECKING:
    from loadgen.workload import Workload
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class ImageState:
    """The function-image cache every node starts each step from (what the experiment declares).

    Every schedulable node holds every function image, except ``cold_nodes``, which hold none:
    ImageLocality scores and cold-start times then depend on the profile under test, not on where
    earlier steps happened to put pods. ``enforce=False`` leaves the caches as they are (each run
    still records them). ``load``-mode images have no registry to pull them from again: purge them
    (cold nodes) only with ``push`` or ``prebuilt`` images.
    """

    cold_nodes: tuple[str, ...] = ()
    enforce: bool = True

    def declared(self) -> dict[str, Any]:
        return {"enforce": self.enforce, "warm": "every other schedulable node", "cold_nodes": list(self.cold_nodes)}


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
    restarts_base: int = 0
    """restartCount when the watch first saw the pod if it existed before the run, else 0."""
    restarts: int = 0
    last_exit: str | None = None
    failed: str | None = None
    """Why the pod is phase Failed (Evicted, OutOfcpu, …), None while it is not."""


def _ts(value: Any) -> float | None:
    """A Kubernetes timestamp (datetime from the client, or RFC 3339 text) as Unix seconds."""
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(pd.Timestamp(value).timestamp())


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
                               f"{_api_message(err)}") from None
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
        Ready - started. Image pull alone is only in Events, which are not read."""
        scheduled = _ts(_get(condition(pod, "PodScheduled"), "last_transition_time")
                        or _get(condition(pod, "PodScheduled"), "lastTransitionTime"))
        ready = _ts(_get(condition(pod, "Ready"), "last_transition_time")
                    or _get(condition(pod, "Ready"), "lastTransitionTime"))
        started = None
        for cs in _get(pod, "status", "container_statuses") or _get(pod, "status", "containerStatuses") or []:
            if _get(cs, "name") == self._container:
                started = _ts(_get(cs, "state", "running", "started_at") or _get(cs, "state", "running", "startedAt"))
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
                self.error = f"watching pods in {self._namespace} failed: {_api_message(err)}"
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
        if not recs:
            return empty_placements()

        def rel(v: float | None) -> float:
            return np.nan if v is None else v - epoch

        return pd.DataFrame(
            {
                "pod": [r.pod for r in recs],
                "function": [r.function for r in recs],
                "node": pd.array([r.node for r in recs], dtype=object),
                "created_s": [rel(r.created) for r in recs],
                "scheduled_s": [rel(r.scheduled) for r in recs],
                "ready_s": [rel(r.ready) for r in recs],
                "deleted_s": [rel(r.deleted) for r in recs],
                "image_pull_s": [np.nan] * len(recs),
                "start_s": [np.nan if r.start_s is None else r.start_s for r in recs],
                "init_s": [np.nan if r.init_s is None else r.init_s for r in recs],
            }
        )


def _api_message(err: Any) -> str:
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


def fill_nodes(requests: pd.DataFrame, placements: pd.DataFrame) -> pd.DataFrame:
    """The requests' ``node`` from the API where the response did not say.

    The runtime reports its node in ``X-Scoretune-Node`` (from ``NODE_NAME``, the downward API). A
    value that is a pod name is mapped to that pod's node; a missing one is filled when every pod
    of the function alive during the request ran on one node (otherwise it stays unknown).
    """
    out = requests.copy()
    if placements.empty or out.empty:
        return out
    pod_node = dict(zip(placements["pod"], placements["node"], strict=True))
    nodes = set(n for n in placements["node"] if isinstance(n, str))
    node = out["node"].astype(object).to_numpy().copy()
    for i, value in enumerate(node):
        if isinstance(value, str) and value not in nodes and value in pod_node:
            node[i] = pod_node[value]
    missing = [i for i, v in enumerate(node) if not isinstance(v, str) or not v]
    if missing:
        by_fn = {f: g for f, g in placements.groupby("function")}
        start = out["sent_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        end = out["finished_s"].to_numpy(dtype=np.float64, na_value=np.nan)
        fns = out["function"].to_numpy(dtype=object)
        for i in missing:
            g = by_fn.get(fns[i])
            if g is None or not np.isfinite(start[i]):
                continue
            created = g["created_s"].to_numpy(dtype=np.float64)
            deleted = g["deleted_s"].to_numpy(dtype=np.float64, na_value=np.nan)
            stop = end[i] if np.isfinite(end[i]) else start[i]
            alive = (created <= stop) & ~(deleted < start[i])
            candidates = {n for n in g["node"].to_numpy(dtype=object)[alive] if isinstance(n, str)}
            if len(candidates) == 1:
                node[i] = candidates.pop()
    out["node"] = pd.Series([v if isinstance(v, str) and v else None for v in node], dtype=object, index=out.index)
    return out


@dataclass
class KubeBackend:
    """Backend on a real cluster (see the module docstring).

    kubeconfig / context: the cluster to drive (``None``: the default kubeconfig, else in-cluster).
    namespace: where the functions' Knative Services live.
    functions: the Services a run may use (default: every ``scoretune.io/function`` Service found).
    ingress_url: Kourier's address, e.g. ``http://10.0.0.10:31080`` (the control plane's NodePort); requests go there
        with each route's Host header. ``None``: the route URLs are used directly (needs DNS).
    settings: the scheduler Deployment's name, namespace and lease (as rendered by ``render``).
    replay_workers: Locust worker processes on this machine (0: one local process).
    remote_workers / master_bind_host / master_port: Locust workers on the other load-generator hosts
        (ansible/loadgen.yml runs them as a service that connects to this host's master); the
        master waits ``workers_wait_s`` for all of them before each run, and a run a worker did not
        join or dropped out of fails (void, rerun: loadgen.replay).
    request_timeout_s: per-request timeout of the replay.
    start_lead_s: t = 0 of the replay is this long after the run starts, so Locust is up by then and
        pod times (from the watch) and request times share one clock origin.
    api_client: a ready ``kubernetes.client.ApiClient`` (tests pass one aimed at a fake API server).
    config_history: how many of the scheduler's hashed ConfigMaps apply() keeps (at least 2: the one
        in use and the previous one, which a rollback returns to; then the newest others).
    """

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    functions: Sequence[str] | None = None
    ingress_url: str | None = None
    settings: SchedulerSettings = field(default_factory=SchedulerSettings)
    timeouts: KubeTimeouts = field(default_factory=KubeTimeouts)
    replay_workers: int = 0
    remote_workers: int = 0
    master_bind_host: str = "127.0.0.1"
    master_port: int | None = None
    workers_wait_s: float = 60.0
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S
    """A load process whose clock is further than this from the master's voids the run (loadgen.replay)."""
    request_timeout_s: float = 30.0
    start_lead_s: float = 3.0
    api_client: Any = None
    image_state: ImageState = field(default_factory=ImageState)
    image_tool: str = IMAGE_TOOL_IMAGE
    config_history: int = 3
    image_namespace: str = DRIVER_NAMESPACE
    """Where the image-state pods run (privileged: the only namespace whose Pod Security allows it)."""
    infra_pods: Sequence[str] = INFRA_PODS
    """The data-plane pods each run baselines and watches (testbed.kube.faults.INFRA_PODS); empty: none."""
    name: str = field(default="kube", init=False)
    platform: Platform = field(default=Platform.KNATIVE, init=False)
    """What serves the functions (testbed.kube.openwhisk_backend for OpenWhisk)."""
    knative_objects: bool = field(default=True, init=False)
    """Its functions are Knative Services: Revisions and Knative's ConfigMaps are watched for faults."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], common: Mapping[str, Any]) -> KubeBackend:
        """The backend from the CLI's kube options (``namespace``, ``ingress_url``) and those every
        platform's kube backend takes (``common``); Knative's entry of testbed.platforms names it."""
        return cls(namespace=options.get("namespace") or "default", ingress_url=options.get("ingress_url"), **common)

    def __post_init__(self) -> None:
        from kubernetes import client, config

        if isinstance(self.config_history, bool) or not isinstance(self.config_history, int) \
                or self.config_history < 2:
            raise TestbedError(f"config_history must be an integer >= 2 (the ConfigMap in use and the previous "
                               f"one), got {self.config_history!r}")
        for spec in self.infra_pods:
            parse_infra(spec)

        if self.api_client is None:
            try:
                if self.kubeconfig is None and self.context is None:
                    try:
                        config.load_incluster_config()
                        self.api_client = client.ApiClient()
                    except config.ConfigException:
                        self.api_client = config.new_client_from_config()
                else:
                    self.api_client = config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
            except (config.ConfigException, OSError, TypeError) as err:
                where = self.kubeconfig or "the default kubeconfig"
                raise TestbedError(f"cannot load a Kubernetes client configuration from {where}: {err}") from None
        self._core = client.CoreV1Api(self.api_client)
        self._apps = client.AppsV1Api(self.api_client)
        self._custom = client.CustomObjectsApi(self.api_client)
        self._coordination = client.CoordinationV1Api(self.api_client)
        self._profile: Profile | None = None
        self._digest: str | None = None
        self._kubelet_versions: list[str] = []
        self._image_record: dict[str, Any] | None = None
        self.node_baseline: dict[str, bool] | None = None
        """Every node and whether it was schedulable at the first look: the cluster every run must
        find again (see :meth:`node_problems`)."""
        self._resets = 0
        self.knative_config: dict[str, str] | None = None
        """Knative's ConfigMap digests at the experiment's first run (testbed.kube.faults)."""
        self.last_restore: dict[str, Any] | None = None
        """What :meth:`restore` did last (None: never called)."""
        self.host = self.api_client.configuration.host

    # --- API calls with clear errors ----------------------------------------------------------

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, allow: Sequence[int] = (), **kwargs: Any) -> Any:
        """One API request; an API error or an unreachable server becomes a TestbedError naming
        ``what`` was being done (a :class:`LabFault` for a 5xx, 429 or no answer, which pass). An
        error whose status is in ``allow`` returns None instead."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, _request_timeout=self.timeouts.api_s, **kwargs)
        except ApiException as err:
            if err.status in allow:
                return None
            # a server error or throttling passes (a LabFault: the step is retried); a 4xx is ours
            kind = LabFault if (err.status or 0) >= 500 or err.status == 429 else TestbedError
            raise kind(f"Kubernetes API: {what} failed: {_api_message(err)}") from None
        except HTTPError as err:  # the API server unreachable or timing out: the lab, for now
            raise LabFault(f"Kubernetes API at {self.host}: {what} failed: {err}") from None

    # --- apply ------------------------------------------------------------------------------

    def apply(self, profile: Profile) -> None:
        """Make ``profile`` the scoretune-scheduler's configuration (see the module docstring)."""
        s = self.settings
        text = config_text(scheduler_config(profile, s))
        digest = config_hash(text)
        name = s.config_map_name(digest)
        dep = self._call(f"reading Deployment {s.namespace}/{s.scheduler_name}",
                         self._apps.read_namespaced_deployment, s.scheduler_name, s.namespace)
        previous_digest = (dep.spec.template.metadata.annotations or {}).get(CONFIG_HASH_ANNOTATION)
        previous_name = mounted_config_map(dep.spec.template.spec)
        if previous_name == name and previous_digest == digest:
            log.info("scheduler configuration %s is already applied", digest)
            if not self._check_config_map(name, text, digest, missing_ok=True):
                # deleted by hand: the running pod keeps its mounted copy, a restarted one would not start
                log.warning("ConfigMap %s/%s of the running configuration is gone; creating it again", s.namespace, name)
                self._create_config_map(text, digest)
            self._wait_ready(digest, name, self.timeouts.rollout_s, "the current configuration")
        else:
            self._create_config_map(text, digest)  # nothing runs on it yet: a failure here changes nothing
            try:
                self._point(digest, name)
                self._wait_ready(digest, name, self.timeouts.rollout_s, "the new configuration")
            except TestbedError as err:  # also a failed patch: the Deployment may name the new ConfigMap
                self._rollback(err, previous_name, previous_digest)
            self._collect({name, previous_name} - {None})
        self._profile = profile
        self._digest = digest
        log.info("scheduler %s/%s runs configuration %s (ConfigMap %s)", s.namespace, s.scheduler_name, digest, name)

    def restore(self, profile: Profile, *, why: str) -> dict[str, Any]:
        """Put the scheduler back on ``profile`` (the reference, or the confirmed best if one was
        applied) after an aborted experiment, and say what state the cluster is in. Never raises:
        the record says ``restored`` true or false, with the error; the tuning loop logs it."""
        record: dict[str, Any] = {"why": why, "profile": profile.scheduler_name}
        try:
            self.apply(profile)
        except TestbedError as err:
            record.update(restored=False, error=str(err), config_hash=self._digest,
                          state=f"the scheduler may still run configuration {self._digest or 'unknown'}")
            log.error("could not restore the scheduler (%s): %s", why, err)
        else:
            record.update(restored=True, config_hash=self._digest,
                          state=f"the scheduler runs configuration {self._digest}")
            log.warning("restored the scheduler to configuration %s (%s)", self._digest, why)
        self.last_restore = record
        return record

    def restoring(self, fallback: Callable[[], Profile]) -> contextlib.AbstractContextManager[None]:
        """:func:`testbed.backend.restoring` for this cluster: a second signal while restoring
        names the configuration the scheduler may still run."""
        from testbed.backend import restoring

        return restoring(self, fallback, state=lambda: f"the scheduler may still run configuration "
                                                       f"{self._digest or 'unknown'} (kube status shows it)")

    def _check_config_map(self, name: str, text: str, digest: str, *, missing_ok: bool = False) -> bool:
        """The ConfigMap ``name`` holds ``text`` and is immutable, so it can never hold anything
        else: what proves the file a pod mounting it reads is configuration ``digest``. False:
        it does not exist (only with ``missing_ok``)."""
        s = self.settings
        cm = self._call(f"reading ConfigMap {s.namespace}/{name}", self._core.read_namespaced_config_map,
                        name, s.namespace, allow=(404,) if missing_ok else ())
        if cm is None:
            return False
        held = (cm.data or {}).get(CONFIG_KEY)
        if held != text:
            got = "no " + CONFIG_KEY if held is None else f"configuration {config_hash(held)}"
            raise TestbedError(f"ConfigMap {s.namespace}/{name} holds {got}, not configuration {digest}: it was not "
                               f"created by scoretune; delete it (kubectl -n {s.namespace} delete configmap {name}) "
                               f"and apply again")
        if cm.immutable is not True:
            raise TestbedError(f"ConfigMap {s.namespace}/{name} is not immutable, so nothing proves the scheduler "
                               f"reads configuration {digest} from it; delete it (kubectl -n {s.namespace} delete "
                               f"configmap {name}) and apply again")
        return True

    def _create_config_map(self, text: str, digest: str) -> None:
        """Create the configuration's immutable ConfigMap; 409 AlreadyExists is fine once its
        content is checked (same name, same content: an earlier apply or Ansible made it)."""
        s = self.settings
        name = s.config_map_name(digest)
        created = self._call(f"creating ConfigMap {s.namespace}/{name}", self._core.create_namespaced_config_map,
                             s.namespace, config_map(text, s), allow=(409,))
        if created is None:
            log.info("ConfigMap %s/%s already exists", s.namespace, name)
            self._check_config_map(name, text, digest)

    def _point(self, digest: str, name: str) -> None:
        """Roll the Deployment onto configuration ``digest`` held by ConfigMap ``name``."""
        s = self.settings
        self._call(f"rolling Deployment {s.namespace}/{s.scheduler_name}", self._apps.patch_namespaced_deployment,
                   s.scheduler_name, s.namespace, config_volume_patch(digest, name))

    def _rollback(self, err: TestbedError, previous_name: str | None, previous_digest: str | None) -> None:
        s = self.settings
        log.error("%s; rolling back to the previous configuration", err)
        if previous_name is None or previous_digest is None:
            raise TestbedError(f"{err}; there is no previous configuration to roll back to") from None
        try:
            self._point(previous_digest, previous_name)
            self._wait_ready(previous_digest, previous_name, self.timeouts.rollback_s, "the previous configuration")
        except TestbedError as again:
            raise TestbedError(f"{err}; rolling back to the previous configuration also failed: {again}") from None
        # the lab is back where it was: a failed rollout of a valid profile is the lab's (a node,
        # an image pull, the lease), so the step is void and retried, not the experiment ended
        raise LabFault(
            f"{err}; rolled back: {s.namespace}/{s.scheduler_name} runs the previous configuration "
            f"({previous_digest}, ConfigMap {previous_name}) again"
        ) from None

    def _collect(self, keep: set[str]) -> None:
        """Delete this scheduler's hashed ConfigMaps beyond :attr:`config_history`: ``keep`` (the
        one in use, the previous one) stay, then the newest others. Never fails the apply: a
        ConfigMap left over is only clutter."""
        s = self.settings
        try:
            listed = self._call(f"listing the ConfigMaps of {s.namespace}/{s.scheduler_name}",
                                self._core.list_namespaced_config_map, s.namespace,
                                label_selector=s.config_selector).items or []
            others = sorted((cm for cm in listed if cm.metadata.name.startswith(s.config_map_prefix)
                             and cm.metadata.name not in keep),
                            key=lambda cm: (_ts(cm.metadata.creation_timestamp) or 0.0, cm.metadata.name), reverse=True)
            for cm in others[max(0, self.config_history - len(keep)):]:
                self._call(f"deleting ConfigMap {s.namespace}/{cm.metadata.name}",
                           self._core.delete_namespaced_config_map, cm.metadata.name, s.namespace, allow=(404,))
                log.info("deleted the old scheduler ConfigMap %s/%s", s.namespace, cm.metadata.name)
        except TestbedError as err:
            log.warning("could not delete old scheduler ConfigMaps: %s", err)

    def _wait_ready(self, digest: str, config_map_name: str, timeout_s: float, what: str) -> None:
        """Until the Deployment has rolled out (kubectl's ``rollout status`` rules), the pods with
        ``digest`` are ready, and one of them holds the lease; a pod of the new ReplicaSet that
        crash-loops or cannot pull its image fails at once with the container's own reason, and
        one that carries ``digest`` but mounts another ConfigMap than ``config_map_name`` fails
        too (its file is not the configuration its hash names)."""
        s = self.settings
        deadline = time.monotonic() + timeout_s
        waiting = "the Deployment to be observed"
        while True:
            dep = self._call(f"reading Deployment {s.namespace}/{s.scheduler_name}",
                             self._apps.read_namespaced_deployment, s.scheduler_name, s.namespace)
            pods = self._call(f"listing the pods of {s.namespace}/{s.scheduler_name}", self._core.list_namespaced_pod,
                              s.namespace, label_selector=s.label_selector).items or []
            mine = [p for p in pods if (p.metadata.annotations or {}).get(CONFIG_HASH_ANNOTATION) == digest]
            for p in mine:
                mounted = mounted_config_map(p.spec)
                if mounted != config_map_name:
                    raise TestbedError(f"scheduler pod {p.metadata.name} carries {what} {digest} but mounts ConfigMap "
                                       f"{mounted or 'none'}, not {config_map_name}")
            broken = self._broken(mine)
            if broken:
                raise TestbedError(f"scheduler pod with {what} failed: {broken}")
            waiting = self._rollout_waiting(dep)
            ready = [p.metadata.name for p in mine if _get(condition(p, "Ready"), "status") == "True"
                     and p.metadata.deletion_timestamp is None]
            if waiting is None and not ready:
                waiting = "a ready pod with the configuration"
            if waiting is None:
                if not s.leader_elect:
                    return
                holder = self._lease_holder()
                if holder and any(holder == n or holder.startswith(n + "_") for n in ready):
                    return
                waiting = f"a new pod to take the lease {s.namespace}/{s.scheduler_name} (held by {holder or 'nobody'})"
            if time.monotonic() >= deadline:
                raise TestbedError(
                    f"timed out after {timeout_s:.0f} s waiting for {waiting} "
                    f"(Deployment {s.namespace}/{s.scheduler_name}, {what} {digest})"
                )
            time.sleep(self.timeouts.poll_s)

    @staticmethod
    def _rollout_waiting(dep: Any) -> str | None:
        """kubectl ``rollout status`` for a Deployment (kubectl/pkg/polymorphichelpers/
        rollout_status.go): what is still awaited, or None when complete; a passed progress
        deadline raises."""
        st = dep.status
        if st is None or (dep.metadata.generation or 0) > (st.observed_generation or 0):
            return "the Deployment controller to observe the change"
        for c in st.conditions or []:
            if c.type == "Progressing" and c.reason == "ProgressDeadlineExceeded":
                raise TestbedError(f"Deployment {dep.metadata.namespace}/{dep.metadata.name} exceeded its "
                                   f"progress deadline: {c.message}")
        want = dep.spec.replicas if dep.spec.replicas is not None else 1
        updated = st.updated_replicas or 0
        if updated < want:
            return f"{updated} of {want} updated replicas"
        if (st.replicas or 0) > updated:
            return f"{(st.replicas or 0) - updated} old replica(s) to terminate"
        if (st.available_replicas or 0) < updated:
            return f"{st.available_replicas or 0} of {updated} updated replicas available"
        return None

    @staticmethod
    def _broken(pods: Iterable[Any]) -> str | None:
        for p in pods:
            for cs in (p.status.container_statuses if p.status else None) or []:
                waiting = cs.state.waiting if cs.state else None
                if waiting is not None and waiting.reason in FAILING_WAIT_REASONS:
                    last = cs.last_state.terminated if cs.last_state else None
                    detail = f"; last exit {last.exit_code}: {last.message or last.reason}" if last else ""
                    return f"{p.metadata.name} container {cs.name} is {waiting.reason}: {waiting.message or ''}{detail}".rstrip(": ")
        return None

    def _lease_holder(self) -> str | None:
        from kubernetes.client.exceptions import ApiException

        s = self.settings
        try:
            lease = self._coordination.read_namespaced_lease(s.scheduler_name, s.namespace,
                                                             _request_timeout=self.timeouts.api_s)
        except ApiException as err:
            if err.status == 404:
                return None
            raise TestbedError(f"Kubernetes API: reading Lease {s.namespace}/{s.scheduler_name} failed: "
                               f"{_api_message(err)}") from None
        return lease.spec.holder_identity if lease.spec else None

    def status(self) -> dict[str, Any]:
        """What the lab runs now: the scheduler's configuration hash, rollout and leader, and each
        function's readiness, route and pod count (``scoretune kube status``)."""
        s = self.settings
        dep = self._call(f"reading Deployment {s.namespace}/{s.scheduler_name}",
                         self._apps.read_namespaced_deployment, s.scheduler_name, s.namespace)
        name = mounted_config_map(dep.spec.template.spec)
        cm = None if name is None else self._call(f"reading ConfigMap {s.namespace}/{name}",
                                                   self._core.read_namespaced_config_map, name, s.namespace)
        text = None if cm is None else (cm.data or {}).get(CONFIG_KEY)
        running = (dep.spec.template.metadata.annotations or {}).get(CONFIG_HASH_ANNOTATION)
        waiting = self._rollout_waiting(dep)
        scheduler = {
            "deployment": f"{s.namespace}/{s.scheduler_name}",
            "config_hash": running,
            "config_map": name,
            "config_map_immutable": cm is not None and cm.immutable is True,
            "config_map_matches": text is not None and config_hash(text) == running,
            "rolled_out": waiting is None,
            "waiting_for": waiting,
            "leader": self._lease_holder() if s.leader_elect else None,
        }
        group, version, plural = KNATIVE_SERVICE_API
        functions: dict[str, Any] = {}
        names = self._function_names()
        pods = self._call(f"listing function pods in {self.namespace}", self._core.list_namespaced_pod, self.namespace,
                          label_selector=f"{SERVICE_LABEL} in ({','.join(names)})").items or []
        for fn in names:
            svc = self._call(f"reading Knative Service {self.namespace}/{fn}", self._custom.get_namespaced_custom_object,
                             group, version, self.namespace, plural, fn)
            st = svc.get("status") or {}
            ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
            functions[fn] = {
                "ready": ready.get("status") == "True",
                "url": st.get("url"),
                "scheduler": ((svc.get("spec") or {}).get("template") or {}).get("spec", {}).get("schedulerName"),
                "pods": sum(1 for p in pods if (p.metadata.labels or {}).get(SERVICE_LABEL) == fn),
            }
        return {"api_server": self.host, "scheduler": scheduler, "functions": functions}

    # --- reset ------------------------------------------------------------------------------

    def _function_names(self) -> list[str]:
        if self.functions is not None:
            return sorted(self.functions)
        group, version, plural = KNATIVE_SERVICE_API
        listed = self._call(f"listing Knative Services in {self.namespace}", self._custom.list_namespaced_custom_object,
                            group, version, self.namespace, plural, label_selector=FUNCTION_LABEL)
        names = sorted(item["metadata"]["name"] for item in listed.get("items", []))
        if not names:
            raise TestbedError(f"no scoretune function (Knative Service labelled scoretune.io/function) in namespace "
                               f"{self.namespace}: run ansible/functions.yml first")
        return names

    def reset(self) -> None:
        """Before every step: wait until every function is scaled to zero (no pod of any function
        remains), check every node against the baseline (:meth:`node_problems`), then bring every
        node's function-image cache to :attr:`image_state` and record it (``summary.json``
        ``image_state`` of the next run). A lab that cannot get there raises :class:`LabFault`."""
        names = self._function_names()
        self._drain(names)
        unhealthy = self.node_problems()
        if unhealthy:
            raise LabFault(f"node health: {describe(unhealthy)}")
        self._image_record = self._restore_images(names)

    def _drain(self, names: Sequence[str]) -> None:
        selector = f"{SERVICE_LABEL} in ({','.join(names)})"
        deadline = time.monotonic() + self.timeouts.drain_s
        while True:
            pods = self._call(f"listing function pods in {self.namespace}", self._core.list_namespaced_pod,
                              self.namespace, label_selector=selector).items or []
            if not pods:
                log.info("every function is at zero pods")
                return
            if time.monotonic() >= deadline:
                left = ", ".join(sorted(f"{p.metadata.name} ({(p.metadata.labels or {}).get(SERVICE_LABEL)})"
                                        for p in pods))
                raise LabFault(
                    f"timed out after {self.timeouts.drain_s:.0f} s waiting for the functions to scale to zero; "
                    f"{len(pods)} pod(s) remain: {left}"
                )
            time.sleep(self.timeouts.poll_s)

    # --- node image caches ------------------------------------------------------------------

    def _function_images(self, names: Sequence[str]) -> list[FunctionImage]:
        """Each function container's image as its Service names it and as its ready Revision runs
        it (``status.containerStatuses[].imageDigest``, the digest Knative resolved the tag to)."""
        group, version, plural = KNATIVE_SERVICE_API
        out: list[FunctionImage] = []
        for fn in names:
            svc = self._call(f"reading Knative Service {self.namespace}/{fn}", self._custom.get_namespaced_custom_object,
                             group, version, self.namespace, plural, fn)
            containers = (((svc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            digests: dict[str, str] = {}
            revision = (svc.get("status") or {}).get("latestReadyRevisionName")
            if revision:
                rgroup, rversion, rplural = REVISION_API
                rev = self._call(f"reading Knative Revision {self.namespace}/{revision}",
                                 self._custom.get_namespaced_custom_object, rgroup, rversion, self.namespace, rplural,
                                 revision, allow=(404,)) or {}
                for cs in (rev.get("status") or {}).get("containerStatuses") or []:
                    if cs.get("imageDigest"):
                        digests[repository(cs["imageDigest"])] = cs["imageDigest"]
            for c in containers:
                image = c.get("image")
                if image and all(i.image != image or i.function != fn for i in out):
                    out.append(FunctionImage(fn, image, digests.get(repository(image))))
        return out

    _schedulable = staticmethod(schedulable)

    def node_problems(self) -> list[tuple[str, str]]:
        """(node, why) for every node that is not as the experiment found it or is unhealthy
        (testbed.kube.nodes); the first call takes the baseline (:attr:`node_baseline`)."""
        states = [node_state(n) for n in self._call("listing nodes", self._core.list_node).items or []]
        if self.node_baseline is None:
            self.node_baseline = {n.name: n.schedulable for n in states}
            log.info("node baseline: %s", ", ".join(f"{k} ({'schedulable' if v else 'not schedulable'})"
                                                    for k, v in sorted(self.node_baseline.items())))
        return health_problems(self.node_baseline, states)

    def _restore_images(self, names: Sequence[str]) -> dict[str, Any]:
        """Run one image-state pod per schedulable node (render.image_state_pod), wait for all,
        read what each node holds from its log, delete the pods, and check the declared state by
        repository (testbed.kube.images). A node that cannot be brought there is a :class:`LabFault`
        naming the node and the image: the step is void and retried, not scored."""
        state = self.image_state
        t0 = time.monotonic()
        images = self._function_images(names)
        nodes = [n.metadata.name for n in self._call("listing nodes", self._core.list_node).items or []
                 if self._schedulable(n)]
        unknown = sorted(set(state.cold_nodes) - set(nodes))
        if unknown:
            raise TestbedError(f"image state: cold node(s) {unknown} are not schedulable nodes of the cluster "
                               f"(schedulable: {nodes})")
        if not state.enforce:
            return {"declared": state.declared(), "nodes": None, "seconds": round(time.monotonic() - t0, 3)}
        self._resets += 1
        token = f"{int(time.time())}-{self._resets}"
        ns = self.image_namespace
        repos = sorted({i.repository for i in images})
        runs = sorted({i.runs for i in images})
        pods: dict[str, str] = {}
        try:
            for i, node in enumerate(nodes):
                cold = node in state.cold_nodes
                body = image_state_pod(f"scoretune-images-{token}-{i}", node, repositories=repos,
                                       pull=[] if cold else runs, purge=repos if cold else [], token=token,
                                       namespace=ns, tool_image=self.image_tool)
                self._call(f"creating the image-state pod on {node}", self._core.create_namespaced_pod, ns, body)
                pods[node] = body["metadata"]["name"]
            held = self._wait_image_pods(pods)
        finally:
            for pod in pods.values():
                try:
                    self._call(f"deleting the image-state pod {ns}/{pod}", self._core.delete_namespaced_pod, pod, ns,
                               grace_period_seconds=0)
                except TestbedError as err:
                    log.warning("%s", err)
        found = [p for node in nodes for p in image_problems(node, held[node], cold=node in state.cold_nodes,
                                                               images=images)]
        if found:
            raise LabFault(
                "image state: the nodes' function-image caches could not be brought to the declared state: "
                + "; ".join(found) + " (load-mode images cannot be pulled back: re-run ansible/functions.yml, or "
                "use push/prebuilt images for cold nodes; docs/lab.md \"Troubleshooting\")")
        record = {"declared": state.declared(),
                  "images": [{"function": i.function, "image": i.image, "runs": i.runs} for i in images],
                  "nodes": {n: sorted(r for refs in held[n].holds.values() for r in refs) for n in nodes},
                  "seconds": round(time.monotonic() - t0, 3)}
        log.info("image state restored on %d node(s) in %.1f s", len(nodes), record["seconds"])
        return record

    def _wait_image_pods(self, pods: dict[str, str]) -> dict[str, NodeImages]:
        ns = self.image_namespace
        deadline = time.monotonic() + self.timeouts.images_s
        held: dict[str, NodeImages] = {}
        while True:
            for node, pod in pods.items():
                if node in held:
                    continue
                obj = self._call(f"reading the image-state pod {ns}/{pod}", self._core.read_namespaced_pod, pod, ns)
                phase = obj.status.phase if obj.status else None
                waiting = KubeBackend._broken([obj])
                if waiting:
                    raise LabFault(f"image state: the pod on {node} cannot run: {waiting} "
                                   f"(its image is {self.image_tool}; crictl comes from the node's /usr/local/bin/crictl)")
                if phase not in ("Succeeded", "Failed"):
                    continue
                text = self._call(f"reading the log of {ns}/{pod}", self._core.read_namespaced_pod_log, pod, ns,
                                  container="crictl")
                rec = parse_report(text)
                if phase == "Failed" or not rec.complete:
                    raise LabFault(f"image state: the pod on {node} ended {phase} before reporting the node's images "
                                   f"(log: {str(text).strip()[:300] or 'empty'})")
                held[node] = rec
            if len(held) == len(pods):
                return held
            if time.monotonic() >= deadline:
                left = sorted(set(pods) - set(held))
                raise LabFault(f"timed out after {self.timeouts.images_s:.0f} s waiting for the image-state pods "
                               f"on {', '.join(left)}")
            time.sleep(self.timeouts.poll_s)

    # --- run --------------------------------------------------------------------------------

    def _routes(self, functions: Sequence[str]) -> dict[str, str]:
        """Each function's route URL (``status.url``), after checking its Service is Ready."""
        group, version, plural = KNATIVE_SERVICE_API
        urls: dict[str, str] = {}
        for fn in functions:
            svc = self._call(f"reading Knative Service {self.namespace}/{fn}", self._custom.get_namespaced_custom_object,
                             group, version, self.namespace, plural, fn)
            status = svc.get("status") or {}
            ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready is None or ready.get("status") != "True":
                why = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition yet"
                raise TestbedError(f"Knative Service {self.namespace}/{fn} is not Ready: {why}")
            if not status.get("url"):
                raise TestbedError(f"Knative Service {self.namespace}/{fn} has no status.url")
            urls[fn] = status["url"]
        return urls

    def _targets(self, routes: dict[str, str]) -> tuple[str | dict[str, str], str | None]:
        """(targets, host_template) for the replay: the ingress with Host headers, or the routes."""
        if self.ingress_url is None:
            return dict(routes), None
        hosts = {fn: urlsplit(url).netloc for fn, url in routes.items()}
        template = None
        for fn, host in hosts.items():
            candidate = host.replace(fn, "{function}", 1)
            if template is None:
                template = candidate
            elif template != candidate:
                raise TestbedError(f"the routes do not share one domain pattern ({template!r} vs {candidate!r} for "
                                   f"{fn}); set config-domain so every route is FUNCTION.NAMESPACE.DOMAIN")
        return self.ingress_url, template

    def _replay_target(self, functions: Sequence[str]) -> dict[str, Any]:
        """Where the replay sends each function's requests (``loadgen.replay.replay``'s ``targets``
        and how): Knative's ingress with each route's Host header, or the routes."""
        targets, host_template = self._targets(self._routes(functions))
        return {"targets": targets, "host_template": host_template}

    def _pod_watch(self, functions: Sequence[str]) -> PodWatch:
        """The watch of the run's function pods (Knative: the Services' revision pods)."""
        return PodWatch(self._core, self.namespace, functions, self.timeouts)

    def _run_faults(self, requests: pd.DataFrame) -> list[dict[str, Any]]:
        """Faults only the requests show (the platform refused or failed them itself); Knative: none."""
        return []

    def _platform_info(self, functions: Sequence[str]) -> dict[str, Any]:
        """What the platform's own state was when the run started, for ``summary.json``; Knative: nothing."""
        return {}

    def snapshot_cluster(self, directory: Path) -> ClusterSpec:
        """The real cluster in scoretune's own model (DESIGN.md: the ``kube`` backend reads the real
        cluster into the same cluster spec): writes ``nodes.json`` and ``pods.json`` to
        ``directory`` as ``kubectl get -o json`` would, and imports them with
        :func:`testbed.sim.importer.import_cluster` (allocatable minus the requests of running
        non-Knative pods), so the same description can drive ``sim`` as a twin."""
        from testbed.sim.importer import import_cluster

        directory.mkdir(parents=True, exist_ok=True)
        nodes = self._call("listing nodes", self._core.list_node)
        pods = self._call("listing pods in all namespaces", self._core.list_pod_for_all_namespaces)
        paths = []
        self._kubelet_versions = sorted({n.status.node_info.kubelet_version for n in nodes.items or []
                                         if n.status and n.status.node_info})
        for name, obj in (("nodes.json", nodes), ("pods.json", pods)):
            path = directory / name
            path.write_text(json.dumps(self.api_client.sanitize_for_serialization(obj), indent=1, sort_keys=True))
            paths.append(path)
        return import_cluster(paths[0], paths[1], name=f"kube-{urlsplit(self.host).hostname or 'cluster'}")

    def run(self, workload: Workload, out_dir: Path, *, seed: int = 0) -> RunResult:
        """Replay ``workload`` on the cluster; a failure is written as a failed run and returned."""
        from loadgen.replay import merge_records, replay
        from testbed.scheduler.config import profile_record

        out_dir = Path(out_dir)
        info: dict[str, Any] = {
            "backend": self.name,
            "seed": seed,
            "scheduler": {"name": self.settings.scheduler_name, "config_hash": self._digest},
            "namespace": self.namespace,
            "api_server": self.host,
            "profile": profile_record(self._profile),  # null: no apply(), the scheduler kept its configuration
            # the node image caches the run started from (reset()); null: no reset() before this run
            "image_state": self._image_record,
        }
        self._image_record = None  # a second run without a reset() starts from whatever the first left
        watch: PodWatch | None = None
        faults: FaultWatch | None = None
        t_start = time.time()
        try:
            functions = workload.functions
            known = set(self._function_names())
            unknown = [f for f in functions if f not in known]
            if unknown:
                raise TestbedError(f"workload uses function(s) {unknown} that are not deployed in "
                                   f"{self.namespace} (deployed: {sorted(known)})")
            try:
                info["cluster"] = cluster_to_dict(self.snapshot_cluster(out_dir / "cluster"))
            except ClusterSpecError as err:  # a twin that cannot be built does not void the run
                info["cluster"] = {"error": str(err)}
            info["versions_kube"] = {"pinned": KUBERNETES_VERSION, "kubelets": self._kubelet_versions}
            info.update(self._platform_info(functions))
            target = self._replay_target(functions)
            watch = self._pod_watch(functions).start()
            faults = FaultWatch(self, functions, watch).start()
            info["data_plane"] = faults.data_plane()
            info["knative_config"] = dict(faults.config)
            t_start = time.time() + self.start_lead_s
            result = replay(workload, out_dir=out_dir, timeout_s=self.request_timeout_s, workers=self.replay_workers,
                            info=info, start_epoch=t_start,
                            remote_workers=self.remote_workers, master_bind_host=self.master_bind_host,
                            master_port=self.master_port, workers_wait_s=self.workers_wait_s,
                            max_clock_offset_s=self.max_clock_offset_s, **target)
            time.sleep(self.timeouts.settle_s)
        except TestbedError as err:
            seen = faults.stop() if faults is not None else []
            if watch is not None:
                watch.stop()
            log.error("run failed: %s", err)
            placements = watch.placements(t_start) if watch is not None else empty_placements()
            # every scheduled request is kept, as an error that was never sent (replay's accounting)
            requests, _ = merge_records(workload, out_dir / "no-records")
            info["faults"] = seen
            info["oom_kills"] = oom_kills(seen)
            failure = f"{void_reason(seen)}; {err}" if seen else str(err)
            return write_run(out_dir, requests, placements, info=info, failed=True, failure=failure)
        seen = faults.stop() + self._run_faults(result.requests)
        watch.stop()
        placements = watch.placements(t_start)
        requests = fill_nodes(result.requests, placements)
        summary = dict(result.summary)
        failure = summary.get("failure")
        failed = bool(summary.get("failed"))
        if watch.error:
            failed = True
            failure = f"{failure}; {watch.error}" if failure else watch.error
        if seen:  # the contract agent.stats.run_health reads: failed + failure -> void, rerun
            failed = True
            failure = f"{void_reason(seen)}; {failure}" if failure else void_reason(seen)
        summary["faults"] = seen
        summary["oom_kills"] = oom_kills(seen)
        keep = {k: v for k, v in summary.items() if k not in ("failed", "failure")}
        keep["placements"] = {"pods": int(len(placements)), "nodes": sorted({n for n in placements["node"] if isinstance(n, str)})}
        return write_run(out_dir, requests, placements, info=keep, failed=failed, failure=failure)

    def close(self) -> None:
        if self.api_client is not None:
            self.api_client.close()


__all__ = ["FaultWatch", "ImageState", "KubeBackend", "KubeTimeouts", "PodRecord", "PodWatch", "fill_nodes", "void_reason"]
