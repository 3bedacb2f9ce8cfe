"""Rendering: scoretune's records -> the Kubernetes objects of the real lab (one source of truth).

The Ansible roles never write a Kubernetes manifest by hand; they apply the files that
``scoretune kube render`` writes from this module, and :class:`~testbed.kube.backend.KubeBackend`
builds its ConfigMap updates with the same functions. Everything here is pure (dicts in, dicts
out) so it is tested offline: golden files, Kubernetes OpenAPI schemas (``kubernetes-validate``)
and Knative's Service schema.

The second scheduler follows the upstream guide "Configure Multiple Schedulers"
(kubernetes/website ``content/en/docs/tasks/extend-kubernetes/configure-multiple-schedulers.md``
and its ``admin/sched/my-scheduler.yaml``): a ServiceAccount bound to ``system:kube-scheduler``
and ``system:volume-scheduler``, the ``extension-apiserver-authentication-reader`` RoleBinding in
kube-system, the KubeSchedulerConfiguration in a ConfigMap mounted at a path given to ``--config``,
and liveness/readiness probes on the secure port 10259 ``/healthz`` over HTTPS. Two deliberate
differences from the guide:

- leader election stays on, with its own lease (``resourceName``) so it never contends with the
  cluster's default scheduler; the guide's alternative is to edit the ``system:kube-scheduler``
  ClusterRole, which the API server re-reconciles, so a small Role grants the lease instead;
- the pod template carries a hash of the configuration, so a new configuration is a new
  ReplicaSet: the Deployment controller rolls it out (``maxUnavailable: 0``: the old scheduler
  keeps running until the new one is ready) and a rollback is a return to the previous hash;
- each configuration lives in its own *immutable* ConfigMap named after its hash
  (``scoretune-scheduler-config-<10 hex>``), and the pod template's volume names that ConfigMap.
  A pod's annotation and its volume then say exactly which file it mounted: the API server refuses
  any change of an immutable ConfigMap's data (kubernetes/kubernetes
  ``pkg/apis/core/validation/validation.go`` ``ValidateConfigMapUpdate``: "field is immutable when
  `immutable` is set"), and a pod's volumes cannot change either, so no lazy kubelet refresh of a
  mounted ConfigMap can put a running scheduler on a file other than the one its hash names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from testbed.autoscaler.kpa import AutoscalerConfig
from testbed.errors import ConfigError
from testbed.kube.access import driver_objects, openwhisk_driver_objects
from testbed.kube.versions import KUBE_SCHEDULER_IMAGE

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from testbed.scheduler.config import Profile

log = logging.getLogger(__name__)

SCHEDULER_NAME = "scoretune-scheduler"
CONFIG_KEY = "config.yaml"
CONFIG_HASH_ANNOTATION = "scoretune.dev/config-hash"
CONFIG_OF_LABEL = "scoretune.dev/config-of"
"""On every hashed scheduler ConfigMap: the scheduler it configures (what garbage collection lists)."""
CONFIG_VOLUME = "config-volume"
CONFIG_NAME_HEX = 10
"""Hex digits of the configuration hash in a ConfigMap's name (the annotation has all of them)."""
PART_OF = {"app.kubernetes.io/part-of": "scoretune"}
FUNCTION_LABEL = "scoretune.io/function"
"""On every function's Knative Service (and its pods): which function it is."""
SOURCE_IMAGE_ANNOTATION = "scoretune.io/source-image"
"""On a Service whose image was renamed (registry, load mode): the spec's own image name."""
SECURE_PORT = 10259
"""kube-scheduler's secure serving port (``--secure-port`` default), where /healthz lives."""


@dataclass(frozen=True)
class SchedulerSettings:
    """Where and how the second kube-scheduler runs. Defaults are the lab's; tests pin them."""

    scheduler_name: str = SCHEDULER_NAME
    namespace: str = "kube-system"
    image: str = KUBE_SCHEDULER_IMAGE
    replicas: int = 1
    cpu_request: str = "100m"
    memory_request: str = "64Mi"
    verbosity: int = 2
    leader_elect: bool = True
    on_control_plane: bool = True
    """Run on the control-plane node, so the scheduler never takes capacity from the workers whose
    packing it is tuning."""
    progress_deadline_s: int = 120

    def __post_init__(self) -> None:
        if not self.scheduler_name or self.scheduler_name == "default-scheduler":
            raise ConfigError(
                f"{self.scheduler_name!r} cannot be the second scheduler's name", field="scheduler_name"
            )
        if self.replicas < 1:
            raise ConfigError(f"must be >= 1, got {self.replicas}", field="replicas")

    @property
    def config_map_prefix(self) -> str:
        """Every hashed ConfigMap of this scheduler is named ``PREFIX<first 10 hex of the hash>``."""
        return f"{self.scheduler_name}-config-"

    def config_map_name(self, digest: str) -> str:
        """The immutable ConfigMap holding the configuration whose hash is ``digest``: same name,
        same content, so creating it again is a no-op (409 AlreadyExists) and never a change."""
        return f"{self.config_map_prefix}{digest[:CONFIG_NAME_HEX]}"

    @property
    def config_selector(self) -> str:
        """The label selector of this scheduler's hashed ConfigMaps (garbage collection)."""
        return f"{CONFIG_OF_LABEL}={self.scheduler_name}"

    @property
    def config_dir(self) -> str:
        return f"/etc/kubernetes/{self.scheduler_name}"

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.scheduler_name, "component": "scheduler", **PART_OF}

    @property
    def selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": self.scheduler_name}

    @property
    def label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))


