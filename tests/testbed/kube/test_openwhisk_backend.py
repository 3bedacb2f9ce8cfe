"""The kube backend on OpenWhisk (issue 36, items 3 and 6) against the fake API server with a fake
OpenWhisk (fakewhisk.py): the reset that returns every step to the same state, the run through
OpenWhisk's API with the action pods' placements, the faults that void a run, and ``tune --backend
kube --platform openwhisk`` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakeapi import FakeKube, squeeze, write_kubeconfig
from fakewhisk import KEY, NS, FakeWhisk
from kubernetes import client
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import make_workload, write_workload
from testbed.errors import LabFault, TestbedError
from testbed.kube.backend import KubeTimeouts
from testbed.kube.openwhisk_backend import OpenWhiskBackend
from testbed.kube.render import scheduler_objects
from testbed.scheduler.config import default_profile

pytestmark = pytest.mark.integration

FUNCTIONS = ("aes", "float-ops")
STS = f"/apis/apps/v1/namespaces/{NS}/statefulsets/owdev-invoker"


@pytest.fixture
def lab():
    fake = FakeKube(functions=FUNCTIONS).start()
    fake.install_scheduler(scheduler_objects(default_profile("scoretune-scheduler"))[-2:])
    whisk = FakeWhisk(fake, FUNCTIONS)
    with whisk:
        yield fake, whisk
    fake.stop()


def _backend(fake: FakeKube, whisk: FakeWhisk, **kw) -> OpenWhiskBackend:
    cfg = client.Configuration(host=fake.url)
    cfg.retries = 0
    timeouts = KubeTimeouts(poll_s=0.01, rollout_s=2.0, rollback_s=2.0, drain_s=2.0, api_s=5.0, watch_s=1,
                            settle_s=0.3)
    return OpenWhiskBackend(api_client=client.ApiClient(cfg), api_url=whisk.url, auth=KEY, timeouts=timeouts,
                            start_lead_s=1.5, **kw)


def _workload():
    return make_workload(np.linspace(0.0, 0.9, 10), list(FUNCTIONS) * 5, metadata={"name": "ow"})


def test_reset_restarts_the_invokers_and_waits_for_them(lab):
    fake, whisk = lab
    whisk._new_container("aes")  # a container left by the last step
    b = _backend(fake, whisk)
    try:
        b.reset()
    finally:
        b.close()
    assert f"PATCH {STS}" in fake.calls
    assert whisk.action_pods() == []  # the restarted invokers removed their containers
    assert any("proxy/invokers" in c for c in fake.calls)
    patch = next(body for call, body, _ in fake.bodies if call == f"PATCH {STS}")
    assert "kubectl.kubernetes.io/restartedAt" in patch["spec"]["template"]["metadata"]["annotations"]


def test_every_reset_health_tests_the_invokers_under_the_reference_profile(lab):
    """Issue 45, item 5: the invokers' health-test pods are placed by the scheduler; each reset puts
    it on the reference (kube-scheduler's defaults) before restarting them, whatever profile the
    last step ran, and pre-pulls the health action's image (the controller's default nodejs kind)
    on every node with the suite's."""
    from fakewhisk import HEALTH_IMAGE

    from testbed.kube.images import normalize
    from testbed.kube.render import config_hash, config_text, scheduler_config
    from testbed.scheduler.config import profile_from_weights

    fake, whisk = lab
    b = _backend(fake, whisk)
    packed = profile_from_weights({"NodeResourcesFit": 100}, strategy="MostAllocated")
    try:
        b.reset()
        reference = whisk.restarted_under[-1]
        b.apply(packed)
        under_test = fake.deployments[fake.scheduler_name]["spec"]["template"]["metadata"]["annotations"][
            "scoretune.dev/config-hash"]
        assert under_test != reference
        b.reset()  # the next step: the last profile was the packed one
        assert whisk.restarted_under == [reference, reference]
        assert reference == config_hash(config_text(scheduler_config(default_profile(), b.settings)))
        assert all(normalize(HEALTH_IMAGE) in {normalize(r) for r in fake.cri[n].references()}
                   for n in fake.nodes), "pre-pulled on every node"
        assert b._image_record["platform_images"] == [HEALTH_IMAGE]
    finally:
        b.close()


def test_reset_is_a_lab_fault_while_an_invoker_is_not_up(lab):
    fake, whisk = lab
    b = _backend(fake, whisk)
    real = whisk._start_invokers

    def down() -> None:
        real()
        whisk.invoker_state["invoker1/owdev-invoker-1"] = "unhealthy"

    whisk._start_invokers = down
    try:
        with pytest.raises(LabFault, match=r"invoker\(s\) up .*invoker1/owdev-invoker-1: unhealthy"):
            b.reset()
    finally:
        b.close()


