"""KubeBackend against a fake API server at the HTTP level (fakeapi.py) — a stand-in for the real
cluster these tests cannot reach: the exact sequence of API calls of apply/reset/run, the rollback
path, timeouts and API errors with clear messages, and a run recorded as failed."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import yaml
from fakeapi import make_backend, squeeze, write_kubeconfig
from fakecri import resolved

from loadgen.workload import make_workload
from testbed.backend import Backend
from testbed.errors import ConfigError, LabFault, TestbedError
from testbed.kube.backend import KubeBackend, fill_nodes
from testbed.kube.render import (
    CONFIG_HASH_ANNOTATION,
    CONFIG_KEY,
    config_hash,
    config_map,
    config_text,
    config_volume_patch,
    mounted_config_map,
    scheduler_config,
)
from testbed.scheduler.config import default_profile, profile_from_weights, profile_record

CMS = "/api/v1/namespaces/kube-system/configmaps"
DEP = "/apis/apps/v1/namespaces/kube-system/deployments/scoretune-scheduler"
PODS = "/api/v1/namespaces/kube-system/pods"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/scoretune-scheduler"
FN_PODS = "/api/v1/namespaces/default/pods"
REVISIONS = "/apis/serving.knative.dev/v1/namespaces/default/revisions"

BINPACK = profile_from_weights({"NodeResourcesFit": 5}, strategy="MostAllocated")
SPREAD = profile_from_weights({"NodeResourcesBalancedAllocation": 7})


def _text(profile) -> str:
    return config_text(scheduler_config(profile))


def _cm_name(profile) -> str:
    return f"scoretune-scheduler-config-{config_hash(_text(profile))[:10]}"


def _cm(profile) -> str:
    return f"{CMS}/{_cm_name(profile)}"


def _mounted(fake) -> str | None:
    return mounted_config_map(fake.deployments["scoretune-scheduler"]["spec"]["template"]["spec"])


def _running(fake) -> str:
    return fake.deployments["scoretune-scheduler"]["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]


def test_it_is_a_backend(backend):
    assert isinstance(backend, Backend) and backend.name == "kube"


def test_apply_writes_rolls_and_waits_for_the_lease(fake, backend):
    backend.apply(BINPACK)
    assert squeeze(fake.calls) == [
        f"GET {DEP}",
        f"POST {CMS}", f"PATCH {DEP}",  # the configuration's own ConfigMap, then the Deployment onto it
        f"GET {DEP}", f"GET {PODS}",  # the Deployment controller has not observed the change yet
        f"GET {DEP}", f"GET {PODS}", f"GET {LEASE}",
        f"GET {CMS}",  # garbage collection: two ConfigMaps, both kept
    ]
    (cm_call, cm_body, _), (dep_call, dep_body, dep_type) = fake.bodies
    assert cm_body == config_map(_text(BINPACK))
    assert cm_body["immutable"] is True and cm_body["metadata"]["name"] == _cm_name(BINPACK)
    assert cm_body["metadata"]["annotations"] == {CONFIG_HASH_ANNOTATION: config_hash(_text(BINPACK))}
    assert dep_body == config_volume_patch(config_hash(_text(BINPACK)), _cm_name(BINPACK))
    assert dep_type == "application/strategic-merge-patch+json"
    shipped = yaml.safe_load(fake.configmaps[_cm_name(BINPACK)]["data"][CONFIG_KEY])
    assert shipped["profiles"][0]["schedulerName"] == "scoretune-scheduler"
    # the Deployment, and the pod that holds the lease, mount exactly that ConfigMap
    assert _mounted(fake) == _cm_name(BINPACK) and _running(fake) == config_hash(_text(BINPACK))
    leader = next(p for p in fake.pods.values() if fake.lease_holder.startswith(p["metadata"]["name"]))
    assert mounted_config_map(leader["spec"]) == _cm_name(BINPACK)
    assert fake.lease_holder.startswith(f"scoretune-scheduler-{config_hash(_text(BINPACK))[:6]}")
    assert set(fake.configmaps) == {_cm_name(default_profile("scoretune-scheduler")), _cm_name(BINPACK)}


def test_applying_the_running_configuration_creates_nothing(fake, backend):
    backend.apply(BINPACK)
    fake.calls.clear()
    fake.bodies.clear()
    before = {k: v["metadata"]["resourceVersion"] for k, v in fake.configmaps.items()}
    backend.apply(BINPACK)
    # the read of the Deployment for its hash and the first status read collapse into one; the
    # ConfigMap is read to check it holds the configuration and is immutable, never written
    assert fake.calls == [f"GET {DEP}", f"GET {_cm(BINPACK)}", f"GET {DEP}", f"GET {PODS}", f"GET {LEASE}"]
    assert fake.bodies == []
    assert {k: v["metadata"]["resourceVersion"] for k, v in fake.configmaps.items()} == before


def test_a_configuration_that_already_has_its_configmap_is_not_recreated(fake, backend):
    """Applied before, then another one, then back: 409 AlreadyExists, content checked, no new object."""
    backend.apply(BINPACK)
    backend.apply(SPREAD)
    fake.calls.clear()
    backend.apply(BINPACK)
    assert squeeze(fake.calls)[:4] == [f"GET {DEP}", f"POST {CMS}", f"GET {_cm(BINPACK)}", f"PATCH {DEP}"]
    assert _mounted(fake) == _cm_name(BINPACK) and _running(fake) == config_hash(_text(BINPACK))


def test_a_foreign_configmap_with_the_name_is_refused(fake, backend):
    """Same name but another content, or mutable: it proves nothing, so the Deployment is not moved."""
    name = _cm_name(BINPACK)
    fake._store_configmap({"metadata": {"name": name, "namespace": "kube-system"}, "data": {CONFIG_KEY: "junk"}})
    with pytest.raises(TestbedError, match=rf"^ConfigMap kube-system/{name} holds configuration [0-9a-f]{{16}}, not "
                                           rf"configuration {config_hash(_text(BINPACK))}: .*delete configmap {name}"):
        backend.apply(BINPACK)
    assert f"PATCH {DEP}" not in fake.calls
    fake.configmaps[name]["data"][CONFIG_KEY] = _text(BINPACK)
    with pytest.raises(TestbedError, match=rf"^ConfigMap kube-system/{name} is not immutable"):
        backend.apply(BINPACK)
    assert f"PATCH {DEP}" not in fake.calls


def test_the_fake_refuses_to_mutate_an_immutable_configmap_like_the_api_server(fake, backend):
    """kubernetes/kubernetes ValidateConfigMapUpdate: data, binaryData and immutable are frozen."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    backend.apply(BINPACK)
    core = client.CoreV1Api(backend.api_client)
    name = _cm_name(BINPACK)
    for call, body in ((core.patch_namespaced_config_map, {"data": {CONFIG_KEY: _text(SPREAD)}}),
                       (core.patch_namespaced_config_map, {"binaryData": {"x": "eA=="}}),
                       (core.replace_namespaced_config_map, {**fake.configmaps[name], "data": {CONFIG_KEY: "x"}})):
        with pytest.raises(ApiException) as err:
            call(name, "kube-system", body)
        assert err.value.status == 422
        status = json.loads(err.value.body)
        assert status["reason"] == "Invalid"
        assert status["message"].startswith(f'ConfigMap "{name}" is invalid: ')
        assert "Forbidden: field is immutable when `immutable` is set" in status["message"]
    with pytest.raises(ApiException, match="immutable: Forbidden") as err:
        core.patch_namespaced_config_map(name, "kube-system", {"immutable": False})
    assert fake.configmaps[name]["data"][CONFIG_KEY] == _text(BINPACK) and fake.configmaps[name]["immutable"] is True
    # metadata may change (ValidateObjectMetaUpdate only)
    core.patch_namespaced_config_map(name, "kube-system", {"metadata": {"labels": {"extra": "yes"}}})
    assert fake.configmaps[name]["metadata"]["labels"]["extra"] == "yes"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("kube-system", config_map(_text(BINPACK)))
    assert err.value.status == 409