# --- the KubeSchedulerConfiguration ----------------------------------------------------------


def scheduler_config(profile: Profile, settings: SchedulerSettings = SchedulerSettings()) -> dict[str, Any]:
    """The KubeSchedulerConfiguration document the second scheduler loads, as a dict.

    The profile is renamed to the settings' scheduler name (a profile is weights and arguments;
    which scheduler carries it is a deployment detail), converted by the scheduler package
    (``config_to_dict``, the same code that exports tuned weights), given
    this scheduler's leader-election lease, and validated with ``validate_config_dict``. Any error
    raises :class:`ConfigError` listing every problem, before anything reaches a cluster.
    """
    from testbed.scheduler.config import SchedulerConfig, config_to_dict, validate_config_dict

    if profile.scheduler_name != settings.scheduler_name:
        profile = dataclasses.replace(profile, scheduler_name=settings.scheduler_name)
    # Only this profile: ``config_for_profile`` would add an untouched ``default-scheduler`` profile,
    # and a second scheduler carrying that name would race the cluster's own for every ordinary pod.
    doc = config_to_dict(SchedulerConfig(profiles=(profile,)))
    doc["leaderElection"] = {
        "leaderElect": settings.leader_elect,
        "resourceLock": "leases",
        "resourceName": settings.scheduler_name,
        "resourceNamespace": settings.namespace,
    }
    problems = validate_config_dict(doc)
    if problems:
        raise ConfigError("invalid KubeSchedulerConfiguration: " + "; ".join(problems), field="profile")
    names = [p.get("schedulerName") for p in doc.get("profiles", [])]
    if names != [settings.scheduler_name]:
        raise ConfigError(
            f"expected exactly one profile named {settings.scheduler_name!r}, got {names}", field="profiles"
        )
    return doc


def dump_yaml(doc: Any) -> str:
    """Deterministic YAML (key order kept, block style): golden files and hashes depend on it."""
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def config_text(doc: dict[str, Any]) -> str:
    return dump_yaml(doc)


def config_hash(text: str) -> str:
    """The pod-template annotation value for a configuration: equal texts give equal hashes, so
    re-applying a configuration is a no-op and rolling back restores the previous ReplicaSet."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- the scheduler's objects ----------------------------------------------------------------


def _meta(name: str, settings: SchedulerSettings, *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = settings.namespace
    meta["labels"] = dict(settings.labels)
    return meta


def _sa_subject(settings: SchedulerSettings) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": settings.scheduler_name, "namespace": settings.namespace}]


def rbac_objects(settings: SchedulerSettings = SchedulerSettings()) -> list[dict[str, Any]]:
    """ServiceAccount, the two ClusterRoleBindings and the auth-reader RoleBinding of the upstream
    guide, plus a Role and RoleBinding for this scheduler's own leader-election lease."""
    name = settings.scheduler_name
    lease_role = f"{name}-leader-election"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, settings)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(f"{name}-as-kube-scheduler", settings, namespaced=False),
            "subjects": _sa_subject(settings),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kube-scheduler"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(f"{name}-as-volume-scheduler", settings, namespaced=False),
            "subjects": _sa_subject(settings),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:volume-scheduler"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {**_meta(f"{name}-extension-apiserver-authentication-reader", settings), "namespace": "kube-system"},
            "subjects": _sa_subject(settings),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(lease_role, settings),
            "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": [name],
                    "verbs": ["get", "update", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(lease_role, settings),
            "subjects": _sa_subject(settings),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": lease_role},
        },
    ]


def config_map(text: str, settings: SchedulerSettings = SchedulerSettings()) -> dict[str, Any]:
    """The immutable ConfigMap holding the configuration text under ``config.yaml``, named and
    annotated with its hash (one per configuration; see the module docstring)."""
    digest = config_hash(text)
    meta = _meta(settings.config_map_name(digest), settings)
    meta["labels"][CONFIG_OF_LABEL] = settings.scheduler_name
    meta["annotations"] = {CONFIG_HASH_ANNOTATION: digest}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "immutable": True,
        "data": {CONFIG_KEY: text},
    }


def config_volume_patch(digest: str, config_map_name: str) -> dict[str, Any]:
    """The strategic merge patch that puts the Deployment on configuration ``digest``: the hash on
    the pod template and its config volume on ``config_map_name`` (``SchedulerSettings.
    config_map_name(digest)``, or the name a rollback returns to). Volumes merge by ``name``, so
    the other fields of the volume and of the pod stay as rendered."""
    return {"spec": {"template": {
        "metadata": {"annotations": {CONFIG_HASH_ANNOTATION: digest}},
        "spec": {"volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": config_map_name}}]},
    }}}