def test_a_run_goes_through_openwhisk_and_records_the_action_pods(lab, tmp_path):
    fake, whisk = lab
    b = _backend(fake, whisk)
    # the controller's health-test action left a container: not the suite's, recorded, not measured
    health = {"metadata": {"name": "wskowdev-invoker-00-1-whisksystem-invokerhealthtestaction0", "namespace": NS,
                           "labels": {"user-action-pod": "true", "invoker": "invoker0"}},
              "spec": {"nodeName": fake.nodes[0], "containers": [
                  {"name": "user-action", "image": "openwhisk/action-nodejs-v14:1.20.0",
                   "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "256Mi"}}}]},
              "status": {"phase": "Running"}}
    try:
        b.reset()
        fake.pods[health["metadata"]["name"]] = health
        result = b.run(_workload(), tmp_path / "run")
    finally:
        b.close()
    s = result.summary
    assert not s["failed"], s.get("failure")
    assert s["platform"] == "openwhisk"
    assert s["openwhisk"]["other_action_pods"] == [
        {"pod": health["metadata"]["name"], "node": fake.nodes[0], "memory": "256Mi"}]
    assert s["ok"] == 10 and s["cold_starts"] == 2 and whisk.invocations == 10
    assert s["openwhisk"]["actions"] == {fn: {"version": "0.0.1", "limits": whisk.actions[fn]["limits"]}
                                         for fn in FUNCTIONS}
    req = result.requests
    assert set(req["pod"].dropna()) == {p["metadata"]["name"] for fn in FUNCTIONS for p in whisk.action_pods(fn)}
    assert req["node"].notna().all() and req["activation_id"].notna().all()
    pl = result.placements
    assert sorted(pl["function"]) == sorted(FUNCTIONS) and pl["node"].notna().all()
    assert health["metadata"]["name"] not in set(pl["pod"])
    assert s["faults"] == [] and any(k.startswith(f"{NS}/owdev-controller") for k in s["data_plane"])


@pytest.mark.parametrize(("fault", "expected"), [
    ("throttle", "request(s): throttled"),
    ("internal", "request(s): whisk-error"),
    ("invoker", "invoker1/owdev-invoker-1: the invoker is unhealthy after the run (invoker-not-up"),
    ("controller", "owdev-controller-0: the data-plane pod restarted"),
])
def test_faults_of_openwhisk_void_the_run(lab, tmp_path, fault, expected):
    fake, whisk = lab
    b = _backend(fake, whisk)
    try:
        b.reset()
        if fault == "throttle":
            whisk.throttle = True
        elif fault == "internal":
            whisk.internal_error.add("aes")
        elif fault == "invoker":
            whisk.invoker_state["invoker1/owdev-invoker-1"] = "unhealthy"
        else:  # the controller is OOMKilled during the run
            whisk.on_first_invoke = lambda: fake.restart_infra("owdev-controller-0")
        result = b.run(_workload(), tmp_path / "run")
    finally:
        b.close()
    assert result.summary["failed"] and expected in result.summary["failure"]
    assert result.summary["failure"].startswith("void:")
    if fault != "controller":  # the run got as far as the rule: it is recorded
        assert result.summary["fault_rule"]["rule"] == "openwhisk-faults/1"
        assert result.summary["fault_rule"]["verdict"] == "void"


def test_a_pod_that_placement_kept_from_starting_is_scored_not_void(lab, tmp_path):
    """The one fault rule (issue 45, item 4): an action pod not Ready in time (statusCode 3 with
    KubernetesContainer's "Failed to run container with image") is the placement's doing, scored
    as errors as on the simulator and the embedded lab, and so is the invoker its system errors
    turned unhealthy; the rule applied is in summary.json."""
    fake, whisk = lab
    b = _backend(fake, whisk)
    try:
        b.reset()
        whisk.not_ready.add("aes")
        whisk.invoker_state["invoker1/owdev-invoker-1"] = "unhealthy"
        result = b.run(_workload(), tmp_path / "run")
    finally:
        b.close()
    s = result.summary
    assert not s["failed"], s.get("failure")
    rule = s["fault_rule"]
    n_aes = int((result.requests["function"] == "aes").sum())
    assert rule["verdict"] == "scored" and rule["counts"] == {"pod-not-ready": n_aes} and n_aes > 0
    assert rule["invokers"] == {"invoker1/owdev-invoker-1": "unhealthy: invoker-unhealthy-after-pod-start-failures"}
    assert s["errors"] == n_aes and s["ok"] == len(result.requests) - n_aes


def test_the_backend_needs_the_api_and_a_key(lab):
    fake, whisk = lab
    with pytest.raises(TestbedError, match="the API's URL is required"):
        OpenWhiskBackend(api_url="", auth=KEY)
    with pytest.raises(TestbedError, match="UUID:KEY"):
        OpenWhiskBackend(api_url=whisk.url, auth="nokey")


def _tune(fake, whisk, tmp_path, key_file, *extra):
    kubeconfig = write_kubeconfig(fake, tmp_path)
    write_workload(_workload(), tmp_path / "w.parquet")
    return CliRunner().invoke(app, [
        "tune", "--backend", "kube", "--platform", "openwhisk", "--kubeconfig", str(kubeconfig),
        "--openwhisk-api", whisk.url, "--openwhisk-auth", str(key_file), "--workload", str(tmp_path / "w.parquet"),
        "--method", "random", "--steps", "1", "--fault-wait-s", "0", "--out", str(tmp_path / "out"), *extra])


def test_tune_on_openwhisk_end_to_end(lab, tmp_path):
    fake, whisk = lab
    key = tmp_path / "auth.guest"
    key.write_text(KEY + "\n")
    result = _tune(fake, whisk, tmp_path, key)
    assert result.exit_code == 0, result.output + str(result.exception)
    out = tmp_path / "out"
    assert json.loads((out / "config.json").read_text())["platform"] == "openwhisk"
    runs = sorted((out / "runs").rglob("summary.json"))
    assert len(runs) >= 2 and all(not json.loads(p.read_text())["failed"] for p in runs)
    assert squeeze(fake.calls).count(f"PATCH {STS}") >= 2  # a reset before every step
    assert (out / "best-scheduler-config.yaml").exists()


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such key file"),
    ("not a key", "not an OpenWhisk key (UUID:KEY)"),
    ("23bc46b1-71f6-4ed5-8c54-816aa4f8c502:" + "a" * 64, "the chart's published guest key"),
])
def test_a_bad_key_file_is_one_line_naming_it(lab, tmp_path, content, expected):
    fake, whisk = lab
    key = tmp_path / "auth.guest"
    if content is not None:
        key.write_text(content)
    result = _tune(fake, whisk, tmp_path, key)
    assert result.exit_code == 1, result.output
    assert str(key) in result.output and expected in result.output
    assert "Traceback" not in result.output and whisk.invocations == 0


def test_every_request_on_openwhisk_is_allowed_to_the_driver_and_every_openwhisk_grant_used(lab, tmp_path):
    from test_access import _grants, allowed, request_of

    from testbed.kube.access import driver_objects, openwhisk_driver_objects

    fake, whisk = lab
    b = _backend(fake, whisk)
    try:
        b.reset()
        assert not b.run(_workload(), tmp_path / "run").failed
    finally:
        b.close()
    # a service proxy's path goes on after the subresource: RBAC sees services/proxy on name:port
    calls = [c.split("/proxy/")[0] + "/proxy" if "/proxy/" in c else c for c in dict.fromkeys(fake.calls)]
    requests = [request_of(c) for c in calls]
    grants = _grants([*driver_objects(), *openwhisk_driver_objects()])
    assert [r for r in requests if not allowed(grants, r)] == []
    ours = _grants(openwhisk_driver_objects())
    used = {(verb, group, res) for verb, group, res, ns, name in requests if ns == NS and allowed(ours, (verb, group, res, ns, name))}
    granted = {(v, g, r) for _, rule in ours for v in rule["verbs"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted - used == set(), "granted in OpenWhisk's namespace but never requested"


def test_a_workload_above_the_controllers_limit_is_refused_before_any_request(lab, tmp_path):
    fake, whisk = lab
    whisk.per_minute = 9  # the busiest minute of the workload has 10
    b = _backend(fake, whisk)
    try:
        with pytest.raises(TestbedError, match="allows 9 invocations a minute .* busiest minute has 10"):
            b.run(_workload(), tmp_path / "run")
    finally:
        b.close()
    assert whisk.invocations == 0


def test_an_action_that_keeps_its_logs_is_named_and_recorded(lab, tmp_path, caplog):
    """Upstream reads an activation's logs through kube-apiserver whenever ``limits.logs`` is not 0
    (issue 45, item 3): an action deployed that way is named in one warning and its limit recorded."""
    fake, whisk = lab
    whisk.actions["aes"]["limits"]["logs"] = 10
    b = _backend(fake, whisk)
    try:
        b.reset()
        with caplog.at_level("WARNING", logger="testbed.kube.openwhisk_backend"):
            result = b.run(_workload(), tmp_path / "run")
    finally:
        b.close()
    warned = [r.getMessage() for r in caplog.records if "log limit" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("OpenWhisk action aes keeps a log limit of 10 MB")
    assert result.summary["openwhisk"]["actions"]["aes"]["limits"]["logs"] == 10
    assert result.summary["openwhisk"]["actions"]["float-ops"]["limits"]["logs"] == 0


@pytest.mark.parametrize(("reason", "scored"), [
    ("Pending with no node for 31 s: 0/3 nodes are available: 3 Insufficient memory.", True),
    ("a container restarted during the run: restartCount 0 -> 1 (last exit 137: OOMKilled)", True),
    ("the pod failed: Evicted: The node was low on resource: memory.", True),
    ("the pod failed: OutOfmemory: Node didn't have enough resource: memory", True),
    ("container user-action is ImagePullBackOff: Back-off pulling image", False),
    ("container user-action is CreateContainerConfigError: secret not found", False),
    ("a container restarted during the run: restartCount 0 -> 1 (last exit 1: Error)", False),
])
def test_an_action_pods_trouble_is_scored_only_when_placement_caused_it(reason, scored):
    """The fault watch's words for an action pod (testbed/kube/faults.py): no capacity, an OOM kill
    or an eviction is the placement's doing (scored under the one rule); a pull or a config error is not."""
    from testbed.kube.openwhisk_backend import placement_consequence

    assert placement_consequence(reason) is scored