def test_old_configmaps_are_collected_keeping_the_one_in_use_and_the_previous(fake):
    backend = make_backend(fake)
    backend.config_history = 2
    profiles = [profile_from_weights({"NodeResourcesFit": w}) for w in (6, 7, 8, 9)]
    for p in profiles:
        backend.apply(p)
    assert set(fake.configmaps) == {_cm_name(profiles[-2]), _cm_name(profiles[-1])}
    deleted = [c for c in fake.calls if c.startswith("DELETE")]
    assert deleted == [f"DELETE {_cm(default_profile('scoretune-scheduler'))}", f"DELETE {_cm(profiles[0])}",
                       f"DELETE {_cm(profiles[1])}"]
    backend.close()


def test_collection_keeps_the_newest_up_to_the_history_and_ignores_other_configmaps(fake, backend):
    fake._store_configmap({"metadata": {"name": "scoretune-scheduler-config", "namespace": "kube-system",
                                        "labels": {"app.kubernetes.io/name": "scoretune-scheduler"}},
                           "data": {CONFIG_KEY: "legacy"}})
    profiles = [profile_from_weights({"NodeResourcesFit": w}) for w in (6, 7, 8, 9)]
    for p in profiles:
        backend.apply(p)
    assert set(fake.configmaps) == {"scoretune-scheduler-config", *(_cm_name(p) for p in profiles[-3:])}