def mounted_config_map(pod_spec: Any) -> str | None:
    """The ConfigMap a pod spec (dict or client model) mounts as the scheduler's config volume."""
    volumes = pod_spec.get("volumes") if isinstance(pod_spec, dict) else getattr(pod_spec, "volumes", None)
    for vol in volumes or []:
        name = vol.get("name") if isinstance(vol, dict) else getattr(vol, "name", None)
        if name != CONFIG_VOLUME:
            continue
        cm = vol.get("configMap") if isinstance(vol, dict) else getattr(vol, "config_map", None)
        if cm is None:
            return None
        return cm.get("name") if isinstance(cm, dict) else getattr(cm, "name", None)
    return None


def _probe(initial_delay_s: int | None) -> dict[str, Any]:
    probe: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": SECURE_PORT, "scheme": "HTTPS"}}
    if initial_delay_s is not None:
        probe["initialDelaySeconds"] = initial_delay_s
    probe["periodSeconds"] = 5
    probe["failureThreshold"] = 3
    return probe


def deployment(config_digest: str, settings: SchedulerSettings = SchedulerSettings()) -> dict[str, Any]:
    """The scheduler Deployment: the official image, flags as in the upstream guide (``--config``),
    probes on 10259 /healthz over HTTPS, the configuration hash on the pod template and the config
    volume on that hash's ConfigMap."""
    pod_spec: dict[str, Any] = {
        "serviceAccountName": settings.scheduler_name,
        "priorityClassName": "system-cluster-critical",
        "containers": [
            {
                "name": "kube-scheduler",
                "image": settings.image,
                "command": [
                    "/usr/local/bin/kube-scheduler",
                    f"--config={settings.config_dir}/{CONFIG_KEY}",
                    f"--v={settings.verbosity}",
                ],
                "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
                "livenessProbe": _probe(15),
                "readinessProbe": _probe(None),
                "resources": {"requests": {"cpu": settings.cpu_request, "memory": settings.memory_request}},
                "securityContext": {"privileged": False, "allowPrivilegeEscalation": False},
                "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": settings.config_dir, "readOnly": True}],
            }
        ],
        "hostNetwork": False,
        "hostPID": False,
        "volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": settings.config_map_name(config_digest)}}],
    }
    if settings.on_control_plane:
        pod_spec["nodeSelector"] = {"node-role.kubernetes.io/control-plane": ""}
        pod_spec["tolerations"] = [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(settings.scheduler_name, settings),
        "spec": {
            "replicas": settings.replicas,
            "progressDeadlineSeconds": settings.progress_deadline_s,
            "revisionHistoryLimit": 5,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": dict(settings.selector)},
            "template": {
                "metadata": {
                    "labels": dict(settings.labels),
                    "annotations": {CONFIG_HASH_ANNOTATION: config_digest},
                },
                "spec": pod_spec,
            },
        },
    }


def scheduler_objects(profile: Profile, settings: SchedulerSettings = SchedulerSettings()) -> list[dict[str, Any]]:
    """RBAC, ConfigMap and Deployment for ``profile``, in apply order."""
    text = config_text(scheduler_config(profile, settings))
    return [*rbac_objects(settings), config_map(text, settings), deployment(config_hash(text), settings)]


# --- Knative ---------------------------------------------------------------------------------


def knative_features() -> dict[str, Any]:
    """The keys scoretune needs in ``config-features`` (knative/serving
    ``config/core/configmaps/features.yaml``): ``kubernetes.podspec-schedulername`` lets a Service
    name its scheduler (while the flag is ``disabled`` the webhook rejects a Service that sets the
    field, ``must not set the field(s)``: ``PodSpecMask`` in ``pkg/apis/serving/fieldmask.go``), and ``kubernetes.podspec-fieldref`` lets the runtime learn its node through the
    downward API (``NODE_NAME`` from ``spec.nodeName``) for the ``X-Scoretune-Node`` header. Applied
    with a merge, so Knative's other keys (and ``_example``) are kept."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-features", "namespace": "knative-serving", "labels": dict(PART_OF)},
        "data": {
            "kubernetes.podspec-fieldref": "enabled",
            "kubernetes.podspec-schedulername": "enabled",
        },
    }


def knative_network() -> dict[str, Any]:
    """``config-network``: route Knative ingress through Kourier (net-kourier's install docs)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-network", "namespace": "knative-serving", "labels": dict(PART_OF)},
        "data": {"ingress-class": "kourier.ingress.networking.knative.dev"},
    }


def _duration(seconds: float) -> str:
    return f"{seconds:g}s"


