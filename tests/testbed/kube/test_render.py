"""The lab's rendered objects: golden files, Kubernetes 1.36 schemas, Knative's Service schema, and
the round trip of the KubeSchedulerConfiguration through the scheduler package.

Golden files live in golden/; after an intended change regenerate them with
``SCORETUNE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/testbed/kube/test_render.py`` and review
the diff.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from agent.cli import app
from functions.knative_validation import validate_service
from functions.spec import discover_specs, load_spec
from testbed.errors import ConfigError
from testbed.kube import render
from testbed.kube.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    RENDER_LAYOUT,
    SchedulerSettings,
    config_hash,
    lab_documents,
    scheduler_config,
    write_documents,
)
from testbed.kube.versions import KUBE_SCHEDULER_IMAGE, KUBERNETES_VERSION
from testbed.scheduler.config import parse_config, profile_from_weights

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
KNATIVE_SCHEMA = json.loads((HERE / "schemas" / "knative-service-v1.json").read_text())


@pytest.fixture(scope="module")
def profile():
    return profile_from_weights({"NodeResourcesFit": 5, "ImageLocality": 3, "NodeResourcesBalancedAllocation": None},
                                strategy="MostAllocated")


@pytest.fixture(scope="module")
def specs():
    return discover_specs()


@pytest.fixture(scope="module")
def documents(profile, specs):
    return lab_documents(profile, list(specs.values()))


def _k8s_objects(documents):
    for rel, objects in documents.items():
        if rel in ("functions/services.yaml", "openwhisk/invoker-patch.yaml", "knative/data-plane.yaml",
                   "openwhisk/core-pins.yaml"):
            continue  # checked on their own (patches are partial objects)
        yield from ((rel, o) for o in objects)


def test_layout_is_what_is_written(documents, tmp_path):
    assert set(documents) == set(RENDER_LAYOUT)
    result = write_documents(documents, tmp_path)
    assert sorted(result["written"]) == sorted(RENDER_LAYOUT) and result["unchanged"] == []
    again = write_documents(documents, tmp_path)
    assert again["written"] == [] and sorted(again["unchanged"]) == sorted(RENDER_LAYOUT)


@pytest.mark.parametrize("rel", sorted(set(RENDER_LAYOUT) - {"functions/services.yaml"}))
def test_golden(documents, rel):
    text = render.dump_all(documents[rel])
    path = GOLDEN / rel
    if os.environ.get("SCORETUNE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{rel} differs from its golden file (see the module docstring)"


def test_golden_services(profile):
    """From a spec fixed beside the golden file, so only a change of the rendering shows here."""
    spec = load_spec(GOLDEN / "functions" / "spec-float-ops.yaml")
    docs = lab_documents(profile, [spec])
    text = render.dump_all(docs["functions/services.yaml"])
    path = GOLDEN / "functions" / "services.yaml"
    if os.environ.get("SCORETUNE_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text()


def test_every_object_passes_the_kubernetes_schema(documents):
    checked = 0
    for _rel, obj in _k8s_objects(documents):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    kinds = sorted({o["kind"] for _, o in _k8s_objects(documents)})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Namespace", "ResourceQuota", "Role",
                     "RoleBinding", "Service", "ServiceAccount"]
    assert checked == 15 + 13 + 2  # + config-autoscaler; the driver's: namespace, quota, account, cluster role and binding, 4 roles and bindings, and its OpenWhisk role and binding


def test_config_autoscaler_is_what_the_simulator_runs_with_every_key_knative_parses():
    """Parsed back as knative/serving pkg/autoscaler/config/config.go NewConfigFromMap does
    (percentages above 1 become fractions, durations in seconds), it is the simulator's
    AutoscalerConfig; and every key is one that function parses (no key Knative would ignore)."""
    from testbed.autoscaler.kpa import AutoscalerConfig

    parsed_by_knative = {"pod-autoscaler-class", "enable-scale-to-zero", "allow-zero-initial-scale",
                         "max-scale-up-rate", "max-scale-down-rate", "container-concurrency-target-percentage",
                         "container-concurrency-target-default", "requests-per-second-target-default",
                         "target-burst-capacity", "panic-window-percentage", "activator-capacity",
                         "panic-threshold-percentage", "initial-scale", "max-scale", "max-scale-limit", "stable-window",
                         "scale-down-delay", "scale-to-zero-grace-period", "scale-to-zero-pod-retention-period"}
    data = render.knative_autoscaler()["data"]
    assert set(data) == parsed_by_knative
    fraction = float(data["container-concurrency-target-percentage"])
    back = AutoscalerConfig(
        enable_scale_to_zero=data["enable-scale-to-zero"] == "true",
        allow_zero_initial_scale=data["allow-zero-initial-scale"] == "true",
        max_scale_up_rate=float(data["max-scale-up-rate"]), max_scale_down_rate=float(data["max-scale-down-rate"]),
        container_concurrency_target_fraction=fraction / 100 if fraction > 1 else fraction,
        container_concurrency_target_default=float(data["container-concurrency-target-default"]),
        rps_target_default=float(data["requests-per-second-target-default"]),
        target_burst_capacity=float(data["target-burst-capacity"]),
        panic_window_percentage=float(data["panic-window-percentage"]),
        activator_capacity=float(data["activator-capacity"]),
        panic_threshold_percentage=float(data["panic-threshold-percentage"]),
        initial_scale=int(data["initial-scale"]), max_scale=int(data["max-scale"]),
        stable_window_s=float(data["stable-window"].removesuffix("s")),
        scale_down_delay_s=float(data["scale-down-delay"].removesuffix("s")),
        scale_to_zero_grace_period_s=float(data["scale-to-zero-grace-period"].removesuffix("s")),
        scale_to_zero_pod_retention_period_s=float(data["scale-to-zero-pod-retention-period"].removesuffix("s")))
    assert back == AutoscalerConfig()
    other = render.knative_autoscaler(AutoscalerConfig(stable_window_s=30.0, target_burst_capacity=-1))["data"]
    assert other["stable-window"] == "30s" and other["target-burst-capacity"] == "-1"


def _strategic_merge(base, patch):
    """Enough of a strategic merge for these patches (maps merge, lists replace: PodSpec's
    nodeSelector is a map, tolerations have no merge key)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = _strategic_merge(out.get(key, {}), value) if isinstance(value, dict) and value else value
    return out