def test_a_failed_collection_does_not_fail_the_apply(fake, backend, caplog):
    fake.fail_paths[f"GET {CMS}"] = (403, 'configmaps is forbidden: User "lab" cannot list')
    backend.apply(BINPACK)
    assert _mounted(fake) == _cm_name(BINPACK)
    assert "could not delete old scheduler ConfigMaps" in caplog.text


@pytest.mark.parametrize("history", [1, 0, -3, True, 2.5, "3"])
def test_config_history_below_two_is_refused(fake, history):
    from kubernetes import client

    with pytest.raises(TestbedError, match="config_history must be an integer >= 2"):
        KubeBackend(api_client=client.ApiClient(client.Configuration(host=fake.url)), config_history=history)


def test_a_running_configuration_whose_configmap_was_deleted_gets_it_back(fake, backend):
    backend.apply(BINPACK)
    fake.configmaps.pop(_cm_name(BINPACK))
    fake.calls.clear()
    backend.apply(BINPACK)
    assert fake.calls[:3] == [f"GET {DEP}", f"GET {_cm(BINPACK)}", f"POST {CMS}"]
    assert fake.configmaps[_cm_name(BINPACK)]["immutable"] is True
    assert f"PATCH {DEP}" not in fake.calls


def test_a_crashing_scheduler_is_rolled_back(fake, backend):
    backend.apply(BINPACK)
    good = _text(BINPACK)
    fake.outcome = lambda text: "crash" if text == _text(SPREAD) else "ready"
    fake.calls.clear()
    with pytest.raises(TestbedError) as err:
        backend.apply(SPREAD)
    msg = str(err.value)
    assert "CrashLoopBackOff" in msg and "couldn't create scheduler: invalid configuration" in msg
    assert "rolled back" in msg and config_hash(good) in msg and _cm_name(BINPACK) in msg
    assert squeeze(fake.calls) == [
        f"GET {DEP}",
        f"POST {CMS}", f"PATCH {DEP}",
        f"GET {DEP}", f"GET {PODS}",  # the new pod crash-loops: give up at once
        f"PATCH {DEP}",  # the previous ConfigMap, the previous hash
        f"GET {DEP}", f"GET {PODS}", f"GET {DEP}", f"GET {PODS}", f"GET {LEASE}",
    ]
    assert _mounted(fake) == _cm_name(BINPACK) and _running(fake) == config_hash(good)
    assert fake.bodies[-1][1] == config_volume_patch(config_hash(good), _cm_name(BINPACK))
    assert fake.configmaps[_cm_name(BINPACK)]["data"][CONFIG_KEY] == good  # never rewritten


