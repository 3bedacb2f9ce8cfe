"""A function spec as Knative sees it: the ``serving.knative.dev/v1`` Service that deploys it, and
the Pod that a revision of that Service creates — the object kube-scheduler actually scores.

Both are plain dicts in the API's JSON form, so the scheduler (``pod_from_k8s``) and the
simulator read :func:`revision_pod` exactly as they would read a pod fetched from a cluster.

The pod follows Knative Serving's revision reconciler at snapshot 98e5ef90 (knative/serving):

- ``pkg/reconciler/revision/resources/deploy.go``: ``makePodSpec`` / ``makeServingContainer`` /
  ``makeContainer`` (user container: ``user-port`` 8080, env ``PORT`` + ``K_REVISION``,
  ``K_CONFIGURATION``, ``K_SERVICE``, the pre-stop ``/wait-for-drain`` hook on the queue admin port
  8022, HTTP readiness probes moved to queue-proxy), ``BuildPodSpec``
  (``terminationGracePeriodSeconds`` = the revision timeout) and ``makePreferSpreadRevisionOverNodes``
  (the default ``prefer-spread-revision-over-nodes`` affinity: a *preferred* pod anti-affinity of
  weight 100 on ``kubernetes.io/hostname`` for pods of the same revision);
- ``pkg/reconciler/revision/resources/queue.go``: ``makeQueueContainer`` / ``createQueueResources``
  (queue-proxy requests only ``cpu: 25m`` — ``pkg/deployment/config.go``
  ``QueueSidecarCPURequestDefault`` — and has no limits unless the ``queueproxy.resource-defaults``
  feature is enabled; ports 9090, 9091, 8012, 8112; its readiness probe);
- ``pkg/reconciler/revision/resources/meta.go``: ``makeLabels`` (the revision's labels plus
  ``serving.knative.dev/revision``/``revisionUID`` and ``app`` = revision name), ``podAnnotations``
  (no ``autoscaling.knative.dev/*``; ``kubectl.kubernetes.io/default-container``);
- ``pkg/reconciler/configuration/resources/revision.go``: revision name ``<config>-00001`` and the
  labels ``serving.knative.dev/{configuration,configurationGeneration,configurationUID,service,serviceUID}``;
- ``pkg/apis/serving/v1/revision_defaults.go`` and ``pkg/apis/config/defaults.go``: container name
  ``user-container``, ``timeoutSeconds`` 300, ``enableServiceLinks: false``.

Fields the API server adds on create are included as a pod read back from a cluster has them
(``schedulerName: default-scheduler``, ``restartPolicy``, ``dnsPolicy``, the DefaultTolerationSeconds
admission plugin's two NoExecute tolerations, ``status.qosClass``). queue-proxy's environment is
abridged to the variables that describe the revision (the logging, TLS and observability blobs
are left out); nothing a scheduler reads is omitted.

Validation of rendered Services (Knative's webhook rules and the CRD schema) is in
:mod:`functions.knative_validation`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from functions.spec import FunctionSpec

API_VERSION = "serving.knative.dev/v1"
SERVING = "serving.knative.dev"
AUTOSCALING = "autoscaling.knative.dev"
KPA_CLASS = "kpa.autoscaling.knative.dev"

USER_CONTAINER = "user-container"  # config.DefaultUserContainerName
QUEUE_CONTAINER = "queue-proxy"  # resources.QueueContainerName
USER_PORT = 8080  # v1.DefaultUserPort
USER_PORT_NAME = "user-port"  # v1.UserPortName
QUEUE_HTTP_PORT = 8012  # networking.BackendHTTPPort
QUEUE_HTTPS_PORT = 8112  # networking.BackendHTTPSPort
QUEUE_ADMIN_PORT = 8022  # networking.QueueAdminPort
AUTOSCALING_METRICS_PORT = 9090  # networking.AutoscalingQueueMetricsPort
USER_METRICS_PORT = 9091  # networking.UserQueueMetricsPort
DRAIN_PATH = "/wait-for-drain"  # queue.RequestQueueDrainPath
QUEUE_CPU_REQUEST = "25m"  # deployment.QueueSidecarCPURequestDefault
REVISION_TIMEOUT_S = 300  # config.DefaultRevisionTimeoutSeconds
HOSTNAME_LABEL = "kubernetes.io/hostname"  # corev1.LabelHostname

# The queue-proxy image a release installs (config-deployment ``queue-sidecar-image``). Releases
# pin it by digest; the tag names the release this project targets. Its size is an estimate of
# the ko-built static Go image, for clusters that list it among a node's cached images.
QUEUE_PROXY_IMAGE = "gcr.io/knative-releases/knative.dev/serving/cmd/queue:v1.19.0"
QUEUE_PROXY_IMAGE_SIZE_BYTES = 30 * 2**20

READINESS_PATH = "/readyz"
LIVENESS_PATH = "/healthz"
PART_OF = "scoretune"


def _number(value: float) -> str:
    """Annotation spelling of a number: ``70`` rather than ``70.0``, else the shortest float."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _duration(seconds: float) -> str:
    """A Go ``time.ParseDuration`` string (``60s``, ``1.5s``)."""
    return f"{_number(seconds)}s"