def knative_autoscaler(cfg: AutoscalerConfig | None = None) -> dict[str, Any]:
    """``config-autoscaler`` with every key Knative parses written out (knative/serving
    ``pkg/autoscaler/config/config.go`` ``NewConfigFromMap``), from the same
    :class:`~testbed.autoscaler.kpa.AutoscalerConfig` the simulator's KPA runs: the lab then
    scales exactly as the model does, whatever defaults the installed release carries."""
    c = cfg or AutoscalerConfig()
    data = {
        "pod-autoscaler-class": "kpa.autoscaling.knative.dev",
        "enable-scale-to-zero": str(c.enable_scale_to_zero).lower(),
        "allow-zero-initial-scale": str(c.allow_zero_initial_scale).lower(),
        "max-scale-up-rate": f"{c.max_scale_up_rate:g}",
        "max-scale-down-rate": f"{c.max_scale_down_rate:g}",
        "container-concurrency-target-percentage": f"{100 * c.container_concurrency_target_fraction:g}",
        "container-concurrency-target-default": f"{c.container_concurrency_target_default:g}",
        "requests-per-second-target-default": f"{c.rps_target_default:g}",
        "target-burst-capacity": f"{c.target_burst_capacity:g}",
        "panic-window-percentage": f"{c.panic_window_percentage:g}",
        "activator-capacity": f"{c.activator_capacity:g}",
        "panic-threshold-percentage": f"{c.panic_threshold_percentage:g}",
        "initial-scale": str(c.initial_scale),
        "max-scale": str(c.max_scale),
        "max-scale-limit": "0",
        "stable-window": _duration(c.stable_window_s),
        "scale-down-delay": _duration(c.scale_down_delay_s),
        "scale-to-zero-grace-period": _duration(c.scale_to_zero_grace_period_s),
        "scale-to-zero-pod-retention-period": _duration(c.scale_to_zero_pod_retention_period_s),
    }
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-autoscaler", "namespace": "knative-serving", "labels": dict(PART_OF)},
            "data": data}


