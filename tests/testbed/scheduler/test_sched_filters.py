"""Filters (NodeResourcesFit, NodeUnschedulable, NodeName, TaintToleration, NodeAffinity), the
cycle (percentageOfNodesToScore, single feasible node, tie-break) and object parsing."""

from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import ConfigError, TestbedError
from testbed.scheduler.builders import make_node, make_pod
from testbed.scheduler.config import default_profile, profile_from_weights
from testbed.scheduler.framework import Scheduler, num_feasible_nodes_to_find
from testbed.scheduler.objects import DEFAULT_MEMORY_REQUEST, pod_from_k8s, quantity_value


def feasible(nodes, pod, existing=()):
    s = Scheduler(nodes, default_profile())
    s.bind_existing(existing)
    return list(s.score(pod).feasible)


def node(name, cpu="4", mem="8Gi", pods="110", **kw):
    return make_node(name, capacity={"cpu": cpu, "memory": mem, "pods": pods, **kw.pop("ext", {})}, **kw)


def test_fit_filter_cpu_memory_pods_and_extended():
    nodes = [node("a", cpu="1"), node("b", mem="100Mi"), node("c", pods="1"), node("d", ext={"example.com/gpu": "1"})]
    existing = [make_pod("x", node_name="c")]
    pod = make_pod(requests=[{"cpu": "1500m", "memory": "200Mi"}])
    assert feasible(nodes, pod, existing) == ["d"]
    gpu = make_pod(requests=[{"cpu": "100m", "example.com/gpu": "1"}])
    assert feasible(nodes, gpu, existing) == ["d"]
    assert feasible(nodes, gpu, [make_pod("g", node_name="d", requests=[{"example.com/gpu": "1"}])]) == []


def test_fit_filter_uses_actual_requests_not_defaults():
    """A pod without requests fits a full node: only the non-zero *score* counts 100m/200Mi."""
    nodes = [node("a", cpu="1")]
    existing = [make_pod("x", node_name="a", requests=[{"cpu": "1"}])]
    assert feasible(nodes, make_pod(requests=[{}]), existing) == ["a"]


def test_unschedulable_node_name_taints_and_affinity():
    nodes = [
        node("a", unschedulable=True),
        node("b", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        node("c", taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}], labels={"disk": "ssd"}),
        node("d", taints=[{"key": "evict", "value": "", "effect": "NoExecute"}], labels={"disk": "hdd"}),
    ]
    assert feasible(nodes, make_pod()) == ["c"]
    tolerate_all = make_pod(tolerations=[{"operator": "Exists"}])
    assert feasible(nodes, tolerate_all) == ["a", "b", "c", "d"]
    unsched = make_pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}])
    assert feasible(nodes, unsched) == ["a", "c"]
    assert feasible(nodes, make_pod(node_name="c")) == ["c"]
    assert feasible(nodes, make_pod(node_name="b")) == []
    sel = make_pod(tolerations=[{"operator": "Exists"}], node_selector={"disk": "hdd"})
    assert feasible(nodes, sel) == ["d"]
    req = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
    ]}}}
    assert feasible(nodes, make_pod(tolerations=[{"operator": "Exists"}], affinity=req)) == ["a", "c"]


def test_toleration_effect_must_match():
    nodes = [node("a", taints=[{"key": "foo", "value": "bar", "effect": "NoSchedule"}])]
    wrong = make_pod(tolerations=[{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}])
    empty = make_pod(tolerations=[{"key": "foo", "operator": "Equal", "value": "bar"}])
    assert feasible(nodes, wrong) == [] and feasible(nodes, empty) == ["a"]


def test_not_ready_node_is_infeasible():
    s = Scheduler([node("a"), node("b")], default_profile())
    s.set_node_ready(0, False)
    assert s.schedule(make_pod()) == 1
    s.set_node_ready(1, False)
    assert s.schedule(make_pod()) is None


def test_single_feasible_node_is_taken_without_scoring():
    s = Scheduler([node("a", cpu="1"), node("b", cpu="8")], default_profile())
    assert s.schedule(make_pod(requests=[{"cpu": "2"}])) == 1


@pytest.mark.parametrize("n,pct,want", [(50, None, 50), (99, 0, 99), (100, 0, 100), (1000, 0, 420), (6000, 0, 300), (1000, 40, 400), (6000, 40, 2400), (5000, 0, 500), (10000, 1, 100), (1000, 100, 1000)])
def test_num_feasible_nodes_to_find(n, pct, want):
    assert num_feasible_nodes_to_find(n, pct) == want