def autoscaling_annotations(spec: FunctionSpec) -> dict[str, str]:
    """The spec's autoscaling as ``autoscaling.knative.dev/*`` revision-template annotations
    (keys from ``pkg/apis/autoscaling/register.go``). ``max-scale`` 0 means unbounded and is
    written only when set, as Knative's own default is unbounded."""
    a = spec.autoscaling
    ann = {
        f"{AUTOSCALING}/class": KPA_CLASS,
        f"{AUTOSCALING}/metric": a.metric,
        f"{AUTOSCALING}/target": _number(a.target),
        f"{AUTOSCALING}/target-utilization-percentage": _number(a.target_utilization_percentage),
        f"{AUTOSCALING}/min-scale": str(a.min_scale),
        f"{AUTOSCALING}/initial-scale": str(a.initial_scale),
        f"{AUTOSCALING}/window": _duration(a.stable_window_s),
        f"{AUTOSCALING}/panic-window-percentage": _number(a.panic_window_percentage),
        f"{AUTOSCALING}/panic-threshold-percentage": _number(a.panic_threshold_percentage),
        f"{AUTOSCALING}/scale-down-delay": _duration(a.scale_down_delay_s),
    }
    if a.max_scale:
        ann[f"{AUTOSCALING}/max-scale"] = str(a.max_scale)
    return ann


def memory_quantity(nbytes: int) -> str:
    """Bytes in the canonical binary-SI spelling the API server would print (``64Mi``, ``1Gi``)."""
    for suffix, size in (
        ("Ei", 2**60),
        ("Pi", 2**50),
        ("Ti", 2**40),
        ("Gi", 2**30),
        ("Mi", 2**20),
        ("Ki", 2**10),
    ):
        if nbytes and nbytes % size == 0:
            return f"{nbytes // size}{suffix}"
    return str(nbytes)