def knative_domain(domain: str = "scoretune.lab") -> dict[str, Any]:
    """``config-domain``: every route is ``FUNCTION.NAMESPACE.DOMAIN`` (an empty value selects all
    Services; knative/serving ``config/core/configmaps/domain.yaml``). The kube backend sends that
    name as the Host header to Kourier, so no DNS is needed."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-domain", "namespace": "knative-serving", "labels": dict(PART_OF)},
        "data": {domain: ""},
    }


IMAGE_MODES = ("prebuilt", "push", "load")
"""How the nodes get the function images (ansible/roles/function_images): ``prebuilt`` pulls the
images the specs name, ``push`` pulls them from a registry the user names (after ``scoretune
functions build --push REGISTRY``), ``load`` imports a ``docker save`` archive into every node's
containerd, with no registry at all."""

LOAD_REGISTRY = "scoretune.local"
"""The registry part of every image name in ``load`` mode. No such registry exists: the name only
has to be one Knative skips when it resolves tags (see :func:`knative_deployment`)."""

KNATIVE_SKIP_TAG_RESOLVING_DEFAULT = ("kind.local", "ko.local", "dev.local")
"""knative/serving ``pkg/deployment/config.go`` ``defaultConfig()``: the registries whose tags are
not resolved when the key is absent. Setting the key replaces this set, so it is kept."""

_REGISTRY_RE = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*")


@dataclass(frozen=True)
class ImageSource:
    """Where the function images come from, as one record the render, the roles and the backend
    share (``function_images_mode`` / ``_registry`` / ``_registry_insecure``).

    mode: one of :data:`IMAGE_MODES`.
    registry: ``HOST[:PORT][/PATH]`` the images are pushed to (``push``: required) or published
        under (``prebuilt``: optional, default the specs' own names); ``load`` uses
        :data:`LOAD_REGISTRY` and takes none.
    insecure: the registry speaks plain HTTP (``push``): containerd gets a ``hosts.toml`` for it
        and Knative skips tag resolution for it (its controller resolves over HTTPS).
    """

    mode: str = "prebuilt"
    registry: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.mode not in IMAGE_MODES:
            raise ConfigError(f"unknown image mode {self.mode!r}; one of {', '.join(IMAGE_MODES)}", field="--image-mode")
        registry = self.registry or None
        object.__setattr__(self, "registry", registry)
        if registry is not None and not _REGISTRY_RE.fullmatch(registry.rstrip("/")):
            raise ConfigError(f"{registry!r} is not HOST[:PORT][/PATH] (no scheme, lower case)", field="--registry")
        if self.mode == "push" and registry is None:
            raise ConfigError("image mode push needs the registry to push to", field="--registry")
        if self.mode == "load" and registry is not None:
            raise ConfigError(f"image mode load uses no registry (the images are named {LOAD_REGISTRY}/...); "
                              f"got {registry!r}", field="--registry")
        if self.insecure and self.mode != "push":
            raise ConfigError("a plain-HTTP (insecure) registry only applies to image mode push", field="--insecure-registry")

    @property
    def image_registry(self) -> str | None:
        """The registry the rendered Services name (None: the specs' own images)."""
        return LOAD_REGISTRY if self.mode == "load" else self.registry

    @property
    def registry_host(self) -> str | None:
        """``HOST[:PORT]`` of :attr:`image_registry`: what Knative and containerd match on."""
        reg = self.image_registry
        return reg.split("/", 1)[0] if reg else None

    def skip_tag_resolving(self) -> list[str]:
        """Knative's defaults, the ``load`` registry (always: a later ``functions.yml`` may switch to
        ``load`` without re-running ``knative.yml``) and a plain-HTTP push registry."""
        names = [*KNATIVE_SKIP_TAG_RESOLVING_DEFAULT, LOAD_REGISTRY]
        if self.insecure and self.registry_host and self.registry_host not in names:
            names.append(self.registry_host)
        return names


def knative_deployment(source: ImageSource = ImageSource()) -> dict[str, Any]:
    """``config-deployment`` with ``registries-skipping-tag-resolving`` (knative/serving
    ``config/core/configmaps/deployment.yaml``, parsed by ``pkg/deployment/config.go``).

    Knative's controller resolves every image tag to a digest before it creates a revision's
    Deployment, unless the image's registry (``name.Tag.Registry.RegistryStr()``: host and port,
    ``pkg/reconciler/revision/resolve.go``) is in this set; a failed resolution leaves the revision
    ``ContainerMissing`` and the Service never Ready. ``load`` images have no registry to ask, a
    plain-HTTP registry is not reachable over HTTPS: both are listed. Merged into the ConfigMap
    (``queue-sidecar-image``, which must not be empty, stays as serving-core.yaml set it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "config-deployment", "namespace": "knative-serving", "labels": dict(PART_OF)},
        "data": {"registries-skipping-tag-resolving": ",".join(source.skip_tag_resolving())},
    }


def kourier_nodeport(http_nodeport: int = 31080, https_nodeport: int = 31443) -> dict[str, Any]:
    """Kourier's gateway Service as a NodePort (net-kourier ships it as a LoadBalancer, which a bare
    kubeadm cluster has no provider for); merged into the Service ``kourier`` in kourier-system.
    ``externalTrafficPolicy: Local``: a request entering a node's NodePort goes to the gateway on
    that node, never on to another one, so traffic enters where the gateway is pinned (the control
    plane, :func:`data_plane_pins`; the kube backend's ingress URL names that node)."""
    for name, port in (("http_nodeport", http_nodeport), ("https_nodeport", https_nodeport)):
        if not 30000 <= port <= 32767:
            raise ConfigError(f"must be in the NodePort range 30000-32767, got {port}", field=name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kourier", "namespace": "kourier-system"},
        "spec": {
            "type": "NodePort",
            "externalTrafficPolicy": "Local",
            "ports": [
                {"name": "http2", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": http_nodeport},
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443, "nodePort": https_nodeport},
            ],
        },
    }


CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
"""The label and taint kubeadm puts on control-plane nodes (kubeadm's constants.LabelNodeRoleControlPlane)."""

DATA_PLANE_DEPLOYMENTS: tuple[tuple[str, str], ...] = (
    ("knative-serving", "activator"),
    ("knative-serving", "autoscaler"),
    ("knative-serving", "controller"),
    ("knative-serving", "webhook"),
    ("knative-serving", "net-kourier-controller"),
    ("kourier-system", "3scale-kourier-gateway"),
)
"""The Deployments of Knative Serving (config/core/deployments/) and Kourier (kourier.yaml)."""

DATA_PLANE_HPAS = ("activator", "webhook")
"""Knative Serving's HorizontalPodAutoscalers (config/core/deployments/activator-hpa.yaml: 1-20
replicas; webhook-hpa.yaml: 1-5), both in knative-serving."""


def data_plane_pins(replicas: int = 1, node_selector: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Patches that keep the data plane off the nodes whose placements are being tuned and at a
    fixed size: every Deployment of ``DATA_PLANE_DEPLOYMENTS`` on the nodes ``node_selector`` picks
    (default: the control plane, whose NoSchedule taint it tolerates), the two HPAs at
    ``replicas`` (min = max) and the gateway at ``replicas``. Otherwise the activator's HPA and
    default-scheduler put the activator, the gateway and the controllers on the workers, and a
    run's latency depends on where they landed."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 20:
        raise ConfigError(f"must be an integer from 1 to 20 (the activator HPA's upstream maximum), got {replicas!r}",
                          field="data_plane_replicas")
    selector = {CONTROL_PLANE_ROLE: ""} if node_selector is None else dict(node_selector)
    if not selector:
        raise ConfigError("must name at least one label, or the data plane is not pinned", field="data_plane_node_selector")
    tolerations = [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}]
    patches: list[dict[str, Any]] = []
    for namespace, name in DATA_PLANE_DEPLOYMENTS:
        spec: dict[str, Any] = {"template": {"spec": {"nodeSelector": selector, "tolerations": tolerations}}}
        if namespace == "kourier-system":
            spec["replicas"] = replicas
        patches.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
                        "spec": spec})
    for name in DATA_PLANE_HPAS:
        patches.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                        "metadata": {"name": name, "namespace": "knative-serving"},
                        "spec": {"minReplicas": replicas, "maxReplicas": replicas}})
    return patches


