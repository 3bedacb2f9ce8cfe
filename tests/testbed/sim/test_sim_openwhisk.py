"""The simulator's OpenWhisk platform: conservation, the pool's and balancer's rules seen in a
whole run, and the weights acting only through where new containers go."""

from __future__ import annotations

import numpy as np
import pytest
from sim_fixtures import make_cluster, make_spec

from functions.errors import InputError
from loadgen.workload import make_workload
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.scheduler.config import profile_from_weights
from testbed.sim import kernel as K
from testbed.sim.backend import evaluate, simulate
from testbed.sim.engine import SimConfig
from testbed.sim.results import placements_frame, requests_frame


def ow(**kw) -> SimConfig:
    return SimConfig(platform="openwhisk", openwhisk=OpenWhiskConfig(**kw))


def _interval_overlap(frame, pod_uid) -> int:
    """The most activations one container ran at once."""
    events = sorted([(s, 1) for s in frame["start"]] + [(f, -1) for f in frame["finish"]], key=lambda x: (x[0], x[1]))
    top = cur = 0
    for _, d in events:
        cur += d
        top = max(top, cur)
    return top


@pytest.fixture(scope="module")
def run(small_cluster, small_specs):
    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(0, 60, 600))
    fns = rng.choice(["a", "b", "c"], size=600)
    wl = make_workload(t, fns)
    out = simulate(small_cluster, wl, None, seed=3, functions=small_specs, config=ow(user_memory_mb=1024))
    return out, wl


def test_every_request_ends_once_and_served_ones_name_their_pod(run) -> None:
    out, wl = run
    assert len(out.status) == len(wl.frame)
    assert set(np.unique(out.status)) <= {K.ST_OK, K.ST_ERROR, K.ST_TIMEOUT}
    ok = out.status == K.ST_OK
    assert ok.all()
    assert (out.node[ok] >= 0).all() and (out.pod_uid[ok] >= 0).all()
    assert (out.finish_s[ok] >= out.start_s[ok]).all() and (out.start_s[ok] >= out.arrival_s[ok]).all()


def test_each_cold_activation_made_exactly_one_pod(run) -> None:
    out, _ = run
    assert int(out.cold.sum()) == len(out.pods)
    firsts = {}
    for i in np.argsort(out.start_s, kind="stable"):
        firsts.setdefault(int(out.pod_uid[i]), i)
    # a pod's first activation is the cold one that created it
    assert all(out.cold[i] for i in firsts.values())


def test_a_container_never_runs_more_than_its_action_concurrency(run, small_specs) -> None:
    out, _ = run
    for uid in np.unique(out.pod_uid):
        rows = out.pod_uid == uid
        f = out.function_names[int(out.fn[rows][0])]
        assert set(out.fn[rows]) == {out.fn[rows][0]}  # a container serves one action
        frame = {"start": out.start_s[rows], "finish": out.finish_s[rows] - 0.005}
        assert _interval_overlap(frame, uid) <= (small_specs[f].container_concurrency or 1)


def test_each_invoker_keeps_its_containers_within_user_memory(run) -> None:
    out, _ = run
    pl = placements_frame(out)
    pl["invoker"] = pl["pod"].str.extract(r"^wsk(\d+)-")[0].astype(int)
    pl["mb"] = 128  # every fixture action is 128 MB
    for _, group in pl.groupby("invoker"):
        times = np.concatenate([group["created_s"].to_numpy()])
        deleted = group["deleted_s"].fillna(np.inf).to_numpy()
        for t in times:
            live = (group["created_s"].to_numpy() <= t) & (deleted > t)
            assert group["mb"][live].sum() <= 1024


def test_same_inputs_same_run(small_cluster, small_specs, run) -> None:
    out, wl = run
    again = simulate(small_cluster, wl, None, seed=3, functions=small_specs, config=ow(user_memory_mb=1024))
    np.testing.assert_array_equal(out.finish_s, again.finish_s)
    np.testing.assert_array_equal(out.node, again.node)