def cpu_quantity(milli: int) -> str:
    """Millicores as a quantity: whole cores without the ``m`` (``1``), else ``250m``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _resources(spec: FunctionSpec) -> dict[str, dict[str, str]]:
    return {
        "requests": {
            "cpu": cpu_quantity(spec.cpu_request_milli),
            "memory": memory_quantity(spec.memory_request_bytes),
        },
        "limits": {
            "cpu": cpu_quantity(spec.cpu_limit_milli),
            "memory": memory_quantity(spec.memory_limit_bytes),
        },
    }


def service_labels(spec: FunctionSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": spec.name,
        "app.kubernetes.io/part-of": PART_OF,
        "scoretune.io/shape": spec.shape,
    }


def service_manifest(
    spec: FunctionSpec,
    *,
    scheduler_name: str | None = None,
    namespace: str = "default",
    image: str | None = None,
    node_name_env: bool = True,
    timeout_s: int = REVISION_TIMEOUT_S,
) -> dict[str, Any]:
    """The Knative Service deploying ``spec``.

    ``scheduler_name`` sets ``spec.template.spec.schedulerName``, which Knative keeps only with the
    ``kubernetes.podspec-schedulername`` feature enabled (``pkg/apis/serving/fieldmask.go``).
    ``node_name_env`` passes the node and pod names to the runtime (``NODE_NAME``, ``POD_NAME`` from
    the downward API, for the ``X-Scoretune-Node`` and ``X-Scoretune-Pod`` headers); Knative admits a ``fieldRef`` only with the
    ``kubernetes.podspec-fieldref`` feature enabled. ``image`` overrides the spec's image, for a
    build pushed to another registry.
    """
    container: dict[str, Any] = {
        "name": USER_CONTAINER,
        "image": image or spec.image,
        "ports": [{"name": "http1", "containerPort": USER_PORT}],
        "resources": _resources(spec),
        "readinessProbe": {"httpGet": {"path": READINESS_PATH}, "successThreshold": 1},
        "livenessProbe": {"httpGet": {"path": LIVENESS_PATH}, "periodSeconds": 10, "failureThreshold": 3},
    }
    if node_name_env:
        container["env"] = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    template_spec: dict[str, Any] = {
        "containerConcurrency": spec.container_concurrency,
        "timeoutSeconds": timeout_s,
        "containers": [container],
    }
    if scheduler_name:
        template_spec["schedulerName"] = scheduler_name
    return {
        "apiVersion": API_VERSION,
        "kind": "Service",
        "metadata": {"name": spec.name, "namespace": namespace, "labels": service_labels(spec)},
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"scoretune.io/function": spec.name},
                    "annotations": autoscaling_annotations(spec),
                },
                "spec": template_spec,
            }
        },
    }


def _uid(*parts: str) -> str:
    """A stable UID for an object name, so a rendered pod is reproducible."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "scoretune:" + "/".join(parts)))


def _short_hash(text: str, n: int) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of apimachinery's rand.String
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def revision_name(spec: FunctionSpec, generation: int = 1) -> str:
    """``kmeta.ChildName(config, fmt.Sprintf("-%05d", generation))``; names here stay below 63."""
    return f"{spec.name}-{generation:05d}"