def knative_services(
    specs: Iterable[FunctionSpec],
    *,
    scheduler_name: str = SCHEDULER_NAME,
    namespace: str = "default",
    registry: str | None = None,
) -> list[dict[str, Any]]:
    """One Knative Service per function, built by the function suite's own ``service_manifest``
    (with ``NODE_NAME`` from the downward API, so responses name their node); ``registry`` moves
    every image under another registry, as ``scoretune functions build --registry`` pushes them."""
    from functions.build import image_ref
    from functions.knative import service_manifest

    services = []
    for spec in specs:
        svc = service_manifest(spec, scheduler_name=scheduler_name, namespace=namespace,
                               image=image_ref(spec, registry), node_name_env=True)
        # the label the lab finds its functions by (KubeBackend, ansible/roles/scoretune_functions)
        svc["metadata"].setdefault("labels", {})[FUNCTION_LABEL] = spec.name
        if image_ref(spec, registry) != spec.image:
            # what ``scoretune functions build`` tags locally: the load mode re-tags it (function_images)
            svc["metadata"].setdefault("annotations", {})[SOURCE_IMAGE_ANNOTATION] = spec.image
        services.append(svc)
    return services


# --- node image state (KubeBackend.reset) ------------------------------------------------------

IMAGE_TOOL_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
"""A shell for the image-state pod; ``crictl`` itself is the node's own (the pinned cri-tools
release ansible/roles/kubernetes_packages installs at :data:`CRICTL_PATH`), mounted read-only.
Not a function image, so pulling it once per node changes no cache the experiment measures."""
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
CRICTL_PATH = "/usr/local/bin/crictl"
"""The node's crictl, pinned by ansible/roles/kubernetes_packages (its ``kubernetes_packages_crictl_dir``)."""
IMAGE_STATE_LABEL = "scoretune.io/image-state"

IMAGE_STATE_SCRIPT = """set -u
export CONTAINER_RUNTIME_ENDPOINT=unix:///run/containerd/containerd.sock
export IMAGE_SERVICE_ENDPOINT=unix:///run/containerd/containerd.sock
c=/scoretune/crictl
t=${TMPDIR:-/tmp}
refs() {
  $c images --verbose >$t/images 2>$t/images.err || { echo "list-failed $(tr '\\n' ' ' <$t/images.err)"; exit 1; }
  awk '/^ID: /{id=$2} /^(RepoTags|RepoDigests): /{r=$2; sub(/@.*/, "", r); if (match(r, /:[^\\/]*$/)) r=substr(r, 1, RSTART-1); print id, r, $2}' $t/images >$t/refs
}
refs
for r in $SCORETUNE_PURGE; do
  for id in $(awk -v r="$r" '$2 == r {print $1}' $t/refs | sort -u); do
    $c rmi "$id" >/dev/null 2>&1 || echo "purge-failed $r $id"
  done
done
for i in $SCORETUNE_PULL; do
  $c inspecti "$i" >/dev/null 2>&1 || $c pull "$i" >/dev/null 2>&1 || echo "pull-failed $i"
done
for i in $SCORETUNE_PULL; do
  if $c inspecti "$i" >/dev/null 2>&1; then echo "present $i"; else echo "absent $i"; fi
done
refs
awk -v repos=" $SCORETUNE_REPOS " 'index(repos, " " $2 " ") {print "holds", $2, $3}' $t/refs
echo done
"""
"""Purge every image of the purged repositories by ID (tags and digests alike: CRI RemoveImage
drops an image with all its references), pull the references a warm node must hold, then report:
``present``/``absent`` per pulled reference, ``holds REPOSITORY REFERENCE`` for every reference of
a function repository still on the node, ``purge-failed``/``pull-failed`` lines, and ``done``.
The pod's log is the node's image state after the reset (testbed.kube.images.parse_report)."""


