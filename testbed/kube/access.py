"""Least privilege for the experiment host: the ``scoretune-driver`` ServiceAccount and its roles.

The kube backend needs far less than cluster-admin: it reads nodes and pods, rolls one
Deployment's configuration, reads one lease, reads the functions' Knative objects, and runs
short-lived image-state pods. Those pods are privileged (the containerd socket), so they live in
their own namespace, ``scoretune-system``, the only one whose Pod Security level is
``privileged``, instead of kube-system. Each rule below names the backend call that needs it;
tests/testbed/kube/test_access.py drives the backend through the fake API and checks that every
request it makes is allowed by these roles, and that every verb they grant is used.

The experiment host gets a kubeconfig with a bound token of this ServiceAccount (TokenRequest,
``scoretune kube driver-kubeconfig``), never the admin kubeconfig.
"""

from __future__ import annotations

from typing import Any

DRIVER_NAME = "scoretune-driver"
DRIVER_NAMESPACE = "scoretune-system"
"""Where the driver's ServiceAccount and the image-state pods live."""

_RBAC = "rbac.authorization.k8s.io/v1"
_LABELS = {"app.kubernetes.io/part-of": "scoretune"}


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def cluster_rules() -> list[dict[str, Any]]:
    """Cluster-wide reads: the nodes (snapshot, health before and during runs) and every pod
    (the snapshot subtracts running pods' requests; the data plane's pods are listed in their
    namespaces)."""
    return [_rule([""], ["nodes"], ["list"]), _rule([""], ["pods"], ["list"])]


def scheduler_rules(name: str) -> list[dict[str, Any]]:
    """In the scheduler's namespace: its hashed configuration ConfigMaps (create, read, list for
    the history, delete beyond it), its Deployment (read, patch to roll), its lease (read)."""
    return [
        _rule([""], ["configmaps"], ["create", "get", "list", "delete"]),
        _rule(["apps"], ["deployments"], ["get", "patch"], [name]),
        _rule(["coordination.k8s.io"], ["leases"], ["get"], [name]),
    ]


def function_rules() -> list[dict[str, Any]]:
    """In the functions' namespace: their Knative Services and Revisions (read), their pods (watched
    for the placements during a run) and the kubelets' events about them (listed once after a run:
    the image-pull times of the ``Pulled`` events, testbed.kube.pulls)."""
    return [
        _rule(["serving.knative.dev"], ["services", "revisions"], ["get", "list"]),
        _rule([""], ["pods"], ["watch"]),
        _rule([""], ["events"], ["list"]),
    ]


KNATIVE_CONFIG_MAPS = ("config-autoscaler", "config-deployment", "config-features", "config-network")
"""testbed.kube.faults.KNATIVE_CONFIG_MAPS (kept here too: this module imports nothing of the backend)."""


def knative_rules() -> list[dict[str, Any]]:
    """In knative-serving: read the ConfigMaps whose digests every run records."""
    return [_rule([""], ["configmaps"], ["get"], list(KNATIVE_CONFIG_MAPS))]


def image_rules() -> list[dict[str, Any]]:
    """In ``scoretune-system``: the image-state pods (create, read, delete) and their logs."""
    return [_rule([""], ["pods"], ["create", "get", "delete"]), _rule([""], ["pods/log"], ["get"])]


def openwhisk_rules(release: str = "owdev") -> list[dict[str, Any]]:
    """In OpenWhisk's namespace (testbed.kube.openwhisk_backend): the action pods (watched for the
    placements), the invoker StatefulSet (read, patched to restart the invokers before every
    step), the controller's StatefulSet (read: its invocation limits) and the controller's
    ``/invokers`` through the service proxy (read), and the kubelets' events (listed after a run:
    the action pods' image-pull times)."""
    return [
        _rule([""], ["pods"], ["watch"]),
        _rule([""], ["events"], ["list"]),
        _rule(["apps"], ["statefulsets"], ["get"], [f"{release}-invoker", f"{release}-controller"]),
        _rule(["apps"], ["statefulsets"], ["patch"], [f"{release}-invoker"]),
        _rule([""], ["services/proxy"], ["get"], [f"{release}-controller:http"]),
    ]


def openwhisk_driver_objects(release: str = "owdev", namespace: str = "openwhisk") -> list[dict[str, Any]]:
    """The driver's Role and RoleBinding in OpenWhisk's namespace (applied with OpenWhisk, which
    creates the namespace)."""
    meta = {"name": DRIVER_NAME, "namespace": namespace, "labels": dict(_LABELS)}
    return [{"apiVersion": _RBAC, "kind": "Role", "metadata": meta, "rules": openwhisk_rules(release)},
            {"apiVersion": _RBAC, "kind": "RoleBinding", "metadata": dict(meta),
             "subjects": [{"kind": "ServiceAccount", "name": DRIVER_NAME, "namespace": DRIVER_NAMESPACE}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DRIVER_NAME}}]