def test_a_scheduler_that_never_gets_ready_times_out_and_is_rolled_back(fake):
    backend = make_backend(fake, rollout_s=0.3)
    fake.outcome = lambda text: "pending" if text == _text(SPREAD) else "ready"
    with pytest.raises(TestbedError) as err:
        backend.apply(SPREAD)
    msg = str(err.value)
    # what it was still waiting for at the deadline depends on how far the fake's Deployment
    # controller got in 0.3 s on a loaded machine; either way it names it and the configuration
    assert re.match(r"timed out after 0 s waiting for (1 old replica\(s\) to terminate|the Deployment controller "
                    r"to observe the change) \(Deployment kube-system/scoretune-scheduler, the new configuration ",
                    msg), msg
    assert "rolled back" in msg
    calls = squeeze(fake.calls)
    assert calls[:3] == [f"GET {DEP}", f"POST {CMS}", f"PATCH {DEP}"]
    assert calls[-6:] == [f"PATCH {DEP}", f"GET {DEP}", f"GET {PODS}", f"GET {DEP}", f"GET {PODS}", f"GET {LEASE}"]
    assert _mounted(fake) == _cm_name(default_profile("scoretune-scheduler"))
    backend.close()


def test_a_pod_that_mounts_another_configmap_than_its_hash_names_fails(fake, backend):
    """The hash annotation alone proves nothing: the pod's volume must name that hash's ConfigMap."""
    backend.apply(BINPACK)
    for pod in fake.pods.values():
        if pod["metadata"]["labels"].get("app.kubernetes.io/name") != fake.scheduler_name:
            continue  # the data plane
        pod["spec"]["volumes"][0]["configMap"]["name"] = "scoretune-scheduler-config"
    with pytest.raises(TestbedError, match=r"scheduler pod scoretune-scheduler-\w+-abcde carries the current "
                                           r"configuration [0-9a-f]{16} but mounts ConfigMap scoretune-scheduler-config, "
                                           rf"not {_cm_name(BINPACK)}"):
        backend.apply(BINPACK)


def test_a_failed_rollback_says_both(fake, backend):
    backend.apply(BINPACK)
    fake.outcome = lambda text: "crash"
    with pytest.raises(TestbedError, match="rolling back to the previous configuration also failed: scheduler pod"):
        backend.apply(SPREAD)


def test_an_invalid_profile_never_reaches_the_cluster(fake, backend):
    bad = dataclasses.replace(BINPACK, percentage_of_nodes_to_score=150)
    with pytest.raises(ConfigError, match="percentageOfNodesToScore"):
        backend.apply(bad)
    assert fake.calls == []


def test_a_missing_scheduler_says_what_is_missing(fake, backend):
    fake.deployments.clear()
    with pytest.raises(TestbedError, match=r"^Kubernetes API: reading Deployment kube-system/scoretune-scheduler "
                                           r'failed: 404 Not Found: deployments.apps "scoretune-scheduler" not found$'):
        backend.apply(BINPACK)


def test_a_configmap_that_cannot_be_created_changes_nothing(fake, backend):
    fake.fail_paths[f"POST {CMS}"] = (403, 'configmaps is forbidden: User "lab" cannot create')
    with pytest.raises(TestbedError, match=rf"^Kubernetes API: creating ConfigMap kube-system/{_cm_name(BINPACK)} "
                                           r"failed: 403 Forbidden: configmaps is forbidden"):
        backend.apply(BINPACK)
    assert fake.calls == [f"GET {DEP}", f"POST {CMS}"]
    assert _mounted(fake) == _cm_name(default_profile("scoretune-scheduler"))


def test_an_api_error_names_the_call(fake, backend):
    fake.fail_paths[DEP] = (403, 'deployments.apps "scoretune-scheduler" is forbidden: User "lab" cannot get')
    with pytest.raises(TestbedError, match=r"reading Deployment kube-system/scoretune-scheduler failed: 403 Forbidden: "
                                           r'deployments.apps "scoretune-scheduler" is forbidden') as err:
        backend.apply(BINPACK)
    assert not isinstance(err.value, LabFault)  # RBAC is the setup's, not a passing fault: the experiment stops


def test_a_server_error_is_a_lab_fault_the_loop_retries(fake, backend):
    fake.fail_paths[DEP] = (503, "the server is currently unable to handle the request")
    with pytest.raises(LabFault, match=r"reading Deployment kube-system/scoretune-scheduler failed: 503"):
        backend.apply(BINPACK)


