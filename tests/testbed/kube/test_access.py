"""Least privilege (issue 35, item 3): every request the kube backend makes while it applies
profiles (with the ConfigMap history pruned), resets (image-state pods on a cold and a warm
node), runs and reports status is allowed by the rendered ``scoretune-driver`` roles, evaluated
with RBAC's own matching rules (rbac/v1 PolicyRule: verbs, apiGroups, resources with subresources,
resourceNames); and every verb those roles grant is used by some request. Also: the bound-token
kubeconfig the experiment host gets, and the image-state pods' namespace."""

from __future__ import annotations

import re
import stat

import kubernetes_validate
import numpy as np
import pytest
import yaml
from fakeapi import make_backend, write_kubeconfig
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import make_workload
from testbed.errors import TestbedError
from testbed.kube.access import DRIVER_NAME, DRIVER_NAMESPACE, driver_kubeconfig, driver_objects
from testbed.kube.backend import ImageState
from testbed.kube.versions import KUBERNETES_VERSION
from testbed.scheduler.config import profile_from_weights

_PATH = re.compile(r"/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?")


def request_of(call: str) -> tuple[str, str, str, str | None, str | None]:
    """(verb, apiGroup, resource[/subresource], namespace, name) of a recorded ``METHOD path [watch]``,
    as the API server's RequestInfoFactory derives them."""
    method, path, *watch = call.split(" ")
    m = _PATH.fullmatch(path)
    assert m, path
    name = m["name"]
    verb = {"POST": "create", "PATCH": "patch", "PUT": "update"}.get(method)
    if verb is None:
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            verb = "watch" if watch else ("get" if name else "list")
    resource = f"{m['resource']}/{m['sub']}" if m["sub"] else m["resource"]
    return verb, m["group"] or "", resource, m["ns"], name


def _matches(rule: dict, verb: str, group: str, resource: str, name: str | None) -> bool:
    return (verb in rule["verbs"] and group in rule["apiGroups"] and resource in rule["resources"]
            and (not rule.get("resourceNames") or name in rule["resourceNames"]))


def _grants(objects: list[dict]) -> list[tuple[str | None, dict]]:
    """(namespace or None for cluster-wide, rule) of every role bound to the driver."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    out = []
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": DRIVER_NAME, "namespace": DRIVER_NAMESPACE}]
        ns = b["metadata"].get("namespace")
        role = roles[(b["roleRef"]["kind"], ns if b["roleRef"]["kind"] == "Role" else None, b["roleRef"]["name"])]
        out += [(ns, r) for r in role["rules"]]
    return out


def allowed(grants, request) -> list[tuple[str | None, dict]]:
    verb, group, resource, ns, name = request
    return [(g_ns, r) for g_ns, r in grants if (g_ns is None or g_ns == ns) and _matches(r, verb, group, resource, name)]


@pytest.fixture
def exercised(fake, tmp_path):
    """The requests of a backend driven through everything it does on a lab."""
    fake.drain_after = 1
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.image_state = ImageState(cold_nodes=("node-2",))
    for w in (1, 2, 3, 4, 5):  # five configurations: the history beyond three is deleted
        backend.apply(profile_from_weights({"NodeResourcesFit": w}, strategy="MostAllocated"))
    backend.reset()
    result = backend.run(make_workload(np.linspace(0.0, 0.4, 4), ["fn-a", "fn-b"] * 2), tmp_path / "run")
    assert not result.failed, result.summary.get("failure")
    backend.status()
    backend.functions = None  # discover the functions: every scoretune Service in the namespace
    assert backend._function_names() == ["fn-a", "fn-b"]
    backend.close()
    return [request_of(c) for c in dict.fromkeys(fake.calls)]


@pytest.mark.integration
def test_every_request_is_allowed_and_every_grant_is_used(exercised):
    grants = _grants(driver_objects())
    refused = [r for r in exercised if not allowed(grants, r)]
    assert refused == []
    granted = {(ns, verb, group, res) for ns, rule in grants
               for verb in rule["verbs"] for group in rule["apiGroups"] for res in rule["resources"]}
    exercised_grants = {(ns, verb, group, resource) for verb, group, resource, req_ns, name in exercised
                        for ns, _ in allowed(grants, (verb, group, resource, req_ns, name))}
    assert granted - exercised_grants == set(), "granted but never requested"
    # what the driver may never do
    for forbidden in [("create", "", "pods", "kube-system", None), ("delete", "", "pods", "default", "x"),
                      ("patch", "apps", "deployments", "kube-system", "kube-scheduler"),
                      ("get", "", "secrets", "kube-system", "x"), ("create", "", "pods/exec", DRIVER_NAMESPACE, "x"),
                      ("update", "", "configmaps", "kube-system", "x"), ("list", "", "secrets", None, None)]:
        assert not allowed(grants, forbidden), forbidden


@pytest.mark.integration
def test_the_image_state_pods_run_in_their_own_privileged_namespace(exercised, fake):
    assert {p["metadata"]["namespace"] for p in fake.image_pods} == {DRIVER_NAMESPACE}
    assert ("create", "", "pods", DRIVER_NAMESPACE, None) in exercised
    ns = next(o for o in driver_objects() if o["kind"] == "Namespace")
    assert ns["metadata"]["name"] == DRIVER_NAMESPACE
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_driver_objects_pass_the_schema_and_merge_a_shared_namespace():
    for obj in driver_objects():
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    shared = driver_objects(functions_namespace="kube-system")
    roles = [o for o in shared if o["kind"] == "Role"]
    assert sorted(o["metadata"]["namespace"] for o in roles) == ["knative-serving", "kube-system", DRIVER_NAMESPACE]
    assert len(_grants(shared)) == len(_grants(driver_objects()))


def test_the_experiment_host_gets_a_bound_token_kubeconfig_0600(fake, tmp_path):
    admin = write_kubeconfig(fake, tmp_path)
    out = tmp_path / "lab" / "driver.kubeconfig"
    result = CliRunner().invoke(app, ["kube", "driver-kubeconfig", "--kubeconfig", str(admin), "--out", str(out),
                                      "--hours", "24"])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    cfg = yaml.safe_load(out.read_text())
    assert cfg["users"][0]["user"] == {"token": f"bound-token-{DRIVER_NAMESPACE}-{DRIVER_NAME}-86400"}
    assert cfg["clusters"] == [{"name": "lab", "cluster": {"server": fake.url}}]
    assert "POST /api/v1/namespaces/scoretune-system/serviceaccounts/scoretune-driver/token" in fake.calls
    fake.service_accounts.clear()  # driver/rbac.yaml not applied: one line saying so
    with pytest.raises(TestbedError, match="404 Not Found.*driver/rbac.yaml applied"):
        driver_kubeconfig(str(admin))
    (tmp_path / "bad").write_bytes(b"\x00\xff")
    result = CliRunner().invoke(app, ["kube", "driver-kubeconfig", "--kubeconfig", str(tmp_path / "bad"),
                                      "--out", str(out)])
    assert result.exit_code == 1 and "bad: not a readable kubeconfig" in result.output