def test_warm_reuse_then_cold_again_after_the_idle_timeout() -> None:
    spec = make_spec("a", cc=1, cpu_mean=0.1, start_s=0.5, init_s=0.5)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "2", "memory": "4Gi", "images": ["registry.example/a:1"]}])
    wl = make_workload([0.0, 5.0, 5.0 + 610.0 + 10.0], ["a", "a", "a"])
    out = simulate(cluster, wl, None, functions={"a": spec}, config=ow())
    assert out.cold.tolist() == [True, False, True]
    assert out.pod_uid[0] == out.pod_uid[1] != out.pod_uid[2]
    first = out.pods[0]
    assert first.deleted_s == pytest.approx(out.finish_s[1] - 0.005 + 610.0)  # pause-grace 10 s + idle 10 min
    # cold: 5 ms dispatch, 0.1 s pod creation, start 0.5 s seen at the next 1 s poll, init 0.5 s, work 0.1 s, 5 ms ack
    assert out.finish_s[0] - out.arrival_s[0] == pytest.approx(0.005 + 1.0 + 0.5 + 0.1 + 0.005)
    assert out.finish_s[1] - out.arrival_s[1] == pytest.approx(0.005 + 0.1 + 0.005)


def test_activations_share_a_node_fairly() -> None:
    spec = make_spec("a", cc=1, cpu_mean=1.0)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "1", "memory": "4Gi", "images": ["registry.example/a:1"]}])
    wl = make_workload([0.0, 0.0], ["a", "a"])
    out = simulate(cluster, wl, None, functions={"a": spec}, config=ow(pod_create_delay_s=0.0, dispatch_s=0.0, ack_s=0.0))
    # two containers on one core: each activation gets half of it, so 1 s of work takes 2 s
    assert (out.finish_s - out.start_s).tolist() == pytest.approx([2.0, 2.0])


def test_blackbox_fraction_of_the_chart_sends_everything_to_the_last_invoker(small_cluster, small_specs) -> None:
    wl = make_workload(np.linspace(0, 10, 50), ["a"] * 50)
    out = simulate(small_cluster, wl, None, functions=small_specs, config=ow(blackbox_fraction=0.1))
    assert {p.name.split("-")[0] for p in out.pods} == {"wsk3"}
    out = simulate(small_cluster, wl, None, functions=small_specs, config=ow(blackbox_fraction=1.0, user_memory_mb=128))
    assert len({p.name.split("-")[0] for p in out.pods}) > 1


def test_pods_go_only_to_invoker_nodes_when_the_cluster_labels_them(small_specs) -> None:
    cluster = make_cluster([
        {"name": "core", "count": 1, "cpu": "8", "memory": "16Gi"},
        {"name": "inv", "count": 2, "cpu": "2", "memory": "4Gi", "labels": {"openwhisk-role": "invoker"}},
    ])
    wl = make_workload(np.linspace(0, 5, 40), ["a", "b"] * 20)
    out = simulate(cluster, wl, None, functions=small_specs, config=ow())
    nodes = {out.node_names[p.node] for p in out.pods}
    assert nodes and all(n.startswith("inv") for n in nodes)


def test_weights_decide_where_new_containers_go(small_cluster, small_specs) -> None:
    wl = make_workload(np.linspace(0, 2, 8), ["a"] * 8)
    most = profile_from_weights({"NodeResourcesFit": 100, "NodeResourcesBalancedAllocation": None,
                                 "ImageLocality": None}, strategy="MostAllocated")
    least = profile_from_weights({"NodeResourcesFit": 100, "NodeResourcesBalancedAllocation": None,
                                  "ImageLocality": None}, strategy="LeastAllocated")
    packed = simulate(small_cluster, wl, most, functions=small_specs, config=ow())
    spread = simulate(small_cluster, wl, least, functions=small_specs, config=ow())
    assert len({p.node for p in packed.pods}) < len({p.node for p in spread.pods})