def test_an_unreachable_api_server_names_the_address(fake):
    backend = make_backend(fake, api_s=2.0)
    fake.stop()
    with pytest.raises(LabFault, match=rf"^Kubernetes API at {fake.url}: reading Deployment"):
        backend.apply(BINPACK)


def test_reset_waits_until_no_function_pod_remains(fake, backend):
    fake.add_function_pod("fn-a")
    fake.add_function_pod("fn-b")
    fake.drain_after = 3
    backend.reset()
    calls = squeeze(fake.calls)
    assert calls[0] == f"GET {FN_PODS}" and f"GET {FN_PODS}" not in calls[1:]  # then the image state (test_images.py)
    assert fake.function_lists == 3 and not fake._function_pods(None)


def test_reset_times_out_naming_the_pods(fake):
    backend = make_backend(fake, drain_s=0.2)
    name = fake.add_function_pod("fn-a")
    with pytest.raises(TestbedError, match=rf"scale to zero; 1 pod\(s\) remain: {name} \(fn-a\)$"):
        backend.reset()


def _workload(n: int = 20, duration_s: float = 2.0):
    return make_workload(np.linspace(0.0, duration_s, n), ["fn-a", "fn-b"] * (n // 2), metadata={"name": "smoke"})


@pytest.mark.integration
def test_run_replays_and_records_placements(fake, backend, tmp_path):
    """Real Locust replay against the fake's ingress; pods come and go through the watch."""
    backend.apply(BINPACK)
    fake.calls.clear()
    fake.watch_errors.append((410, "Expired", "too old resource version: 1000 (1002)"))
    fake.pull_s["node-2"] = "850ms"
    result = backend.run(_workload(), tmp_path / "run", seed=7)
    assert not result.failed, result.summary.get("failure")
    watched = {f"GET {PODS}", f"GET {LEASE}", f"GET {REVISIONS}", "GET /api/v1/nodes",  # the FaultWatch's looks
               *(f"GET /api/v1/namespaces/{ns}/pods" for ns in ("knative-serving", "kourier-system", "kube-flannel")),
               *(f"GET /api/v1/namespaces/knative-serving/configmaps/{cm}" for cm in
                 ("config-autoscaler", "config-deployment", "config-features", "config-network"))}
    assert watched <= set(fake.calls)
    calls = squeeze([c for c in fake.calls if c not in watched])
    assert calls[:7] == [
        "GET /api/v1/pods",
        "GET /apis/serving.knative.dev/v1/namespaces/default/services/fn-a",
        "GET /apis/serving.knative.dev/v1/namespaces/default/services/fn-b",
        f"GET {FN_PODS}",
        f"GET {FN_PODS} watch",  # answered 410 Gone: list again, watch from there
        f"GET {FN_PODS}",
        f"GET {FN_PODS} watch",
    ]
    assert set(calls[7:-1]) <= {f"GET {FN_PODS} watch"}
    assert calls[-1] == "GET /api/v1/namespaces/default/events"  # the kubelets' Pulled events, once
    assert fake.ingress_requests == {"fn-a": 10, "fn-b": 10}
    req = result.requests
    assert (req["status"] == "ok").all()
    assert dict(zip(req["function"], req["node"], strict=True)) == {"fn-a": "node-1", "fn-b": "node-2"}
    assert int(req["cold_start"].sum()) == 2
    pl = result.placements.sort_values("function")
    assert pl["function"].tolist() == ["fn-a", "fn-b"] and pl["node"].tolist() == ["node-1", "node-2"]
    # one clock origin: each pod appears when its function's first (cold) request arrives
    first_sent = req.groupby("function")["sent_s"].min()
    assert (abs(pl.set_index("function")["created_s"] - first_sent) < 2.0).all()
    assert (pl["scheduled_s"] >= pl["created_s"]).all() and (pl["ready_s"] >= pl["scheduled_s"]).all()
    assert pl["start_s"].tolist() == [2.0, 2.0] and pl["init_s"].tolist() == [1.0, 1.0]
    assert pl["image_pull_s"].tolist() == [1.234, 0.85]  # the user container's pull, not queue-proxy's
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["backend"] == "kube" and summary["seed"] == 7 and summary["failed"] is False
    assert summary["platform"] == "knative"  # named at the top level, as every backend names it
    assert summary["scheduler"]["config_hash"] == config_hash(_text(BINPACK))
    assert set(summary["profile"]) == {"scheduler_name", "weights", "config"}  # the shape of every backend
    assert summary["profile"] == profile_record(BINPACK) and summary["profile"]["weights"]["NodeResourcesFit"] == 5
    assert summary["placements"] == {"pods": 2, "nodes": ["node-1", "node-2"]}
    twin = summary["cluster"]  # the real cluster in the cluster-spec model, loadable by sim
    assert [g["name"] for g in twin["groups"]] == ["node-1", "node-2"]
    # the kubelet reports every name of an image (its tag and its repo digest), as ImageLocality reads them
    assert twin["groups"][0]["cpu"] == "4000m" and twin["groups"][0]["images"] == [
        "ghcr.io/scoretune/fn-float-ops:0.1.0", resolved("ghcr.io/scoretune/fn-float-ops:0.1.0")]
    assert (tmp_path / "run" / "cluster" / "nodes.json").exists()
    assert summary["versions_kube"] == {"pinned": "1.36.0", "kubelets": ["v1.36.0"]}
    replay_info = next(v for k, v in summary.items() if k.endswith("replay"))  # the replay's own record
    assert replay_info["host_template"] == "{function}.default.example.com"


def test_a_service_that_is_not_ready_fails_the_run(fake, backend, tmp_path):
    fake.services["fn-b"]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "RevisionMissing", "message": "Revision fn-b-00001 failed"}]
    result = backend.run(_workload(), tmp_path / "run")
    assert result.failed
    assert result.summary["failure"] == "Knative Service default/fn-b is not Ready: Revision fn-b-00001 failed"
    assert len(result.requests) == 20 and (result.requests["status"] == "error").all()
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["failed"] is True
    assert written["profile"] is None  # nothing applied: the scheduler kept its configuration, said so