def image_state_pod(name: str, node: str, *, repositories: Sequence[str], pull: Sequence[str],
                    purge: Sequence[str], token: str, namespace: str = "kube-system",
                    tool_image: str = IMAGE_TOOL_IMAGE) -> dict[str, Any]:
    """One pod on ``node`` (``spec.nodeName``: no scheduler involved, not even the one under test)
    that brings its containerd image cache to the declared state through the CRI (``crictl``) and
    prints what it holds. Privileged and root for the containerd socket; it tolerates every taint
    so a cordoned or tainted node can be reset too; it requests almost nothing and is deleted
    before the run, so the run's cluster snapshot does not see it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {IMAGE_STATE_LABEL: token, **PART_OF}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "priorityClassName": "system-node-critical",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "crictl",
                "image": tool_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", IMAGE_STATE_SCRIPT],
                "env": [
                    {"name": "SCORETUNE_REPOS", "value": " ".join(repositories)},
                    {"name": "SCORETUNE_PULL", "value": " ".join(pull)},
                    {"name": "SCORETUNE_PURGE", "value": " ".join(purge)},
                ],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "securityContext": {"privileged": True, "runAsUser": 0},
                "volumeMounts": [
                    {"name": "crictl", "mountPath": "/scoretune/crictl", "readOnly": True},
                    {"name": "containerd", "mountPath": CONTAINERD_SOCKET},
                ],
            }],
            "volumes": [
                {"name": "crictl", "hostPath": {"path": CRICTL_PATH, "type": "File"}},
                {"name": "containerd", "hostPath": {"path": CONTAINERD_SOCKET, "type": "Socket"}},
            ],
        },
    }


# --- OpenWhisk -------------------------------------------------------------------------------


def openwhisk_pod_template(scheduler_name: str = SCHEDULER_NAME, *, namespace: str = "openwhisk") -> dict[str, Any]:
    """A ConfigMap with the base Pod OpenWhisk's KubernetesContainerFactory builds action pods from.

    apache/openwhisk ``core/invoker/.../kubernetes/WhiskPodBuilder.scala`` starts every action pod
    from ``whisk.kubernetes.pod-template`` when it is set (a ``file:`` URL or inline YAML,
    ``ConfigMapValue``) and then only adds its name, labels, the required ``openwhisk-role``
    node affinity and the action container; ``spec.schedulerName`` from the template is kept, so
    action pods go through the tuned profile instead of ``default-scheduler``.
    """
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": dict(PART_OF)},
                "spec": {"schedulerName": scheduler_name}}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "scoretune-action-pod-template", "namespace": namespace, "labels": dict(PART_OF)},
        "data": {"pod-template.yaml": dump_yaml(template)},
    }


OPENWHISK_TEMPLATE_DIR = "/etc/scoretune"


OPENWHISK_CORE: tuple[tuple[str, str], ...] = (
    ("StatefulSet", "controller"), ("StatefulSet", "kafka"), ("StatefulSet", "zookeeper"),
    ("Deployment", "couchdb"), ("Deployment", "redis"), ("Deployment", "apigateway"), ("Deployment", "nginx"),
)
"""The chart's components that run besides the invokers (openwhisk-deploy-kube
``helm/openwhisk/templates/*-pod.yaml`` at the pinned commit), by kind and name suffix; the alarm
and kafka providers are not among them: ansible/roles/openwhisk turns them off
(``providers.*.enabled: false``)."""


def openwhisk_core_pins(release: str = "owdev", *, namespace: str = "openwhisk") -> list[dict[str, Any]]:
    """Patches that *require* every core component on a node labelled ``openwhisk-role=core`` (the
    control plane, whose NoSchedule taint they tolerate). The chart only *prefers* non-invoker nodes
    (``_affinity.tpl``, "only prefer because of single node clusters"), so Kafka, CouchDB, the
    controller and nginx could share the invoker nodes with the action pods being placed."""
    pin = {"nodeSelector": {"openwhisk-role": "core"},
           "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"},
                           {"key": "openwhisk-role", "operator": "Equal", "value": "core", "effect": "NoSchedule"}]}
    return [{"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": f"{release}-{name}", "namespace": namespace},
             "spec": {"template": {"spec": dict(pin)}}} for kind, name in OPENWHISK_CORE]


def openwhisk_invoker_patch(release: str = "owdev", *, namespace: str = "openwhisk") -> dict[str, Any]:
    """A strategic-merge patch of the chart's invoker StatefulSet (``helm/openwhisk/templates/
    invoker-pod.yaml``, container ``invoker``): mount the pod template and point the invoker at it.

    ``CONFIG_whisk_kubernetes_podTemplate`` becomes ``-Dwhisk.kubernetes.pod-template=...`` through
    OpenWhisk's ``common/scala/transformEnvironment.sh`` (``_`` -> ``.``, camelCase -> kebab-case).
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"{release}-invoker", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "invoker",
                            "env": [
                                {
                                    "name": "CONFIG_whisk_kubernetes_podTemplate",
                                    "value": f"file:{OPENWHISK_TEMPLATE_DIR}/pod-template.yaml",
                                }
                            ],
                            "volumeMounts": [
                                {"name": "scoretune-pod-template", "mountPath": OPENWHISK_TEMPLATE_DIR, "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "scoretune-pod-template", "configMap": {"name": "scoretune-action-pod-template"}}
                    ],
                }
            }
        },
    }


# --- writing the files the roles apply -------------------------------------------------------

RENDER_LAYOUT = {
    "scheduler/rbac.yaml": "ServiceAccount, ClusterRoleBindings, RoleBindings, lease Role",
    "scheduler/configmap.yaml": "the KubeSchedulerConfiguration",
    "scheduler/deployment.yaml": "the second kube-scheduler",
    "driver/rbac.yaml": "the experiment host's ServiceAccount, its roles, the image-state pods' namespace",
    "knative/config-features.yaml": "Knative feature flags scoretune needs",
    "knative/config-network.yaml": "Kourier as the ingress class",
    "knative/config-autoscaler.yaml": "the KPA's settings, every key explicit (the simulator's)",
    "knative/config-domain.yaml": "the routes' domain",
    "knative/config-deployment.yaml": "registries whose image tags Knative does not resolve",
    "knative/kourier-nodeport.yaml": "Kourier's gateway on a NodePort",
    "knative/data-plane.yaml": "Knative's and Kourier's Deployments pinned, their HPAs at a fixed size",
    "functions/services.yaml": "one Knative Service per function",
    "openwhisk/pod-template.yaml": "the action pod template (schedulerName)",
    "openwhisk/invoker-patch.yaml": "mounts the template into the invoker",
    "openwhisk/core-pins.yaml": "OpenWhisk's core components required on the core node",
    "openwhisk/driver-rbac.yaml": "the experiment host's Role in OpenWhisk's namespace",
}
"""Every file ``render_lab`` writes, relative to its output directory; the roles name these paths."""


def dump_all(objects: Sequence[dict[str, Any]]) -> str:
    return "---\n".join(dump_yaml(o) for o in objects)


def lab_documents(
    profile: Profile,
    specs: Sequence[FunctionSpec],
    *,
    settings: SchedulerSettings = SchedulerSettings(),
    namespace: str = "default",
    openwhisk_namespace: str = "openwhisk",
    openwhisk_release: str = "owdev",
    registry: str | None = None,
    domain: str = "scoretune.lab",
    kourier_http_nodeport: int = 31080,
    images: ImageSource | None = None,
    data_plane_replicas: int = 1,
) -> dict[str, list[dict[str, Any]]]:
    """Every object of the lab, keyed by the file it is written to (``RENDER_LAYOUT``).

    ``images`` says where the function images come from; ``registry`` alone is the older form of
    ``ImageSource("prebuilt", registry)``."""
    if images is None:
        images = ImageSource("prebuilt", registry)
    elif registry is not None and registry != images.registry:
        raise ConfigError(f"registry {registry!r} contradicts the image source's {images.registry!r}", field="--registry")
    sched = scheduler_objects(profile, settings)
    return {
        "scheduler/rbac.yaml": sched[:-2],
        "scheduler/configmap.yaml": [sched[-2]],
        "scheduler/deployment.yaml": [sched[-1]],
        "driver/rbac.yaml": driver_objects(settings.scheduler_name, settings.namespace, namespace),
        "knative/config-features.yaml": [knative_features()],
        "knative/config-network.yaml": [knative_network()],
        "knative/config-autoscaler.yaml": [knative_autoscaler()],
        "knative/config-domain.yaml": [knative_domain(domain)],
        "knative/config-deployment.yaml": [knative_deployment(images)],
        "knative/kourier-nodeport.yaml": [kourier_nodeport(kourier_http_nodeport)],
        "knative/data-plane.yaml": data_plane_pins(data_plane_replicas),
        "functions/services.yaml": knative_services(specs, scheduler_name=settings.scheduler_name, namespace=namespace,
                                                    registry=images.image_registry),
        "openwhisk/pod-template.yaml": [openwhisk_pod_template(settings.scheduler_name, namespace=openwhisk_namespace)],
        "openwhisk/invoker-patch.yaml": [openwhisk_invoker_patch(openwhisk_release, namespace=openwhisk_namespace)],
        "openwhisk/core-pins.yaml": openwhisk_core_pins(openwhisk_release, namespace=openwhisk_namespace),
        "openwhisk/driver-rbac.yaml": openwhisk_driver_objects(openwhisk_release, openwhisk_namespace),
    }


def write_documents(documents: dict[str, list[dict[str, Any]]], out_dir: str | Path) -> dict[str, list[str]]:
    """Write each file only if its text changed (so Ansible can report "changed" truthfully) and
    return ``{"written": [...], "unchanged": [...]}``."""
    out = Path(out_dir)
    written: list[str] = []
    unchanged: list[str] = []
    for rel, objects in documents.items():
        path = out / rel
        text = dump_all(objects)
        if path.exists() and path.read_text() == text:
            unchanged.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written.append(rel)
    log.debug("rendered %d file(s) to %s (%d unchanged)", len(written), out, len(unchanged))
    return {"written": written, "unchanged": unchanged}


def summary_json(result: dict[str, list[str]]) -> str:
    return json.dumps({**result, "changed": bool(result["written"])}, sort_keys=True)


__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "CONFIG_OF_LABEL",
    "CONFIG_VOLUME",
    "FUNCTION_LABEL",
    "CONFIG_KEY",
    "IMAGE_MODES",
    "LOAD_REGISTRY",
    "ImageSource",
    "RENDER_LAYOUT",
    "SOURCE_IMAGE_ANNOTATION",
    "IMAGE_STATE_LABEL",
    "IMAGE_TOOL_IMAGE",
    "image_state_pod",
    "SCHEDULER_NAME",
    "SchedulerSettings",
    "config_hash",
    "config_map",
    "config_volume_patch",
    "data_plane_pins",
    "mounted_config_map",
    "config_text",
    "deployment",
    "dump_all",
    "dump_yaml",
    "knative_autoscaler",
    "knative_deployment",
    "knative_domain",
    "knative_features",
    "knative_network",
    "knative_services",
    "kourier_nodeport",
    "lab_documents",
    "openwhisk_core_pins",
    "openwhisk_invoker_patch",
    "openwhisk_pod_template",
    "rbac_objects",
    "scheduler_config",
    "scheduler_objects",
    "write_documents",
]