def test_summary_and_tables_say_the_platform(small_cluster, small_specs) -> None:
    wl = make_workload([0.0, 1.0], ["a", "b"])
    s = evaluate(small_cluster, wl, None, functions=small_specs, config=ow())
    assert s["platform"] == "openwhisk" and s["ok"] == 2
    out = simulate(small_cluster, wl, None, functions=small_specs, config=ow())
    assert requests_frame(out)["status"].tolist() == ["ok", "ok"]


def test_unknown_platform_is_one_error_naming_the_option(small_cluster, small_specs) -> None:
    wl = make_workload([0.0], ["a"])
    with pytest.raises(InputError, match="unknown platform 'lambda'.*knative, openwhisk"):
        simulate(small_cluster, wl, None, functions=small_specs, config=SimConfig(platform="lambda"))


def test_bad_openwhisk_config_is_refused() -> None:
    with pytest.raises(InputError, match="user memory >= 128"):
        OpenWhiskConfig(user_memory_mb=64)
    with pytest.raises(InputError, match="blackbox_fraction"):
        OpenWhiskConfig(blackbox_fraction=1.5)


def test_a_pod_that_does_not_start_in_time_is_scored_under_the_one_fault_rule(tmp_path) -> None:
    """An action pod not Ready within the pod-start timeout fails its activations with upstream's
    statusCode 3 and "Failed to run container with image" (testbed.openwhisk.faults): a consequence
    of placement, scored as errors and recorded, as on the embedded lab and kube."""
    from testbed.sim.backend import SimBackend

    spec = make_spec("a", cc=1, cpu_mean=0.1, start_s=3.0, init_s=0.1)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "2", "memory": "4Gi", "images": ["registry.example/a:1"]}])
    wl = make_workload([0.0, 0.5], ["a", "a"])
    backend = SimBackend(cluster, functions={"a": spec}, config=ow(pod_start_timeout_s=1.0))
    result = backend.run(wl, tmp_path / "run")
    s = result.summary
    assert not s["failed"] and s["errors"] == 2
    assert s["fault_rule"]["verdict"] == "scored" and s["fault_rule"]["counts"] == {"pod-not-ready": 2}
    assert result.requests["error"].str.contains("Failed to run container with image").all()
    assert (result.requests["http_status"] == 500).all()


def test_an_invoker_its_pod_start_failures_made_unhealthy_is_passed_over_until_its_health_test(tmp_path) -> None:
    """InvokerSupervision (testbed.openwhisk.health): pods not Ready in time are system errors; the
    one invoker turns unhealthy, the controller answers 503 while no invoker is usable, and the
    health-test action brings it back. Under the one fault rule the 503s follow the run's own
    pod-start failures, so the run is scored, not void."""
    from testbed.sim.backend import SimBackend

    spec = make_spec("a", cc=1, cpu_mean=0.01, start_s=3.0, init_s=0.1)
    cluster = make_cluster([{"name": "n", "count": 1, "cpu": "2", "memory": "4Gi", "images": ["registry.example/a:1"]}])
    t = np.arange(0.0, 20.0, 0.25)
    wl = make_workload(t, ["a"] * len(t))
    backend = SimBackend(cluster, functions={"a": spec}, config=ow(pod_start_timeout_s=1.0, health_test_s=1.0))
    result = backend.run(wl, tmp_path / "run")
    req = result.requests
    refused = req[req["http_status"] == 503]
    assert len(refused) > 0 and (refused["scheduled_s"] > 1.0).all()  # only after the first failure
    # its system errors stay in the buffer until the tests' successes push all but 3 out (one
    # test a second here): then it takes activations again
    taken_again = req[(req["scheduled_s"] > refused["scheduled_s"].min()) & (req["http_status"] != 503)]
    assert len(taken_again) > 0 and taken_again["scheduled_s"].min() > refused["scheduled_s"].min() + 5.0
    rule = result.summary["fault_rule"]
    assert not result.summary["failed"] and rule["verdict"] == "scored"
    assert rule["counts"]["invoker-unhealthy-after-pod-start-failures"] == len(refused)
