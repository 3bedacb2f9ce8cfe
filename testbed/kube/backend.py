"""The ``kube`` backend: tune a real kube-scheduler on a Kubernetes cluster with Knative Serving.

One job per module: :class:`KubeBackend` here composes the scheduler's rollout
(:mod:`testbed.kube.rollout`), the reset between steps (:mod:`testbed.kube.image_reset`) and the
run, whose pods :mod:`testbed.kube.watch` follows; :mod:`testbed.kube.api` holds the timeouts.

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

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
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
from testbed.kube.api import KubeTimeouts, api_message
from testbed.kube.faults import (
    INFRA_PODS,
    SERVICE_LABEL,
    FaultWatch,
    oom_kills,
    parse_infra,
    void_reason,
)
from testbed.kube.image_reset import ImageCacheReset, ImageState
from testbed.kube.nodes import health_problems, node_state, schedulable
from testbed.kube.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    FUNCTION_LABEL,
    IMAGE_TOOL_IMAGE,
    SchedulerSettings,
    config_hash,
    mounted_config_map,
)
from testbed.kube.rollout import SchedulerRollout
from testbed.kube.versions import KNATIVE_SERVICE_API, KUBERNETES_VERSION
from testbed.kube.watch import PodRecord, PodWatch

if TYPE_CHECKING:
    from loadgen.workload import Workload
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)


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
class KubeBackend(SchedulerRollout, ImageCacheReset):
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
            raise kind(f"Kubernetes API: {what} failed: {api_message(err)}") from None
        except HTTPError as err:  # the API server unreachable or timing out: the lab, for now
            raise LabFault(f"Kubernetes API at {self.host}: {what} failed: {err}") from None

    # --- apply ------------------------------------------------------------------------------

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

    # --- node image caches ------------------------------------------------------------------


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

    def _judge_faults(self, seen: list[dict[str, Any]],
                      requests: pd.DataFrame) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The faults that void the run, from what the fault watch saw and what the requests show,
        and the platform's fault rule as applied (for ``summary.json``). Knative: every fault the
        watch saw voids; no rule record."""
        return seen, None

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
            "platform": str(self.platform),
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
        seen, rule = self._judge_faults(faults.stop(), result.requests)
        watch.stop()
        pulls_problem = watch.read_pulls()
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
        if rule is not None:
            summary["fault_rule"] = rule
        if pulls_problem:
            summary["image_pulls"] = pulls_problem
        keep = {k: v for k, v in summary.items() if k not in ("failed", "failure")}
        keep["placements"] = {"pods": int(len(placements)), "nodes": sorted({n for n in placements["node"] if isinstance(n, str)})}
        return write_run(out_dir, requests, placements, info=keep, failed=failed, failure=failure)

    def close(self, *, failed: bool = False) -> None:
        if self.api_client is not None:
            self.api_client.close()


__all__ = ["FaultWatch", "ImageState", "KubeBackend", "KubeTimeouts", "PodRecord", "PodWatch", "fill_nodes", "void_reason"]