def _queue_proxy(spec: FunctionSpec, *, revision: str, namespace: str, timeout_s: int) -> dict[str, Any]:
    user_probe = {
        "httpGet": {"path": READINESS_PATH, "host": "127.0.0.1", "port": USER_PORT, "scheme": "HTTP"},
        "successThreshold": 1,
    }
    env = [
        ("SERVING_NAMESPACE", namespace),
        ("SERVING_SERVICE", spec.name),
        ("SERVING_CONFIGURATION", spec.name),
        ("SERVING_REVISION", revision),
        ("QUEUE_SERVING_PORT", str(QUEUE_HTTP_PORT)),
        ("QUEUE_SERVING_TLS_PORT", str(QUEUE_HTTPS_PORT)),
        ("CONTAINER_CONCURRENCY", str(spec.container_concurrency)),
        ("REVISION_TIMEOUT_SECONDS", str(timeout_s)),
        ("USER_PORT", str(USER_PORT)),
        ("SERVING_READINESS_PROBE", json.dumps(user_probe, separators=(",", ":"))),
    ]
    return {
        "name": QUEUE_CONTAINER,
        "image": QUEUE_PROXY_IMAGE,
        "ports": [
            {"name": "http-autometric", "containerPort": AUTOSCALING_METRICS_PORT, "protocol": "TCP"},
            {"name": "http-usermetric", "containerPort": USER_METRICS_PORT, "protocol": "TCP"},
            {"name": "queue-port", "containerPort": QUEUE_HTTP_PORT, "protocol": "TCP"},
            {"name": "https-port", "containerPort": QUEUE_HTTPS_PORT, "protocol": "TCP"},
        ],
        "env": [{"name": k, "value": v} for k, v in env]
        + [
            {
                "name": "SERVING_POD",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "SERVING_POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
        ],
        "resources": {"requests": {"cpu": QUEUE_CPU_REQUEST}},
        "readinessProbe": {
            "httpGet": {
                "port": QUEUE_HTTP_PORT,
                "scheme": "HTTP",
                "httpHeaders": [{"name": "K-Network-Probe", "value": "queue"}],
            },
            "successThreshold": 1,
            "failureThreshold": 3,
            "periodSeconds": 10,
            "timeoutSeconds": 1,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _qos_class(containers: list[dict[str, Any]]) -> str:
    """``v1.PodQOSClass`` as ``pkg/apis/core/helper/qos`` computes it for cpu and memory."""
    guaranteed = True
    any_set = False
    for c in containers:
        req = c.get("resources", {}).get("requests", {})
        lim = c.get("resources", {}).get("limits", {})
        any_set = any_set or bool(req) or bool(lim)
        for r in ("cpu", "memory"):
            if r not in lim or req.get(r, lim[r]) != lim[r]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def revision_pod(
    spec: FunctionSpec,
    *,
    scheduler_name: str | None = None,
    name: str | None = None,
    revision: str | None = None,
    namespace: str = "default",
    image: str | None = None,
    node_name_env: bool = True,
    timeout_s: int = REVISION_TIMEOUT_S,
) -> dict[str, Any]:
    """The pending Pod (API JSON) that a revision of :func:`service_manifest` creates, before it
    is bound to a node: what kube-scheduler receives. ``name`` defaults to the ReplicaSet-style
    ``<revision>-deployment-<hash>-<suffix>`` (deterministic here); ``revision`` to ``<service>-00001``."""
    revision = revision or revision_name(spec)
    template_hash = _short_hash(f"{revision}/{spec.image}/{scheduler_name}", 10)
    name = name or f"{revision}-deployment-{template_hash}-{_short_hash(f'{revision}/{template_hash}', 5)}"
    service = service_manifest(
        spec,
        scheduler_name=scheduler_name,
        namespace=namespace,
        image=image,
        node_name_env=node_name_env,
        timeout_s=timeout_s,
    )
    template = service["spec"]["template"]
    user = json.loads(json.dumps(template["spec"]["containers"][0]))  # a deep copy

    # makeServingContainer + makeContainer (deploy.go)
    user["ports"] = [{"name": USER_PORT_NAME, "containerPort": USER_PORT, "protocol": "TCP"}]
    user["env"] = user.get("env", []) + [
        {"name": "PORT", "value": str(USER_PORT)},
        {"name": "K_REVISION", "value": revision},
        {"name": "K_CONFIGURATION", "value": spec.name},
        {"name": "K_SERVICE", "value": spec.name},
    ]
    user["lifecycle"] = {
        "preStop": {"httpGet": {"path": DRAIN_PATH, "port": QUEUE_ADMIN_PORT, "scheme": "HTTP"}}
    }
    user["terminationMessagePolicy"] = "FallbackToLogsOnError"
    user["terminationMessagePath"] = "/dev/termination-log"
    user["imagePullPolicy"] = "IfNotPresent"
    user.pop("readinessProbe", None)  # HTTP readiness is probed by queue-proxy instead
    live = user["livenessProbe"]
    live["httpGet"].update({"port": USER_PORT, "scheme": "HTTP"})
    live.setdefault("timeoutSeconds", 1)
    live.setdefault("successThreshold", 1)

    containers = [user, _queue_proxy(spec, revision=revision, namespace=namespace, timeout_s=timeout_s)]
    service_uid = _uid(namespace, "service", spec.name)
    labels = {
        **template["metadata"]["labels"],
        f"{SERVING}/configuration": spec.name,
        f"{SERVING}/configurationGeneration": "1",
        f"{SERVING}/configurationUID": _uid(namespace, "configuration", spec.name),
        f"{SERVING}/service": spec.name,
        f"{SERVING}/serviceUID": service_uid,
        f"{SERVING}/revision": revision,
        f"{SERVING}/revisionUID": _uid(namespace, "revision", revision),
        "app": revision,
        "pod-template-hash": template_hash,
    }
    annotations = {
        k: v for k, v in template["metadata"]["annotations"].items() if not k.startswith(AUTOSCALING)
    }
    annotations["kubectl.kubernetes.io/default-container"] = USER_CONTAINER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(namespace, "pod", name),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{revision}-deployment-{template_hash}",
                    "uid": _uid(namespace, "replicaset", f"{revision}-deployment-{template_hash}"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": containers,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": timeout_s,
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": HOSTNAME_LABEL,
                                "labelSelector": {"matchLabels": {f"{SERVING}/revision": revision}},
                            },
                        }
                    ]
                }
            },
            "schedulerName": scheduler_name or "default-scheduler",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "priority": 0,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": {"phase": "Pending", "qosClass": _qos_class(containers)},
    }