def test_an_api_error_before_the_replay_fails_the_run(fake, backend, tmp_path):
    fake.fail_paths[FN_PODS] = (500, "etcdserver: request timed out")
    result = backend.run(_workload(), tmp_path / "run")
    assert result.failed
    assert result.summary["failure"] == ("Kubernetes API: listing function pods in default failed: "
                                         "500 Internal Server Error: etcdserver: request timed out")
    assert fake.ingress_requests == {}


@pytest.mark.integration
def test_a_watch_that_breaks_during_the_run_fails_it(fake, backend, tmp_path):
    """The replay completes, but placements are incomplete: the run must not read as good."""
    fake.watch_errors.append((500, "InternalError", "watch chan error: etcdserver: no leader"))
    result = backend.run(_workload(n=4, duration_s=0.5), tmp_path / "run")
    assert result.failed
    assert result.summary["failure"] == ("watching pods in default failed: "
                                         "500 InternalError: watch chan error: etcdserver: no leader")
    assert (result.requests["status"] == "ok").all()  # what was measured is kept


def test_a_failed_write_is_rolled_back(fake, backend):
    backend.apply(BINPACK)
    fake.calls.clear()
    fake.fail_paths[f"PATCH {DEP}"] = (500, "etcdserver: leader changed")
    with pytest.raises(TestbedError) as err:
        backend.apply(SPREAD)
    assert str(err.value) == (
        "Kubernetes API: rolling Deployment kube-system/scoretune-scheduler failed: 500 Internal Server Error: "
        "etcdserver: leader changed; rolling back to the previous configuration also failed: Kubernetes API: "
        "rolling Deployment kube-system/scoretune-scheduler failed: 500 Internal Server Error: etcdserver: leader changed")
    assert fake.calls == [f"GET {DEP}", f"POST {CMS}", f"PATCH {DEP}", f"PATCH {DEP}"]
    assert _mounted(fake) == _cm_name(BINPACK)


