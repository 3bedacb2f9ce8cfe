"""Score-plugin cases ported from upstream's own tests (kubernetes/kubernetes,
pkg/scheduler/framework/plugins/...): the same nodes, pods and expected scores.

Conventions kept from upstream: ``capacity={"cpu": "4000"}`` is 4000 cores (``st.MakeNode``), a
pod without ``requests`` has no containers (``st.MakePod().Obj()``), and ``candidates`` are the
nodes passed to PreScore as filtered nodes (the others only hold pods).
"""

from __future__ import annotations

import pytest

from testbed.scheduler.builders import exists, label_in, make_node, make_pod, pod_obj, weighted_term
from testbed.scheduler.config import (
    BalancedAllocationArgs,
    Profile,
    default_profile,
    parse_config,
    profile_from_weights,
)
from testbed.scheduler.framework import Scheduler
from testbed.scheduler.objects import HOSTNAME_LABEL, normalized_image_name, pod_from_k8s

SKIP = "skip"
EXT = "abc.com/xyz"
GPU = "nvidia.com/gpu"


def run(plugin, nodes, pod, existing=(), *, profile: Profile | None = None, candidates=None, kube_version="1.36"):
    s = Scheduler(nodes, profile or default_profile(), kube_version=kube_version)
    s.bind_existing(existing)
    idx = None if candidates is None else [s.node_names.index(c) for c in candidates]
    scores, skipped = s.plugin_scores(pod, idx)
    if plugin in skipped:
        return SKIP
    return scores[plugin].tolist()


def cap(cpu, mem, **ext):
    return {"capacity": {"cpu": cpu, "memory": mem, **ext}}


def fit(strategy, resources=None, shape=None):
    res = resources if resources is not None else [("cpu", 1), ("memory", 1)]
    return profile_from_weights({}, strategy=strategy, resources=res, shape=shape)


TWO_CONTAINERS = [{"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"}]

# --- noderesources/least_allocated_test.go -------------------------------------------------------

