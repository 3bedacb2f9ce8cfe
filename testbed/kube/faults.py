"""Infrastructure faults during a kube run: what makes a measured run void instead of scored.

A run's latency is charged to the profile under test, so anything else that changes during the run
(the scheduler, the function pods' health, the Knative data plane every request passes through,
the nodes) must void it. :class:`FaultWatch` takes a baseline when the run starts and looks again
every ``fault_poll_s``; each fault is kept once as ``{"kind", "object", "reason", "t"}`` and
:func:`void_reason` turns them into the run's ``failure`` text (agent.stats.run_health reads it:
void, rerun).

The data plane (``INFRA_PODS``): Knative's activator sits in the request path whenever a revision
has too little capacity (knative/serving pkg/activator, the target-burst-capacity rule), the
Kourier gateway carries every request, CoreDNS and kube-proxy resolve and route them, Flannel
carries the overlay. A restart, a pod that went away, a new pod (the activator's HPA scaled, a
controller was rescheduled) or one that stopped being Ready during the run changes the path the
requests took, so the run says nothing about the profile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from testbed.errors import TestbedError
from testbed.kube import access
from testbed.kube.nodes import get_path as _get

log = logging.getLogger(__name__)

FAILING_WAIT_REASONS = frozenset(
    {"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
     "CreateContainerError", "RunContainerError"}
)
"""Container waiting reasons that mean the container will not run (kubelet's
pkg/kubelet/images/types.go and pkg/kubelet/container/sync_result.go)."""

REVISION_API = ("serving.knative.dev", "v1", "revisions")

SERVICE_LABEL = "serving.knative.dev/service"
"""The label Knative puts on every pod of a Service's revisions (pkg/apis/serving/register.go)."""

INFRA_PODS: tuple[str, ...] = (
    "knative-serving",
    "kourier-system",
    "kube-system/k8s-app=kube-dns",
    "kube-system/k8s-app=kube-proxy",
    "kube-flannel/app=flannel",
)
"""The data-plane pods every run baselines, as ``NAMESPACE`` or ``NAMESPACE/LABEL-SELECTOR``:
Knative Serving (activator, autoscaler, controller, webhook, net-kourier-controller), Kourier's
gateway, CoreDNS, kube-proxy and Flannel, as ansible/ deploys them. A lab with other names sets
``infra_pods`` (the kube backend option); an empty list turns the check off."""

KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_CONFIG_MAPS: tuple[str, ...] = access.KNATIVE_CONFIG_MAPS
"""The Knative ConfigMaps whose content decides how requests are served and pods scaled: their
hashes are recorded per run (summary.json ``knative_config``), and a run is void when one changed
during it or since the experiment's first run (the runs would not be comparable)."""

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def parse_infra(spec: str) -> tuple[str, str | None]:
    """``(namespace, label selector or None)`` of one ``infra_pods`` entry."""
    namespace, _, selector = spec.partition("/")
    if not _NAMESPACE.fullmatch(namespace):
        raise TestbedError(f"infra_pods: {spec!r}: expected NAMESPACE or NAMESPACE/LABEL-SELECTOR with a "
                           "DNS-1123 namespace name")
    return namespace, selector or None


def condition(pod: Any, kind: str) -> Any:
    """The pod's condition of type ``kind`` (None if it has none)."""
    for c in _get(pod, "status", "conditions") or []:
        if _get(c, "type") == kind:
            return c
    return None


def container_statuses(pod: Any) -> list[Any]:
    return [*(_get(pod, "status", "init_container_statuses") or _get(pod, "status", "initContainerStatuses") or []),
            *(_get(pod, "status", "container_statuses") or _get(pod, "status", "containerStatuses") or [])]


def restarts(pod: Any) -> int:
    """Every container's restartCount, summed."""
    return sum(int(_get(cs, "restart_count") or _get(cs, "restartCount") or 0) for cs in container_statuses(pod))


def last_exit(pod: Any) -> str:
    """`` (last exit CODE: REASON)`` of the last container that terminated, '' if none did; an
    OOMKill reads ``(last exit 137: OOMKilled)``."""
    text = ""
    for cs in container_statuses(pod):
        term = _get(cs, "last_state", "terminated") or _get(cs, "lastState", "terminated")
        if term is not None:
            code = _get(term, "exit_code")
            code = _get(term, "exitCode") if code is None else code
            text = f" (last exit {code}: {_get(term, 'message') or _get(term, 'reason') or 'no reason'})"
    return text