def driver_objects(scheduler_name: str = "scoretune-scheduler", scheduler_namespace: str = "kube-system",
                   functions_namespace: str = "default", *, max_image_pods: int = 100) -> list[dict[str, Any]]:
    """The namespace, its Pod Security labels and quota, the ServiceAccount and its roles (one Role
    per namespace, the rules of namespaces that coincide merged)."""
    labels = dict(_LABELS)
    subject = [{"kind": "ServiceAccount", "name": DRIVER_NAME, "namespace": DRIVER_NAMESPACE}]

    def binding(kind: str, namespace: str | None, role_kind: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": DRIVER_NAME, "labels": labels}
        if namespace is not None:
            meta["namespace"] = namespace
        return {"apiVersion": _RBAC, "kind": kind, "metadata": meta, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": DRIVER_NAME}}

    def role(namespace: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        meta = {"name": DRIVER_NAME, "namespace": namespace, "labels": labels}
        return [{"apiVersion": _RBAC, "kind": "Role", "metadata": meta, "rules": rules},
                binding("RoleBinding", namespace, "Role")]

    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE, "labels": {
            **labels,
            # the image-state pods are privileged (the containerd socket): only this namespace allows that
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/audit": "privileged",
            "pod-security.kubernetes.io/warn": "privileged"}}},
        # where the API server limits critical priority classes to kube-system (a ResourceQuota
        # admission configuration, as some distributions ship), a quota in the namespace admits them
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": {"name": "scoretune-node-critical", "namespace": DRIVER_NAMESPACE, "labels": labels},
         "spec": {"hard": {"pods": str(max_image_pods)},
                  "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                          "values": ["system-node-critical"]}]}}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": DRIVER_NAME, "namespace": DRIVER_NAMESPACE, "labels": labels}},
        {"apiVersion": _RBAC, "kind": "ClusterRole", "metadata": {"name": DRIVER_NAME, "labels": labels},
         "rules": cluster_rules()},
        binding("ClusterRoleBinding", None, "ClusterRole"),
    ]
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for namespace, rules in ((scheduler_namespace, scheduler_rules(scheduler_name)),
                             (functions_namespace, function_rules()), ("knative-serving", knative_rules()),
                             (DRIVER_NAMESPACE, image_rules())):
        by_namespace.setdefault(namespace, []).extend(rules)
    for namespace, rules in by_namespace.items():
        objects += role(namespace, rules)
    return objects




def _current_cluster(admin: dict[str, Any], path: str) -> tuple[str, dict[str, Any]]:
    """(name, cluster entry) of the admin kubeconfig's current context."""
    from testbed.errors import TestbedError

    try:
        context = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
        name = context["cluster"]
        return name, next(c["cluster"] for c in admin["clusters"] if c["name"] == name)
    except (KeyError, TypeError, StopIteration):
        raise TestbedError(f"{path}: current-context: no context, or no cluster for it") from None


def driver_kubeconfig(admin_path: str, *, hours: float = 720.0, context: str | None = None,
                      api_client: Any = None) -> dict[str, Any]:
    """A kubeconfig for the experiment host: the admin kubeconfig's cluster (server, CA) and a
    bound token of ``scoretune-driver`` (TokenRequest, valid ``hours``; it dies with the
    ServiceAccount), so the tuner acts with exactly the roles above."""
    import yaml
    from kubernetes import client, config

    from testbed.errors import TestbedError

    try:
        admin = yaml.safe_load(open(admin_path, encoding="utf-8"))  # noqa: SIM115 - read whole at once
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise TestbedError(f"{admin_path}: not a readable kubeconfig ({type(err).__name__})") from None
    if not isinstance(admin, dict):
        raise TestbedError(f"{admin_path}: not a kubeconfig (a YAML mapping)")
    if context is not None:
        admin = {**admin, "current-context": context}
    cluster_name, cluster = _current_cluster(admin, admin_path)
    if api_client is None:
        try:
            api_client = config.new_client_from_config(config_file=admin_path, context=context)
        except (config.ConfigException, OSError, TypeError) as err:
            raise TestbedError(f"{admin_path}: {err}") from None
    body = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=int(hours * 3600)))
    try:
        answer = client.CoreV1Api(api_client).create_namespaced_service_account_token(DRIVER_NAME, DRIVER_NAMESPACE,
                                                                                        body)
    except client.ApiException as err:
        raise TestbedError(f"requesting a token for {DRIVER_NAMESPACE}/{DRIVER_NAME}: {err.status} {err.reason} "
                           "(is driver/rbac.yaml applied? ansible/scheduler.yml applies it)") from None
    except Exception as err:  # noqa: BLE001 - urllib3 errors: the API server is unreachable
        raise TestbedError(f"requesting a token for {DRIVER_NAMESPACE}/{DRIVER_NAME}: {err}") from None
    user = f"{DRIVER_NAME}@{cluster_name}"
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": answer.status.token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": user,
    }


__all__ = ["DRIVER_NAME", "DRIVER_NAMESPACE", "driver_kubeconfig", "driver_objects", "openwhisk_driver_objects"]