def test_the_data_plane_is_pinned_to_the_control_plane_at_a_fixed_size(documents):
    """Every Deployment of Knative Serving and Kourier merged with its patch is a valid Deployment
    that only the control plane (tolerated taint, selected label) can run; both HPAs are min = max,
    the gateway's replicas fixed; the gateway Service only answers on nodes running the gateway."""
    patches = documents["knative/data-plane.yaml"]
    deployments = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in patches if p["kind"] == "Deployment"}
    assert set(deployments) == set(render.DATA_PLANE_DEPLOYMENTS)
    for (ns, name), patch in deployments.items():
        base = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                    "metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": name, "image": "x"}]}}}}
        merged = _strategic_merge(base, patch)
        kubernetes_validate.validate(merged, KUBERNETES_VERSION, strict=True)
        pod = merged["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} \
            in pod["tolerations"]
    assert deployments[("kourier-system", "3scale-kourier-gateway")]["spec"]["replicas"] == 1
    hpas = {p["metadata"]["name"]: p for p in patches if p["kind"] == "HorizontalPodAutoscaler"}
    assert set(hpas) == {"activator", "webhook"}
    for name, patch in hpas.items():
        base = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": name, "namespace": "knative-serving"},
                "spec": {"minReplicas": 1, "maxReplicas": 20,
                         "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}}
        merged = _strategic_merge(base, patch)
        kubernetes_validate.validate(merged, KUBERNETES_VERSION, strict=True)
        assert merged["spec"]["minReplicas"] == merged["spec"]["maxReplicas"] == 1
    assert documents["knative/kourier-nodeport.yaml"][0]["spec"]["externalTrafficPolicy"] == "Local"
    three = render.data_plane_pins(3)
    assert {p["spec"].get("minReplicas", 3) for p in three} == {3}
    with pytest.raises(ConfigError, match="data_plane_replicas"):
        render.data_plane_pins(0)
    with pytest.raises(ConfigError, match="data_plane_node_selector"):
        render.data_plane_pins(1, {})


def test_openwhisk_core_components_are_required_on_the_core_node(documents):
    """Each of the chart's default core components (openwhisk-deploy-kube helm/openwhisk/templates,
    at the pinned commit), merged with its patch, is a valid object whose pods only a node labelled
    openwhisk-role=core can run; the invokers are not among them."""
    patches = documents["openwhisk/core-pins.yaml"]
    names = {p["metadata"]["name"] for p in patches}
    assert names == {f"owdev-{n}" for n in ("controller", "kafka", "zookeeper", "couchdb", "redis", "apigateway",
                                             "nginx")}
    assert "owdev-invoker" not in names
    for patch in patches:
        name = patch["metadata"]["name"]
        base = {"apiVersion": "apps/v1", "kind": patch["kind"], "metadata": dict(patch["metadata"]),
                "spec": {"selector": {"matchLabels": {"name": name}}, "template": {
                    "metadata": {"labels": {"name": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
        if patch["kind"] == "StatefulSet":
            base["spec"]["serviceName"] = name
        merged = _strategic_merge(base, patch)
        kubernetes_validate.validate(merged, KUBERNETES_VERSION, strict=True)
        assert merged["spec"]["template"]["spec"]["nodeSelector"] == {"openwhisk-role": "core"}


def test_the_schema_check_rejects_a_misspelt_field(documents):
    dep = copy.deepcopy(documents["scheduler/deployment.yaml"][0])
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = dep["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)


def test_openwhisk_objects_pass_the_pod_schema(documents):
    """The pod template, completed as WhiskPodBuilder completes it, and the invoker patch's pod
    spec (mounted into a Pod with the chart's container name) are valid Kubernetes 1.36 pods."""
    template = yaml.safe_load(documents["openwhisk/pod-template.yaml"][0]["data"]["pod-template.yaml"])
    pod = copy.deepcopy(template)
    pod["metadata"]["name"] = "wskowdev-invoker-00-1-guest-hello"
    pod["spec"]["containers"] = [{"name": "user-action", "image": "openwhisk/action-python-v3.11"}]
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    assert pod["spec"]["schedulerName"] == "scoretune-scheduler"
    patch = documents["openwhisk/invoker-patch.yaml"][0]
    spec = copy.deepcopy(patch["spec"]["template"]["spec"])
    spec["containers"][0]["image"] = "openwhisk/invoker"
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "invoker"}, "spec": spec},
                                 KUBERNETES_VERSION, strict=True)
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["CONFIG_whisk_kubernetes_podTemplate"] == "file:/etc/scoretune/pod-template.yaml"
    assert patch["metadata"]["name"] == "owdev-invoker" and spec["containers"][0]["name"] == "invoker"


def test_services_pass_knatives_schema_and_webhook_rules(documents, specs):
    services = documents["functions/services.yaml"]
    assert sorted(s["metadata"]["name"] for s in services) == sorted(specs)
    validator = jsonschema.Draft7Validator(KNATIVE_SCHEMA)
    for svc in services:
        assert [e.message for e in validator.iter_errors(svc)] == []
        assert validate_service(svc) == []
        assert svc["metadata"]["labels"]["scoretune.io/function"] == svc["metadata"]["name"]
        pod = svc["spec"]["template"]["spec"]
        assert pod["schedulerName"] == "scoretune-scheduler"
        env = pod["containers"][0]["env"]
        assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env


def test_knatives_schema_rejects_a_wrong_type(documents):
    svc = copy.deepcopy(documents["functions/services.yaml"][0])
    svc["spec"]["template"]["spec"]["containerConcurrency"] = "ten"
    assert list(jsonschema.Draft7Validator(KNATIVE_SCHEMA).iter_errors(svc))


def test_registry_moves_every_image(profile, specs):
    docs = lab_documents(profile, list(specs.values()), registry="10.0.0.5:5000/lab")
    images = [s["spec"]["template"]["spec"]["containers"][0]["image"] for s in docs["functions/services.yaml"]]
    assert all(i.startswith("10.0.0.5:5000/lab/fn-") for i in images)


def test_configuration_round_trips_through_the_scheduler_package(documents, profile):
    text = documents["scheduler/configmap.yaml"][0]["data"][CONFIG_KEY]
    doc = yaml.safe_load(text)
    assert [p["schedulerName"] for p in doc["profiles"]] == ["scoretune-scheduler"]
    assert doc["leaderElection"] == {"leaderElect": True, "resourceLock": "leases",
                                     "resourceName": "scoretune-scheduler", "resourceNamespace": "kube-system"}
    back = parse_config(doc).profile("scoretune-scheduler")
    assert back.score_weights == profile.score_weights
    assert back.fit == profile.fit
    assert back.weight("NodeResourcesBalancedAllocation") is None


def test_deployment_follows_the_multiple_schedulers_guide(documents):
    cm = documents["scheduler/configmap.yaml"][0]
    dep = documents["scheduler/deployment.yaml"][0]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == KUBE_SCHEDULER_IMAGE == f"registry.k8s.io/kube-scheduler:v{KUBERNETES_VERSION}"
    assert c["command"][:2] == ["/usr/local/bin/kube-scheduler", "--config=/etc/kubernetes/scoretune-scheduler/config.yaml"]
    for probe in (c["livenessProbe"], c["readinessProbe"]):
        assert probe["httpGet"] == {"path": "/healthz", "port": 10259, "scheme": "HTTPS"}
    assert pod["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    assert c["volumeMounts"][0]["mountPath"] == "/etc/kubernetes/scoretune-scheduler"
    assert dep["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == config_hash(cm["data"][CONFIG_KEY])
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_rbac_binds_the_upstream_roles(documents):
    objs = documents["scheduler/rbac.yaml"]
    refs = sorted((o["kind"], o["roleRef"]["name"]) for o in objs if "roleRef" in o)
    assert refs == [
        ("ClusterRoleBinding", "system:kube-scheduler"),
        ("ClusterRoleBinding", "system:volume-scheduler"),
        ("RoleBinding", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "scoretune-scheduler-leader-election"),
    ]
    role = next(o for o in objs if o["kind"] == "Role")
    assert role["rules"][1]["resourceNames"] == ["scoretune-scheduler"]


def test_an_invalid_profile_is_rejected_before_rendering(profile):
    import dataclasses

    bad = dataclasses.replace(profile, percentage_of_nodes_to_score=150)
    with pytest.raises(ConfigError, match="percentageOfNodesToScore"):
        scheduler_config(bad)


def test_the_default_scheduler_name_is_refused():
    with pytest.raises(ConfigError, match="default-scheduler"):
        SchedulerSettings(scheduler_name="default-scheduler")


def test_cli_render_prints_what_changed(tmp_path):
    runner = CliRunner()
    args = ["kube", "render", "--out", str(tmp_path), "--weights", "NodeResourcesFit=5", "--functions", "float-ops"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert json.loads(first.output.strip().splitlines()[-1])["changed"] is True
    second = runner.invoke(app, args)
    assert json.loads(second.output.strip().splitlines()[-1]) == {
        "changed": False, "unchanged": sorted(RENDER_LAYOUT, key=list(RENDER_LAYOUT).index), "written": []}
    services = list(yaml.safe_load_all((tmp_path / "functions" / "services.yaml").read_text()))
    assert [s["metadata"]["name"] for s in services] == ["float-ops"]


def test_cli_render_errors_name_the_option(tmp_path):
    result = CliRunner().invoke(app, ["kube", "render", "--out", str(tmp_path), "--functions", "nope"])
    assert result.exit_code == 1
    message = result.output + str(result.exception)  # typer prints the error through its own console
    assert "field --functions: unknown function(s) ['nope']" in message


def test_knative_skips_tag_resolution_for_every_image_the_lab_cannot_resolve(profile, specs):
    """knative/serving pkg/reconciler/revision/resolve.go skips a tag whose registry
    (``tag.Registry.RegistryStr()``: host[:port]) is in ``registries-skipping-tag-resolving``;
    setting the key replaces Knative's defaults (pkg/deployment/config.go), so they are kept."""
    from testbed.kube.render import LOAD_REGISTRY, ImageSource

    def skip(docs):
        cm = docs["knative/config-deployment.yaml"][0]
        assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == ("config-deployment", "knative-serving")
        kubernetes_validate.validate(cm, KUBERNETES_VERSION, strict=True)
        return cm["data"]["registries-skipping-tag-resolving"].split(",")

    for source in (ImageSource("load"), ImageSource("push", "10.0.0.5:5000/lab", insecure=True)):
        docs = lab_documents(profile, list(specs.values()), images=source)
        names = skip(docs)
        assert names[:3] == ["kind.local", "ko.local", "dev.local"]
        for svc in docs["functions/services.yaml"]:
            image = svc["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image.split("/", 1)[0] in names, image
    load = lab_documents(profile, list(specs.values()), images=ImageSource("load"))
    assert all(s["spec"]["template"]["spec"]["containers"][0]["image"].startswith(f"{LOAD_REGISTRY}/fn-")
               for s in load["functions/services.yaml"])
    # a registry reached over HTTPS keeps Knative's tag-to-digest resolution
    assert "registry.example.com" not in skip(lab_documents(
        profile, list(specs.values()), images=ImageSource("push", "registry.example.com/lab")))


@pytest.mark.parametrize(("args", "field", "words"), [
    (["--image-mode", "push"], "--registry", "push needs the registry"),
    (["--image-mode", "load", "--registry", "r.example.com"], "--registry", "load uses no registry"),
    (["--image-mode", "ship"], "--image-mode", "unknown image mode 'ship'"),
    (["--image-mode", "push", "--registry", "http://10.0.0.5:5000"], "--registry", "not HOST[:PORT][/PATH]"),
    (["--insecure-registry"], "--insecure-registry", "only applies to image mode push"),
])
def test_cli_render_refuses_an_impossible_image_source(tmp_path, args, field, words):
    result = CliRunner().invoke(app, ["kube", "render", "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 1
    message = result.output + str(result.exception)
    assert f"field {field}: " in message and words in message
    assert not (tmp_path / "out").exists()


def test_each_configuration_has_its_own_immutable_configmap_and_the_deployment_mounts_it(profile):
    """Issue 16 item 6: one immutable ConfigMap per configuration hash, named after the hash, and
    the pod template's config volume naming exactly it (no mutable ConfigMap a pod could see change)."""
    other = profile_from_weights({"NodeResourcesFit": 7})
    docs = {p: render.scheduler_objects(p) for p in (profile, other)}
    names = set()
    for objects in docs.values():
        cm, dep = objects[-2], objects[-1]
        text = cm["data"][CONFIG_KEY]
        digest = config_hash(text)
        assert cm["immutable"] is True
        assert cm["metadata"]["name"] == f"scoretune-scheduler-config-{digest[:10]}"
        assert cm["metadata"]["annotations"] == {CONFIG_HASH_ANNOTATION: digest}
        assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "scoretune-scheduler"
        assert cm["metadata"]["labels"]["scoretune.dev/config-of"] == "scoretune-scheduler"
        template = dep["spec"]["template"]
        assert template["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] == digest
        assert render.mounted_config_map(template["spec"]) == cm["metadata"]["name"]
        names.add(cm["metadata"]["name"])
    assert len(names) == 2


def test_the_volume_patch_is_valid_against_the_deployment_schema(profile):
    """The backend's strategic merge patch, applied to the rendered Deployment, gives the Deployment
    rendered for the new configuration (volumes merge by name) and still validates --strict."""
    from fakeapi import merge

    other = profile_from_weights({"NodeResourcesFit": 7})
    old, new = render.scheduler_objects(profile)[-1], render.scheduler_objects(other)[-1]
    digest = new["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    patched = merge(old, render.config_volume_patch(digest, SchedulerSettings().config_map_name(digest)))
    assert patched == new
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)