def test_percentage_of_nodes_to_score_rotates_start():
    nodes = [node(f"n{i}") for i in range(200)]
    s = Scheduler(nodes, profile_from_weights({}, percentage_of_nodes_to_score=5))  # -> 100 nodes
    pod = make_pod(requests=[{"cpu": "100m"}])
    mask = np.ones(200, dtype=bool)
    first = s._sample(mask, advance=True)
    second = s._sample(mask, advance=True)
    assert len(first) == 100 and list(first) == list(range(100)) and list(second) == list(range(100, 200))
    assert s.schedule(pod) is not None


def test_tie_break_is_seeded_and_uniform():
    nodes = [node(f"n{i}") for i in range(4)]
    picks = [Scheduler(nodes, default_profile(), seed=7).schedule(make_pod()) for _ in range(3)]
    assert len(set(picks)) == 1  # same seed, same pick
    s = Scheduler(nodes, default_profile(), seed=1)
    counts = np.bincount([s.schedule(make_pod()) for _ in range(4000)], minlength=4)
    assert counts.min() > 850  # uniform among the four tied nodes (expected 1000 each)


def test_unbind_requires_a_bound_pod():
    s = Scheduler([node("a")], default_profile())
    with pytest.raises(TestbedError):
        s.unbind(make_pod(), 0)


def test_quantities_are_parsed_as_kubernetes_does():
    assert quantity_value("cpu", "100m") == 100 and quantity_value("cpu", "0.5") == 500 and quantity_value("cpu", "1.0001m") == 2
    assert quantity_value("memory", "1Gi") == 2**30 and quantity_value("memory", "1G") == 10**9 and quantity_value("memory", "1.5Ki") == 1536
    with pytest.raises(ConfigError):
        quantity_value("memory", "lots")


def test_pod_requests_init_containers_sidecars_and_defaults():
    obj = {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}}},
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "10Mi"}}},
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}, {"name": "b"}],
            "overhead": {"cpu": "10m"},
        },
    }
    p = pod_from_k8s(obj)
    # regular 500m + sidecar 100m = 600m; init 2000m + sidecar 100m = 2100m wins; + overhead
    assert p.requests["cpu"] == 2110
    # non-zero: b gets 100m and 200Mi, a gets 200Mi memory; init containers too
    assert p.nonzero_cpu == 2110
    assert p.nonzero_memory == max(2 * DEFAULT_MEMORY_REQUEST + 50 * 2**20, 10 * 2**20 + 50 * 2**20)


def test_bad_objects_name_the_field():
    with pytest.raises(ConfigError, match="spec.containers\\[0\\].resources.requests.cpu"):
        pod_from_k8s({"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"requests": {"cpu": "fast"}}}]}})


def test_without_score_plugins_the_first_feasible_node_in_round_robin_wins():
    nodes = [node(f"n{i}") for i in range(3)]
    s = Scheduler(nodes, profile_from_weights(dict.fromkeys(["TaintToleration", "NodeAffinity", "NodeResourcesFit", "PodTopologySpread", "InterPodAffinity", "NodeResourcesBalancedAllocation", "ImageLocality"])))
    assert [s.schedule(make_pod()) for _ in range(4)] == [0, 1, 2, 0]


def test_numpy_integer_weights_are_accepted():
    p = profile_from_weights({"ImageLocality": np.int64(7)})
    assert p.weight("ImageLocality") == 7 and isinstance(p.weight("ImageLocality"), int)


def test_add_and_remove_node_image_equal_a_fresh_scheduler():
    mb = 2**20
    nodes = [node("a", images={"fn:latest": 300 * mb}), node("b"), node("c")]
    pod = make_pod(images=["fn"])
    s = Scheduler(nodes, default_profile())
    before = s.plugin_scores(pod)[0]["ImageLocality"].tolist()
    s.add_node_image(1, "fn", 300 * mb)
    fresh = Scheduler([nodes[0], node("b", images={"fn:latest": 300 * mb}), nodes[2]], default_profile())
    assert s.plugin_scores(pod)[0]["ImageLocality"].tolist() == fresh.plugin_scores(pod)[0]["ImageLocality"].tolist() != before
    s.remove_node_image(1, "fn:latest")
    assert s.plugin_scores(pod)[0]["ImageLocality"].tolist() == before


def test_limits_without_requests_default_the_requests():
    obj = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}]}}
    p = pod_from_k8s(obj)
    assert p.requests == {"cpu": 500, "memory": 2**30}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"containers": ["not-a-mapping"]}, "spec.containers[0]"),
        ({"containers": [{"name": "c"}], "topologySpreadConstraints": [42]}, "spec.topologySpreadConstraints[0]"),
        ({"containers": [{"name": "c"}], "topologySpreadConstraints": {"maxSkew": 1}}, "spec.topologySpreadConstraints"),
    ],
)
def test_malformed_pod_lists_name_the_field(spec, field) -> None:
    with pytest.raises(ConfigError) as err:
        pod_from_k8s({"metadata": {"name": "p"}, "spec": spec})
    assert err.value.field is not None and err.value.field.endswith(field), err.value