def failed_reason(pod: Any) -> str | None:
    """Why the pod is phase Failed (the kubelet's admission rejections OutOfcpu, OutOfmemory, …,
    and evictions, pkg/kubelet/lifecycle and pkg/kubelet/eviction), None while it is not."""
    if _get(pod, "status", "phase") != "Failed":
        return None
    why = ": ".join(x for x in (_get(pod, "status", "reason"), _get(pod, "status", "message")) if x)
    return why or "no reason given"


def config_digest(config_map: Any) -> str:
    """12 hex of the SHA-256 of a ConfigMap's data (keys sorted); ``absent`` for none."""
    if config_map is None:
        return "absent"
    data = _get(config_map, "data") or {}
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class InfraPod:
    """What the baseline keeps of one data-plane pod."""

    node: str | None
    restarts: int
    ready: bool
    exit: str


def _infra_pod(pod: Any) -> InfraPod:
    return InfraPod(node=_get(pod, "spec", "node_name") or _get(pod, "spec", "nodeName"), restarts=restarts(pod),
                    ready=_get(condition(pod, "Ready"), "status") == "True", exit=last_exit(pod))


class Lab(Protocol):
    """What :class:`FaultWatch` reads of the kube backend."""

    settings: Any
    timeouts: Any
    namespace: str
    host: str
    infra_pods: Sequence[str]
    knative_config: dict[str, str] | None
    platform: Any
    knative_objects: bool
    """The functions are Knative Services: Revisions and Knative's ConfigMaps exist to watch."""
    _core: Any
    _custom: Any

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, allow: Sequence[int] = (), **kwargs: Any) -> Any: ...
    def _lease_holder(self) -> str | None: ...
    def node_problems(self) -> list[tuple[str, str]]: ...


class FunctionPods(Protocol):
    """What :class:`FaultWatch` reads of the run's pod watch (testbed.kube.backend.PodWatch)."""

    def live(self) -> list[tuple[Any, Any]]: ...
    def records(self) -> list[Any]: ...