def test_a_function_that_is_not_deployed_fails_the_run(fake, backend, tmp_path):
    workload = make_workload([0.0, 0.5], ["fn-a", "fn-zz"])
    result = backend.run(workload, tmp_path / "run")
    assert result.failed and "fn-zz" in result.summary["failure"]
    assert fake.calls == []


def test_functions_are_discovered_when_not_given(fake, tmp_path):
    backend = make_backend(fake)
    backend.functions = None
    fake.add_function_pod("fn-a")
    fake.drain_after = 1
    backend.reset()
    assert squeeze(fake.calls)[:2] == ["GET /apis/serving.knative.dev/v1/namespaces/default/services", f"GET {FN_PODS}"]


def test_fill_nodes_maps_pod_names_and_single_node_functions():
    import pandas as pd

    requests = pd.DataFrame({
        "function": ["a", "a", "b", "b"], "sent_s": [1.0, 2.0, 1.0, 5.0], "finished_s": [1.5, 2.5, 1.5, 5.5],
        "node": [None, "a-pod-1", None, None]})
    placements = pd.DataFrame({
        "pod": ["a-pod-1", "b-pod-1", "b-pod-2"], "function": ["a", "b", "b"], "node": ["n1", "n1", "n2"],
        "created_s": [0.0, 0.0, 4.0], "deleted_s": [np.nan, 3.0, np.nan]})
    out = fill_nodes(requests, placements)
    # a: one pod on n1; b at 1 s: only b-pod-1 (n1) alive; b at 5 s: only b-pod-2 (n2)
    assert out["node"].tolist() == ["n1", "n1", "n1", "n2"]
    placements.loc[2, "created_s"] = 0.0
    placements.loc[1, "deleted_s"] = np.nan
    assert fill_nodes(requests, placements)["node"].tolist()[2:] == [None, None]  # two nodes: unknown


def test_no_kubeconfig_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nope.conf"
    with pytest.raises(TestbedError, match=f"cannot load a Kubernetes client configuration from {missing}"):
        KubeBackend(kubeconfig=str(missing))


def test_default_profile_renders_for_the_second_scheduler():
    doc = scheduler_config(default_profile())
    assert [p["schedulerName"] for p in doc["profiles"]] == ["scoretune-scheduler"]


def test_cli_status_reports_the_scheduler_and_the_functions(fake, tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app

    fake.add_function_pod("fn-b")
    result = CliRunner().invoke(app, ["kube", "status", "--kubeconfig", str(write_kubeconfig(fake, tmp_path))])
    assert result.exit_code == 0, result.output + str(result.exception)
    status = json.loads(result.output[result.output.index("{"):])
    sched = status["scheduler"]
    assert sched["rolled_out"] and sched["config_map_matches"] and sched["waiting_for"] is None
    assert sched["config_map"] == f"scoretune-scheduler-config-{sched['config_hash'][:10]}"
    assert sched["config_map_immutable"] is True
    assert sched["leader"].startswith(f"scoretune-scheduler-{sched['config_hash'][:6]}")
    assert status["functions"]["fn-a"] == {"ready": True, "url": "http://fn-a.default.example.com",
                                           "scheduler": "scoretune-scheduler", "pods": 0}
    assert status["functions"]["fn-b"]["pods"] == 1


def test_cli_apply_rolls_the_lab_scheduler_through_awrite_kubeconfig(fake, tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app
    from testbed.scheduler.config import SchedulerConfig, config_to_dict

    kubeconfig = write_kubeconfig(fake, tmp_path)
    config = tmp_path / "best-scheduler-config.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(SchedulerConfig(profiles=(BINPACK,)))))
    result = CliRunner().invoke(app, ["kube", "apply", "--config", str(config), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.output + str(result.exception)
    assert f"POST {CMS}" in fake.calls and f"PATCH {DEP}" in fake.calls
    shipped = yaml.safe_load(fake.configmaps[_mounted(fake)]["data"][CONFIG_KEY])
    assert shipped["profiles"][0]["schedulerName"] == "scoretune-scheduler"  # renamed from default-scheduler
    assert shipped["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]["type"] == "MostAllocated"