LEAST = [
    ("nothing scheduled, nothing requested", [("node1", "4000", "10000"), ("node2", "4000", "10000")], [], [], None, [100, 100]),
    ("nothing scheduled, resources requested, differently sized nodes", [("node1", "4000", "10000"), ("node2", "6000", "10000")], TWO_CONTAINERS, [], None, [37, 50]),
    (
        "no resources requested, pods scheduled",
        [("node1", "4000", "10000"), ("node2", "4000", "10000")],
        [],
        [("node1", None), ("node1", None), ("node2", None), ("node2", None)],
        None,
        [100, 100],
    ),
    (
        "no resources requested, pods scheduled with resources",
        [("node1", "10000", "20000"), ("node2", "10000", "20000")],
        [],
        [("node1", {"cpu": "3000", "memory": "0"}), ("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [70, 57],
    ),
    (
        "resources requested, pods scheduled with resources",
        [("node1", "10000", "20000"), ("node2", "10000", "20000")],
        TWO_CONTAINERS,
        [("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [57, 45],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        [("node1", "10000", "20000"), ("node2", "10000", "50000")],
        TWO_CONTAINERS,
        [("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [57, 60],
    ),
    (
        "requested resources exceed node capacity",
        [("node1", "4000", "10000"), ("node2", "4000", "10000")],
        [{"cpu": "3000", "memory": "0"}],
        [("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [50, 25],
    ),
    (
        "zero node resources, pods scheduled with resources",
        [("node1", None, None), ("node2", None, None)],
        [],
        [("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [0, 0],
    ),
    (
        "different weight on CPU and memory",
        [("node1", "4000", "10000"), ("node2", "6000", "10000")],
        TWO_CONTAINERS,
        [],
        [("memory", 2), ("cpu", 1)],
        [41, 50],
    ),
]


def _nodes(specs, ext=None):
    out = []
    for i, (name, cpu, mem) in enumerate(specs):
        c = {}
        if cpu is not None:
            c = {"cpu": cpu, "memory": mem}
        if ext and ext[i]:
            c.update(ext[i])
        out.append(make_node(name, capacity=c))
    return out


def _existing(pods):
    return [make_pod(f"e{i}", node_name=n, requests=[r] if r is not None else []) for i, (n, r) in enumerate(pods)]


@pytest.mark.parametrize("name,nodes,requests,existing,resources,want", LEAST, ids=[c[0] for c in LEAST])
def test_least_allocated(name, nodes, requests, existing, resources, want):
    got = run("NodeResourcesFit", _nodes(nodes), make_pod(requests=requests), _existing(existing), profile=fit("LeastAllocated", resources))
    assert got == want


def test_least_allocated_extended_resource_bypassed_or_honoured():
    res = [("cpu", 1), ("memory", 1), (EXT, 1)]
    nodes = _nodes([("node1", "6000", "10000"), ("node2", "6000", "10000")], [None, {EXT: "4"}])
    assert run("NodeResourcesFit", nodes, make_pod(requests=TWO_CONTAINERS), profile=fit("LeastAllocated", res)) == [50, 50]
    nodes = _nodes([("node1", "6000", "10000"), ("node2", "6000", "10000")], [{EXT: "4"}, {EXT: "10"}])
    pod = make_pod(requests=[{"cpu": "3000", "memory": "5000", EXT: "2"}])
    assert run("NodeResourcesFit", nodes, pod, profile=fit("LeastAllocated", res)) == [50, 60]
    # the node lacks a weighted resource: it is skipped with its weight
    nodes = _nodes([("node1", "6000", "10000"), ("node2", "6000", "10000")], [None, {EXT: "4"}])
    pod = make_pod(requests=[{"cpu": "3000", "memory": "4000"}])
    assert run("NodeResourcesFit", nodes, pod, profile=fit("LeastAllocated", [(EXT, 2), ("cpu", 1), ("memory", 1)])) == [55, 55]


# --- noderesources/most_allocated_test.go --------------------------------------------------------

MOST = [
    ("nothing scheduled, nothing requested", [("node1", "4000", "10000"), ("node2", "4000", "10000")], [], [], None, [0, 0]),
    ("nothing scheduled, resources requested, differently sized nodes", [("node1", "4000", "10000"), ("node2", "6000", "10000")], TWO_CONTAINERS, [], None, [62, 50]),
    (
        "no resources requested, pods scheduled with resources",
        [("node1", "10000", "20000"), ("node2", "10000", "20000")],
        [],
        [("node1", {"cpu": "3000", "memory": "0"}), ("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [30, 42],
    ),
    (
        "resources requested, pods scheduled with resources",
        [("node1", "10000", "20000"), ("node2", "10000", "20000")],
        TWO_CONTAINERS,
        [("node1", {"cpu": "3000", "memory": "0"}), ("node2", {"cpu": "3000", "memory": "5000"})],
        None,
        [42, 55],
    ),
    (
        "resources requested equal node capacity",
        [("node1", "5000", "10000"), ("node2", "10000", "9000")],
        [{"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"}],
        [],
        None,
        [95, 75],
    ),
    ("different weight on CPU and memory", [("node1", "4000", "10000"), ("node2", "6000", "10000")], TWO_CONTAINERS, [], [("memory", 2), ("cpu", 1)], [58, 50]),
]


@pytest.mark.parametrize("name,nodes,requests,existing,resources,want", MOST, ids=[c[0] for c in MOST])
def test_most_allocated(name, nodes, requests, existing, resources, want):
    got = run("NodeResourcesFit", _nodes(nodes), make_pod(requests=requests), _existing(existing), profile=fit("MostAllocated", resources))
    assert got == want


def test_most_allocated_counts_non_zero_defaults():
    """'no resources requested, pods scheduled, nonzero request for resource': containers
    without requests count 100m CPU and 200Mi memory, capped at capacity."""
    nodes = [make_node(n, capacity={"cpu": "250m", "memory": "1000Mi"}) for n in ("node1", "node2")]
    existing = [make_pod(f"e{i}", node_name="node1", requests=[{}]) for i in range(2)]
    assert run("NodeResourcesFit", nodes, make_pod(requests=[{}]), existing, profile=fit("MostAllocated")) == [80, 30]


def test_most_allocated_extended_resource():
    res = [("cpu", 1), ("memory", 1), (EXT, 1)]
    nodes = _nodes([("node1", "6000", "10000"), ("node2", "6000", "10000")], [{EXT: "4"}, {EXT: "10"}])
    pod = make_pod(requests=[{"cpu": "3000", "memory": "5000", EXT: "2"}])
    assert run("NodeResourcesFit", nodes, pod, profile=fit("MostAllocated", res)) == [50, 40]


# --- noderesources/requested_to_capacity_ratio_test.go -------------------------------------------

LEAST_SHAPE = [(0, 10), (100, 0)]


def test_rtcr_least_like_shape_rounds():
    nodes = _nodes([("node1", "4000", "10000"), ("node2", "4000", "10000")])
    existing = _existing([("node1", None), ("node1", None)])
    prof = fit("RequestedToCapacityRatio", shape=LEAST_SHAPE)
    assert run("NodeResourcesFit", nodes, make_pod(), existing, profile=prof) == [100, 100]
    nodes = _nodes([("node1", "4000", "10000"), ("node2", "6000", "10000")])
    assert run("NodeResourcesFit", nodes, make_pod(requests=TWO_CONTAINERS), existing, profile=prof) == [38, 50]
    existing = _existing([("node1", {"cpu": "3000", "memory": "5000"}), ("node2", {"cpu": "3000", "memory": "5000"})])
    assert run("NodeResourcesFit", nodes, make_pod(), existing, profile=prof) == [38, 50]


def _gpu_nodes(ext1, ext2):
    return [
        make_node("node1", capacity={"cpu": "4000m", "memory": str(10000 * 1024 * 1024), "pods": "32", **ext1}),
        make_node("node2", capacity={"cpu": "4000m", "memory": str(10000 * 1024 * 1024), "pods": "32", **ext2}),
    ]


def test_rtcr_single_extended_resource():
    prof = fit("RequestedToCapacityRatio", resources=[("intel.com/foo", 1)], shape=[(0, 0), (100, 1)])
    nodes = _gpu_nodes({"intel.com/foo": "8"}, {"intel.com/foo": "4"})
    assert run("NodeResourcesFit", nodes, make_pod(), profile=prof) == [0, 0]
    two = make_pod(requests=[{"intel.com/foo": "2"}])
    assert run("NodeResourcesFit", nodes, two, [make_pod("e")], profile=prof) == [2, 5]
    assert run("NodeResourcesFit", nodes, two, [make_pod("e", node_name="node2", requests=[{"intel.com/foo": "2"}])], profile=prof) == [2, 10]
    assert run("NodeResourcesFit", nodes, make_pod(requests=[{"intel.com/foo": "4"}]), profile=prof) == [5, 10]


def test_rtcr_multiple_extended_resources():
    prof = fit("RequestedToCapacityRatio", resources=[("intel.com/foo", 3), ("intel.com/bar", 5)], shape=[(0, 0), (100, 1)])
    nodes = _gpu_nodes({"intel.com/foo": "8", "intel.com/bar": "4"}, {"intel.com/foo": "4", "intel.com/bar": "8"})
    assert run("NodeResourcesFit", nodes, make_pod(), profile=prof) == [0, 0]
    pod = make_pod(requests=[{"intel.com/foo": "2", "intel.com/bar": "2"}])
    assert run("NodeResourcesFit", nodes, pod, [make_pod("e")], profile=prof) == [4, 3]


# --- noderesources/balanced_allocation_test.go ---------------------------------------------------

CPU_ONLY = [{"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"}]
MEMORY_ONLY = [{"cpu": "0", "memory": "2000"}, {"cpu": "0", "memory": "3000"}]
CPU_AND_MEMORY = [{"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}]
CPU_MEM_GPU = [{"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000", GPU: "3"}]


def _mnode(name, milli, mem, ext=None):
    return make_node(name, capacity={"cpu": f"{milli}m", "memory": str(mem), "pods": "32", **(ext or {})})


def _bal(resources):
    return default_profile().with_args("NodeResourcesBalancedAllocation", BalancedAllocationArgs(tuple(resources)))


BAL2 = [("cpu", 1), ("memory", 1)]
BAL3 = [("cpu", 1), ("memory", 1), (GPU, 1)]
BALANCED = [
    # name, nodes, pod requests, existing (node, requests), resources, want 1.36, want 1.35
    ("nothing scheduled, resources requested, differently sized nodes", [("node1", 4000, 10000), ("node2", 6000, 10000)], CPU_AND_MEMORY, [], BAL2, [68, 75], [87, 100]),
    ("resources requested, pods scheduled with resources", [("node1", 10000, 20000), ("node2", 10000, 20000)], CPU_AND_MEMORY, [("node1", CPU_ONLY), ("node2", CPU_AND_MEMORY)], BAL2, [73, 74], [82, 95]),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        [("node1", 10000, 20000), ("node2", 10000, 50000)],
        CPU_AND_MEMORY,
        [("node1", CPU_ONLY), ("node2", CPU_AND_MEMORY)],
        BAL2,
        [73, 70],
        [82, 80],
    ),
    ("nodes to reach min/max score", [("node1", 3000, 5000), ("node2", 3000, 5000)], MEMORY_ONLY, [("node1", CPU_ONLY)], BAL2, [100, 50], [100, 50]),
    ("requested resources at node capacity", [("node1", 6000, 10000), ("node2", 6000, 10000)], CPU_ONLY, [("node1", CPU_ONLY), ("node2", CPU_AND_MEMORY)], BAL2, [62, 62], [50, 75]),
]


@pytest.mark.parametrize("name,nodes,requests,existing,resources,want136,want135", BALANCED, ids=[c[0] for c in BALANCED])
def test_balanced_allocation(name, nodes, requests, existing, resources, want136, want135):
    ns = [_mnode(*n) for n in nodes]
    ex = [make_pod(f"e{i}", node_name=n, requests=r) for i, (n, r) in enumerate(existing)]
    pod = make_pod(requests=requests)
    assert run("NodeResourcesBalancedAllocation", ns, pod, ex, profile=_bal(resources)) == want136
    assert run("NodeResourcesBalancedAllocation", ns, pod, ex, profile=_bal(resources), kube_version="1.35") == want135


def test_balanced_allocation_scalar_resources():
    ns = [_mnode("node1", 3500, 40000, {GPU: "8"}), _mnode("node2", 3500, 40000, {GPU: "8"})]
    ex = [make_pod("a", node_name="node2", requests=CPU_AND_MEMORY), make_pod("b", node_name="node1", requests=CPU_MEM_GPU)]
    pod = make_pod(requests=[{"memory": "0", GPU: "1"}])
    assert run("NodeResourcesBalancedAllocation", ns, pod, ex, profile=_bal(BAL3)) == [75, 76]
    assert run("NodeResourcesBalancedAllocation", ns, pod, ex, profile=_bal(BAL3), kube_version="1.35") == [70, 65]
    # a node without the scalar resource skips it
    ns = [_mnode("node1", 3500, 40000, {GPU: "8"}), _mnode("node2", 3500, 40000)]
    assert run("NodeResourcesBalancedAllocation", ns, make_pod(requests=CPU_AND_MEMORY), profile=_bal(BAL3)) == [56, 56]


def test_balanced_allocation_skips_best_effort_pods():
    ns = [_mnode("node1", 4000, 10000), _mnode("node2", 4000, 10000)]
    assert run("NodeResourcesBalancedAllocation", ns, make_pod()) == SKIP


# --- imagelocality/image_locality_test.go ---------------------------------------------------------

MB = 1024 * 1024
N_40_300_2000 = [(["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB), (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB), (["gcr.io/2000:latest"], 2000 * MB)]
N_250_10 = [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)]
N_600_40_900 = [(["gcr.io/600:latest"], 600 * MB), (["gcr.io/40:latest"], 40 * MB), (["gcr.io/900:latest"], 900 * MB)]
N_300_600_900 = [(["gcr.io/300:latest"], 300 * MB), (["gcr.io/600:latest"], 600 * MB), (["gcr.io/900:latest"], 900 * MB)]
N_4000_30 = [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)]
N_20_30_40 = [(["gcr.io/20:latest"], 20 * MB), (["gcr.io/30:latest"], 30 * MB), (["gcr.io/40:latest"], 40 * MB)]


@pytest.mark.parametrize(
    "name,images,init_images,node_images,want",
    [
        ("two images spread on two nodes, prefer the larger image one", ["gcr.io/40", "gcr.io/250"], [], [N_40_300_2000, N_250_10], [0, 5]),
        ("two images on one node, prefer this node", ["gcr.io/40", "gcr.io/300"], [], [N_40_300_2000, N_250_10], [7, 0]),
        ("if exceed limit, use limit", ["gcr.io/10", "gcr.io/4000"], [], [N_4000_30, N_250_10], [100, 0]),
        ("if exceed limit, use limit (with node which has no images present)", ["gcr.io/10", "gcr.io/4000"], [], [N_4000_30, N_250_10, []], [66, 0, 0]),
        ("pod with multiple large images, node2 is preferred", ["gcr.io/300", "gcr.io/600", "gcr.io/900"], [], [N_600_40_900, N_300_600_900, []], [32, 36, 0]),
        ("pod with multiple small images", ["gcr.io/30", "gcr.io/40"], [], [N_20_30_40, N_4000_30], [1, 0]),
        ("include InitContainers", ["gcr.io/30"], ["gcr.io/300"], [N_40_300_2000, N_20_30_40], [6, 0]),
    ],
)
def test_image_locality(name, images, init_images, node_images, want):
    ns = [make_node(f"node{i + 1}", images=imgs) for i, imgs in enumerate(node_images)]
    obj = pod_obj(images=images)
    obj["spec"]["initContainers"] = [{"name": f"init{i}", "image": img} for i, img in enumerate(init_images)]
    assert run("ImageLocality", ns, pod_from_k8s(obj)) == want


@pytest.mark.parametrize(
    "image,want",
    [("root", "root:latest"), ("gcr.io:5000/root", "gcr.io:5000/root:latest"), ("root:tag", "root:tag"), ("root@sha256:" + "a" * 64, "root@sha256:" + "a" * 64)],
)
def test_normalized_image_name(image, want):
    assert normalized_image_name(image) == want


# --- tainttoleration/taint_toleration_test.go ----------------------------------------------------


def _tnode(name, *taints):
    return make_node(name, taints=[{"key": k, "value": v, "effect": e} for k, v, e in taints])


def _tpod(*tols):
    return make_pod(tolerations=[{"key": k, "operator": "Equal", "value": v, "effect": e} for k, v, e in tols])


P = "PreferNoSchedule"


@pytest.mark.parametrize(
    "name,pod,nodes,want",
    [
        ("tolerated taints score higher", _tpod(("foo", "bar", P)), [_tnode("nodeA", ("foo", "bar", P)), _tnode("nodeB", ("foo", "blah", P))], [100, 0]),
        (
            "number of tolerated taints does not matter",
            _tpod(("cpu-type", "arm64", P), ("disk-type", "ssd", P)),
            [_tnode("nodeA"), _tnode("nodeB", ("cpu-type", "arm64", P)), _tnode("nodeC", ("cpu-type", "arm64", P), ("disk-type", "ssd", P))],
            [100, 100, 100],
        ),
        (
            "the more intolerable taints, the lower the score",
            _tpod(("foo", "bar", P)),
            [_tnode("nodeA"), _tnode("nodeB", ("cpu-type", "arm64", P)), _tnode("nodeC", ("cpu-type", "arm64", P), ("disk-type", "ssd", P))],
            [100, 50, 0],
        ),
        (
            "only PreferNoSchedule taints and tolerations count",
            _tpod(("cpu-type", "arm64", "NoSchedule"), ("disk-type", "ssd", "NoSchedule")),
            [_tnode("nodeA"), _tnode("nodeB", ("cpu-type", "arm64", "NoSchedule")), _tnode("nodeC", ("cpu-type", "arm64", P), ("disk-type", "ssd", P))],
            [100, 100, 0],
        ),
        ("no taints and tolerations", _tpod(), [_tnode("nodeA"), _tnode("nodeB", ("cpu-type", "arm64", P))], [100, 0]),
    ],
)
def test_taint_toleration_score(name, pod, nodes, want):
    assert run("TaintToleration", nodes, pod) == want


# --- nodeaffinity/node_affinity_test.go (TestNodeAffinityPriority) -------------------------------


def _pref(*terms):
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": {"matchExpressions": [{"key": k, "operator": "In", "values": list(v)} for k, v in exprs]}} for w, exprs in terms
            ]
        }
    }


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = _pref((2, [("foo", ["bar"])]))
AFFINITY2 = _pref((2, [("foo", ["bar"])]), (4, [("key", ["value"])]), (5, [("foo", ["bar"]), ("key", ["value"]), ("az", ["az1"])]))


@pytest.mark.parametrize(
    "name,affinity,labels,want",
    [
        ("all nodes are same priority as NodeAffinity is nil", None, [LABEL1, LABEL2, LABEL3], SKIP),
        ("no node matches preferred scheduling requirements", AFFINITY1, [LABEL4, LABEL2, LABEL3], [0, 0, 0]),
        ("only machine1 matches the preferred scheduling requirements", AFFINITY1, [LABEL1, LABEL2, LABEL3], [100, 0, 0]),
        ("all machines match the preferred requirements with different weights", AFFINITY2, [LABEL1, LABEL5, LABEL2], [18, 100, 36]),
    ],
)
def test_node_affinity_score(name, affinity, labels, want):
    nodes = [make_node(f"machine{i + 1}", labels=lab) for i, lab in enumerate(labels)]
    assert run("NodeAffinity", nodes, make_pod(affinity=affinity)) == want


def _added(preferred):
    """A profile whose NodeAffinityArgs.addedAffinity has these preferred terms, through the config parser."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": preferred["nodeAffinity"]}}]}],
    }
    return parse_config(doc).profile()


def test_node_affinity_added_affinity():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2)]
    assert run("NodeAffinity", nodes, make_pod(), profile=_added(AFFINITY1)) == [100, 0]


def test_node_affinity_added_affinity_and_pod_affinity():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2), make_node("node3", labels=LABEL5)]
    prof = _added(_pref((3, [("key", ["value"])])))
    assert run("NodeAffinity", nodes, make_pod(affinity=AFFINITY1), profile=prof) == [40, 60, 100]


# --- interpodaffinity/scoring_test.go (TestPreferredAffinity) ------------------------------------

RG_CHINA = {"region": "China"}
RG_INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}
STAY_S1_REGION = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(5, "region", label_in("security", "S1"))]}}
STAY_S2_REGION = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(6, "region", label_in("security", "S2"))]}}
AFFINITY3 = {
    "podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            weighted_term(8, "region", {"matchExpressions": [{"key": "security", "operator": "NotIn", "values": ["S1"]}, {"key": "security", "operator": "In", "values": ["S2"]}]}),
            weighted_term(2, "region", {"matchExpressions": [{"key": "security", "operator": "Exists"}, {"key": "wrongkey", "operator": "DoesNotExist"}]}),
        ]
    }
}
HARD_AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "region", "labelSelector": label_in("security", "S1", "value2")},
            {"topologyKey": "region", "labelSelector": {"matchExpressions": [{"key": "security", "operator": "Exists"}, {"key": "wrongkey", "operator": "DoesNotExist"}]}},
        ]
    }
}
AWAY_S1_AZ = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(5, "az", label_in("security", "S1"))]}}
AWAY_S2_AZ = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(5, "az", label_in("security", "S2"))]}}
STAY_S1_AWAY_S2 = {
    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(8, "region", label_in("security", "S1"))]},
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(5, "az", label_in("security", "S2"))]},
}

IPA = [
    ("all nodes are same priority as Affinity is nil", None, S1, [], [RG_CHINA, RG_INDIA, AZ1], SKIP),
    (
        "affinity: matching topology key and pods scores high",
        STAY_S1_REGION,
        S1,
        [("node1", S1, None), ("node2", S2, None), ("node3", S1, None)],
        [RG_CHINA, RG_INDIA, AZ1],
        [100, 0, 0],
    ),
    ("same topology value gets the same score", STAY_S1_REGION, {}, [("node1", S1, None)], [RG_CHINA, RG_CHINA_AZ1, RG_INDIA], [100, 100, 0]),
    (
        "region with more matching pods scores higher",
        STAY_S2_REGION,
        S1,
        [("node1", S2, None), ("node1", S2, None), ("node2", S2, None), ("node3", S2, None), ("node4", S2, None), ("node5", S2, None)],
        [RG_CHINA, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA],
        [100, 0, 100, 100, 0],
    ),
    ("different label operators", AFFINITY3, S1, [("node1", S1, None), ("node2", S2, None), ("node3", S1, None)], [RG_CHINA, RG_INDIA, AZ1], [20, 100, 0]),
    (
        "affinity symmetry: preferred terms of existing pods",
        None,
        S2,
        [("node1", S1, STAY_S1_REGION), ("node2", S2, STAY_S2_REGION)],
        [RG_CHINA, RG_INDIA, AZ1],
        [0, 100, 0],
    ),
    (
        "affinity symmetry: required terms of existing pods count hardPodAffinityWeight",
        None,
        S1,
        [("node1", S1, HARD_AFFINITY), ("node2", S2, HARD_AFFINITY)],
        [RG_CHINA, RG_INDIA, AZ1],
        [100, 100, 0],
    ),
    ("anti-affinity: non-matching pods score high", AWAY_S1_AZ, S1, [("node1", S1, None), ("node2", S2, None)], [AZ1, RG_CHINA], [0, 100]),
    ("anti-affinity: missing topology key scores high", AWAY_S1_AZ, S1, [("node1", S1, None), ("node2", S1, None)], [AZ1, RG_CHINA], [0, 100]),
    ("anti-affinity: more matching pods score lower", AWAY_S1_AZ, S1, [("node1", S1, None), ("node1", S1, None), ("node2", S2, None)], [AZ1, RG_INDIA], [0, 100]),
    ("anti-affinity symmetry", None, S2, [("node1", S1, AWAY_S2_AZ), ("node2", S2, AWAY_S1_AZ)], [AZ1, AZ2], [0, 100]),
    ("affinity and anti-affinity", STAY_S1_AWAY_S2, S1, [("node1", S1, None), ("node2", S1, None)], [RG_CHINA, AZ1], [100, 0]),
    (
        "affinity and anti-affinity with the same labels",
        STAY_S1_AWAY_S2,
        S1,
        [("node1", S1, None), ("node1", S1, None), ("node2", S1, None), ("node3", S1, None), ("node3", S1, None), ("node4", S1, None), ("node5", S1, None)],
        [RG_CHINA_AZ1, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA],
        [100, 0, 100, 100, 0],
    ),
    (
        "affinity, anti-affinity and symmetry",
        STAY_S1_AWAY_S2,
        S1,
        [("node1", S1, None), ("node2", S2, None), ("node3", {}, STAY_S1_AWAY_S2), ("node4", {}, AWAY_S1_AZ)],
        [RG_CHINA, AZ1, RG_INDIA, AZ2],
        [100, 0, 100, 0],
    ),
    ("partial nodes in a topology without pods with affinity", None, S1, [("node1", S1, None), ("node2", {}, STAY_S1_AWAY_S2)], [RG_CHINA, RG_CHINA], [0, 0]),
]


@pytest.mark.parametrize("name,affinity,labels,existing,node_labels,want", IPA, ids=[c[0] for c in IPA])
def test_inter_pod_affinity(name, affinity, labels, existing, node_labels, want):
    nodes = [make_node(f"node{i + 1}", labels=lab) for i, lab in enumerate(node_labels)]
    ex = [make_pod(f"e{i}", node_name=n, labels=lab, affinity=aff) for i, (n, lab, aff) in enumerate(existing)]
    assert run("InterPodAffinity", nodes, make_pod(labels=labels, affinity=affinity), ex) == want


def test_knative_revision_anti_affinity_spreads_replicas():
    """The preferred hostname anti-affinity Knative puts on revision pods: a node with a replica
    of the same revision scores lowest, other revisions do not count."""
    rev = {"serving.knative.dev/revision": "fn-00001"}
    anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(100, HOSTNAME_LABEL, {"matchLabels": rev})]}}
    other = {"serving.knative.dev/revision": "other-00001"}
    other_anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(100, HOSTNAME_LABEL, {"matchLabels": other})]}}
    nodes = [make_node(n, labels={HOSTNAME_LABEL: n}) for n in ("a", "b", "c")]
    ex = [
        make_pod("r1", node_name="a", labels=rev, affinity=anti),
        make_pod("r2", node_name="a", labels=rev, affinity=anti),
        make_pod("r3", node_name="b", labels=rev, affinity=anti),
        make_pod("o1", node_name="c", labels=other, affinity=other_anti),
    ]
    # raw: a = 2 x (-100 own term, -100 symmetric term) = -400, b = -200, c = 0
    assert run("InterPodAffinity", nodes, make_pod(labels=rev, affinity=anti), ex) == [0, 50, 100]


# --- podtopologyspread/scoring_test.go (TestPodTopologySpreadScore) ------------------------------


def _spread(skew, key, selector):
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}


FOO = {"foo": ""}


def _host_nodes(*names, extra=None):
    return [make_node(n, labels={HOSTNAME_LABEL: n, **((extra or {}).get(n, {}))}) for n in names]


def _foo_pods(counts, labels=FOO):
    return [make_pod(f"p-{n}{i}", node_name=n, labels=labels) for n, k in counts.items() for i in range(k)]


@pytest.mark.parametrize(
    "name,skew,counts,want",
    [
        ("one constraint on node, no existing pods", 1, {}, [100, 100, 100, 100]),
        ("one constraint on node, all 4 nodes are candidates", 1, {"node-a": 2, "node-b": 1, "node-d": 3}, [20, 60, 100, 0]),
        ("maxSkew=2", 2, {"node-a": 2, "node-b": 1, "node-d": 3}, [33, 66, 100, 16]),
        ("maxSkew=3", 3, {"node-a": 4, "node-b": 3, "node-c": 2, "node-d": 1}, [44, 66, 77, 100]),
    ],
)
def test_topology_spread_hostname(name, skew, counts, want):
    nodes = _host_nodes("node-a", "node-b", "node-c", "node-d")
    pod = make_pod(labels=FOO, spread=[_spread(skew, HOSTNAME_LABEL, exists("foo"))])
    assert run("PodTopologySpread", nodes, pod, _foo_pods(counts)) == want


def test_topology_spread_null_selector_counts_nothing():
    nodes = _host_nodes("node-a", "node-b", "node-c", "node-d")
    pod = make_pod(labels=FOO, spread=[_spread(1, HOSTNAME_LABEL, None)])
    assert run("PodTopologySpread", nodes, pod, _foo_pods({"node-a": 2, "node-b": 1, "node-d": 3})) == [100, 100, 100, 100]


def test_topology_spread_system_defaults_for_owned_pods():
    """'system defaulting, nodes don't have zone, pods match service' (here: owned by a ReplicaSet)."""
    nodes = _host_nodes("node-a", "node-b", "node-c", "node-d")
    pod = make_pod(labels=FOO, owner_kind="ReplicaSet")
    assert run("PodTopologySpread", nodes, pod, _foo_pods({"node-a": 4, "node-b": 3, "node-c": 2, "node-d": 1})) == [44, 66, 77, 100]
    assert run("PodTopologySpread", nodes, make_pod(labels=FOO)) == SKIP


def test_topology_spread_non_candidate_nodes_hold_pods():
    pod = make_pod(labels=FOO, spread=[_spread(1, HOSTNAME_LABEL, exists("foo"))])
    counts = {"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}
    nodes = _host_nodes("node-a", "node-b", "node-x", "node-y")
    assert run("PodTopologySpread", nodes, pod, _foo_pods(counts), candidates=["node-a", "node-b", "node-x"]) == [33, 83, 100]
    # node-b lacks the topology key: ignored, scored 0
    nodes = [*_host_nodes("node-a"), make_node("node-b", labels={"n": "node-b"}), *_host_nodes("node-x", "node-y")]
    assert run("PodTopologySpread", nodes, pod, _foo_pods(counts), candidates=["node-a", "node-b", "node-x"]) == [16, 0, 100]


def test_topology_spread_zone_constraints():
    zones = {"node-a": {"zone": "zone1"}, "node-b": {"zone": "zone1"}, "node-x": {"zone": "zone2"}, "node-y": {"zone": "zone2"}}
    nodes = _host_nodes("node-a", "node-b", "node-x", "node-y", extra=zones)
    pod = make_pod(labels=FOO, spread=[_spread(1, "zone", exists("foo"))])
    counts = {"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}
    assert run("PodTopologySpread", nodes, pod, _foo_pods(counts), candidates=["node-a", "node-b", "node-x"]) == [75, 75, 100]
    pod = make_pod(labels=FOO, spread=[_spread(1, "zone", exists("foo")), _spread(1, HOSTNAME_LABEL, exists("foo"))])
    counts = {"node-a": 2, "node-b": 1, "node-x": 2, "node-y": 4}
    assert run("PodTopologySpread", nodes, pod, _foo_pods(counts), candidates=["node-a", "node-x"]) == [100, 63]


def test_topology_spread_two_selectors():
    zones = {"node-a": {"zone": "zone1"}, "node-b": {"zone": "zone1"}, "node-x": {"zone": "zone2"}, "node-y": {"zone": "zone2"}}
    nodes = _host_nodes("node-a", "node-b", "node-x", "node-y", extra=zones)
    foobar = {"foo": "", "bar": ""}
    pod = make_pod(labels=foobar, spread=[_spread(1, "zone", exists("foo")), _spread(1, HOSTNAME_LABEL, exists("bar"))])
    ex = [
        make_pod("a1", node_name="node-a", labels=FOO),
        make_pod("b1", node_name="node-b", labels=foobar),
        make_pod("y1", node_name="node-y", labels=FOO),
        make_pod("y2", node_name="node-y", labels={"bar": ""}),
    ]
    assert run("PodTopologySpread", nodes, pod, ex) == [60, 20, 100, 60]
    assert run("PodTopologySpread", nodes, pod, ex, candidates=["node-a", "node-b", "node-x"]) == [50, 25, 100]
    ex = [make_pod("b1", node_name="node-b", labels={"bar": ""}), make_pod("x1", node_name="node-x", labels=FOO), make_pod("y1", node_name="node-y", labels=foobar)]
    assert run("PodTopologySpread", nodes, pod, ex) == [100, 60, 40, 0]


def test_topology_spread_other_namespace_does_not_count():
    nodes = _host_nodes("node-a", "node-b")
    pod = make_pod(labels=FOO, spread=[_spread(1, HOSTNAME_LABEL, exists("foo"))])
    ex = [make_pod("a1", node_name="node-a", labels=FOO, namespace="ns1"), make_pod("a2", node_name="node-a", labels=FOO), make_pod("b1", node_name="node-b", labels=FOO, namespace="ns1")]
    assert run("PodTopologySpread", nodes, pod, ex) == [0, 100]