class FaultWatch:
    """Looks for infrastructure faults during a run: a run with any of them is void, not scored.

    What counts (each would otherwise end up as latency or timeouts charged to the profile):

    - the scheduler: a pod of the Deployment restarted, went away, was replaced or is not Ready,
      or the lease changed holder or was released (``holderIdentity`` empty) since the run began;
    - the data plane (``infra_pods``): a pod that restarted (an OOMKill is named), went away, is
      terminating, stopped being Ready, or a new one (moved or scaled) since the run began;
    - Knative's configuration (``KNATIVE_CONFIG_MAPS``): a ConfigMap whose content changed during
      the run or since the experiment's first run (the backend's ``knative_config``);
    - a function pod: a container waiting in ImagePullBackOff, ErrImagePull, CrashLoopBackOff (or
      another reason in ``FAILING_WAIT_REASONS``), a container that restarted during the run
      (OOMKilled, Error), a pod Failed (Evicted, or rejected by the kubelet: OutOfcpu,
      OutOfmemory), Pending with no node for ``pending_s``, or still Terminating ``terminating_s``
      after its grace period;
    - a Knative Revision of a function whose Ready condition is False;
    - a node that is not Ready, under pressure, cordoned, gone or new (testbed.kube.nodes);
    - an API error while looking (the lab cannot be vouched for).

    The function pods come from the run's pod watch (no extra requests, and every pod it saw,
    deleted ones included); the scheduler, the lease, the data plane and the revisions are read
    every ``fault_poll_s`` in a thread, and once more by :meth:`stop`.
    """

    def __init__(self, backend: Lab, functions: Sequence[str], pods: FunctionPods,
                 clock: Callable[[], float] = time.time) -> None:
        self._b = backend
        self._functions = sorted(functions)
        self._pods = pods
        self._clock = clock
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self._seen: set[tuple[str, str, str]] = set()
        self._scheduler: dict[str, int] = {}
        self._holder: str | None = None
        self.infra: dict[str, InfraPod] = {}
        """The data plane when the run began: ``namespace/name`` -> what was seen."""
        self.config: dict[str, str] = {}
        """Knative's ConfigMaps when the run began: name -> :func:`config_digest`."""
        self._thread = threading.Thread(target=self._loop, name="scoretune-fault-watch", daemon=True)

    def _fault(self, kind: str, obj: str, reason: str) -> None:
        with self._lock:
            key = (kind, obj, reason)
            if key in self._seen:
                return
            self._seen.add(key)
            self.faults.append({"kind": kind, "object": obj, "reason": reason, "t": self._clock()})
        log.warning("infrastructure fault (%s %s): %s; the run will be void", kind, obj, reason)

    def _scheduler_pods(self) -> list[Any]:
        s = self._b.settings
        return self._b._call(f"listing the pods of {s.namespace}/{s.scheduler_name}", self._b._core.list_namespaced_pod,
                             s.namespace, label_selector=s.label_selector).items or []

    def _infra_pods(self) -> dict[str, Any]:
        """Every running data-plane pod now (phase Succeeded and Failed left out: finished Jobs)."""
        found: dict[str, Any] = {}
        for spec in self._b.infra_pods:
            namespace, selector = parse_infra(spec)
            listed = self._b._call(f"listing the data-plane pods {spec}", self._b._core.list_namespaced_pod,
                                   namespace, label_selector=selector)
            for pod in listed.items or []:
                if _get(pod, "status", "phase") not in ("Succeeded", "Failed"):
                    found[f"{namespace}/{pod.metadata.name}"] = pod
        return found

    def start(self) -> FaultWatch:
        """Take the baseline (the scheduler pods and their restarts, the lease holder, the data
        plane), then watch."""
        self._scheduler = {p.metadata.name: restarts(p) for p in self._scheduler_pods()
                           if p.metadata.deletion_timestamp is None}
        self._holder = self._b._lease_holder() if self._b.settings.leader_elect else None
        self.infra = {name: _infra_pod(pod) for name, pod in self._infra_pods().items()}
        self.config = self._config_digests()
        first = self._b.knative_config
        if first is None:  # the experiment's first run: what every later run must find again
            self._b.knative_config = dict(self.config)
        else:
            for name in sorted(set(first) | set(self.config)):
                if first.get(name) != self.config.get(name):
                    self._fault("knative-config", f"{KNATIVE_NAMESPACE}/{name}",
                                f"changed since the experiment's first run ({first.get(name, 'absent')} -> "
                                f"{self.config.get(name, 'absent')}): the runs are not comparable")
        self._thread.start()
        return self

    def _config_digests(self) -> dict[str, str]:
        if not self._b.knative_objects:
            return {}  # OpenWhisk's settings are its pods' environment: a change restarts them (infra)
        core = self._b._core
        return {name: config_digest(self._b._call(f"reading ConfigMap {KNATIVE_NAMESPACE}/{name}",
                                                  core.read_namespaced_config_map, name, KNATIVE_NAMESPACE,
                                                  allow=(404,)))
                for name in KNATIVE_CONFIG_MAPS}

    def data_plane(self) -> dict[str, str | None]:
        """Where each data-plane pod ran when the run began (recorded in summary.json)."""
        return {name: p.node for name, p in sorted(self.infra.items())}

    def check(self) -> None:
        """One look at everything (also called from the thread)."""
        try:
            self._check_scheduler()
            self._check_infra()
            self._check_config()
            self._check_revisions()
            for node, why in self._b.node_problems():
                self._fault("node", node, why)
        except TestbedError as err:
            self._fault("api", self._b.host, str(err))
        self._check_function_pods()

    def _check_scheduler(self) -> None:
        s = self._b.settings
        now = {p.metadata.name: p for p in self._scheduler_pods()}
        for name, count in self._scheduler.items():
            pod = now.get(name)
            if pod is None:
                self._fault("scheduler", name, "the scheduler pod went away during the run")
                continue
            if pod.metadata.deletion_timestamp is not None:
                self._fault("scheduler", name, "the scheduler pod is terminating")
            if restarts(pod) > count:
                self._fault("scheduler", name, f"the scheduler restarted: restartCount {count} -> "
                                               f"{restarts(pod)}{last_exit(pod)}")
            elif _get(condition(pod, "Ready"), "status") != "True":
                self._fault("scheduler", name, "the scheduler pod is not Ready")
        for name in sorted(set(now) - set(self._scheduler)):
            self._fault("scheduler", name, "a new scheduler pod appeared during the run")
        if s.leader_elect:
            holder = self._b._lease_holder()
            lease = f"{s.namespace}/{s.scheduler_name}"
            if not holder:
                self._fault("lease", lease, f"the lease has no holder (released; was {self._holder or 'nobody'})")
            elif holder != self._holder:
                self._fault("lease", lease, f"the lease changed holder: {self._holder or 'nobody'} -> {holder}")

    def _check_infra(self) -> None:
        now = self._infra_pods()
        for name, was in self.infra.items():
            pod = now.get(name)
            if pod is None:
                self._fault("infra", name, f"the data-plane pod went away during the run (it ran on {was.node})")
                continue
            if _get(pod, "metadata", "deletion_timestamp") is not None:
                self._fault("infra", name, "the data-plane pod is terminating")
            count = restarts(pod)
            if count > was.restarts:
                self._fault("infra", name, f"the data-plane pod restarted: restartCount {was.restarts} -> "
                                           f"{count}{last_exit(pod)}")
            elif was.ready and _get(condition(pod, "Ready"), "status") != "True":
                self._fault("infra", name, "the data-plane pod is no longer Ready")
        for name in sorted(set(now) - set(self.infra)):
            node = _get(now[name], "spec", "node_name") or "no node yet"
            self._fault("infra", name, f"a new data-plane pod appeared during the run (on {node}): the data "
                                       "plane moved or changed its number of replicas")

    def _check_config(self) -> None:
        for name, digest in self._config_digests().items():
            if digest != self.config.get(name):
                self._fault("knative-config", f"{KNATIVE_NAMESPACE}/{name}",
                            f"changed during the run ({self.config.get(name)} -> {digest})")

    def _check_revisions(self) -> None:
        if not self._b.knative_objects:
            return
        group, version, plural = REVISION_API
        ns = self._b.namespace
        listed = self._b._call(f"listing Knative Revisions in {ns}", self._b._custom.list_namespaced_custom_object,
                               group, version, ns, plural,
                               label_selector=f"{SERVICE_LABEL} in ({','.join(self._functions)})")
        for rev in listed.get("items", []):
            ready = next((c for c in (rev.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None)
            if ready is not None and ready.get("status") == "False":
                why = ": ".join(x for x in (ready.get("reason"), ready.get("message")) if x) or "no reason given"
                self._fault("revision", f"{ns}/{rev['metadata']['name']}", f"the revision is not Ready: {why}")

    def _check_function_pods(self) -> None:
        t = self._b.timeouts
        now = self._clock()
        for rec, pod in self._pods.live():
            where = f"{self._b.namespace}/{rec.pod}"
            for cs in container_statuses(pod):
                reason = _get(cs, "state", "waiting", "reason")
                if reason in FAILING_WAIT_REASONS:
                    message = _get(cs, "state", "waiting", "message") or ""
                    self._fault("pod", where, f"container {_get(cs, 'name')} is {reason}: {message}".rstrip(": "))
            node = _get(pod, "spec", "node_name") or _get(pod, "spec", "nodeName")
            if not node and rec.created is not None and now - rec.created >= t.pending_s:
                cond = condition(pod, "PodScheduled")
                why = _get(cond, "message") or _get(cond, "reason") or "no scheduling decision"
                self._fault("pod", where, f"Pending with no node for {now - rec.created:.0f} s: {why}")
            if rec.deleted is not None:
                grace = _get(pod, "metadata", "deletion_grace_period_seconds")
                if grace is None:
                    grace = _get(pod, "metadata", "deletionGracePeriodSeconds")
                over = now - rec.deleted - float(grace or 0)
                if over >= t.terminating_s:
                    self._fault("pod", where, f"stuck Terminating {over:.0f} s after its grace period")
        for rec in self._pods.records():
            where = f"{self._b.namespace}/{rec.pod}"
            if rec.restarts > rec.restarts_base:
                self._fault("pod", where, f"a container restarted during the run: restartCount {rec.restarts_base} "
                                          f"-> {rec.restarts}{rec.last_exit or ''}")
            if rec.failed:
                self._fault("pod", where, f"the pod failed: {rec.failed}")

    def _loop(self) -> None:
        while not self._stop.wait(self._b.timeouts.fault_poll_s):
            self.check()

    def stop(self) -> list[dict[str, Any]]:
        """Stop the thread, look once more, and return every fault seen."""
        self._stop.set()
        self._thread.join(timeout=self._b.timeouts.api_s + 1.0)
        self.check()
        with self._lock:
            return list(self.faults)


def oom_kills(faults: Sequence[dict[str, Any]]) -> list[str]:
    """The pods (``namespace/name``) a fault says were OOMKilled during the run."""
    return sorted({f["object"] for f in faults if "OOMKilled" in f["reason"]})


def void_reason(faults: Sequence[dict[str, Any]]) -> str:
    """The run's ``failure`` text for its faults: what :func:`agent.stats.run_health` reports as
    the reason the run is void (and rerun)."""
    shown = "; ".join(f"{f['kind']} {f['object']}: {f['reason']}" for f in faults[:5])
    more = f"; and {len(faults) - 5} more" if len(faults) > 5 else ""
    return f"void: {len(faults)} infrastructure fault(s) during the run: {shown}{more}"
