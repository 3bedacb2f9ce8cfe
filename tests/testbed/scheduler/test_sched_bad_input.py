"""Bad input to ``scoretune scheduler ...``: one ``Error:`` line naming the file and the field,
a non-zero exit, no traceback and no output file; and ``scheduler score``'s filter reasons and
FitError, worded as kube-scheduler words them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agent.cli import app
from testbed.errors import ConfigError
from testbed.scheduler.builders import node_obj
from testbed.scheduler.config import parse_config, total_weight_error, validate_config_dict
from testbed.scheduler.framework import fit_error_message
from testbed.scheduler.objects import MAX_QUANTITY
from testbed.sim.progress import COMPILE_NOTICE

EX = Path(__file__).resolve().parents[3] / "testbed" / "scheduler" / "examples"
runner = CliRunner()
HDR = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_error_line(r, *needles: str) -> str:
    """The run failed with exit 1 and exactly one ``Error:`` line on stderr holding ``needles``."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 1, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith(COMPILE_NOTICE)]
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def score_args(*, nodes=None, pod=None, pods=None, config=None) -> list[str]:
    a = ["scheduler", "score", "--nodes", str(nodes or EX / "nodes.json"), "--pod", str(pod or EX / "pod.json")]
    if pods is not None:
        a += ["--pods", str(pods)]
    if config is not None:
        a += ["--config", str(config)]
    return a


# --- unreadable files, for every file option -----------------------------------------------------

BAD_FILES = {
    "binary": (bytes(range(256)) * 4, "a binary file"),
    "not-utf8": ("profiles: [{schedulerName: caf\xe9}]\n".encode("latin-1"), "not UTF-8"),
    "truncated-yaml": (b"kind: KubeSchedulerConfiguration\nprofiles:\n  - {schedulerName: a, plugins: {score: {enabled: [{name: Imag", "line 3"),
    "truncated-json": (b'{"kind": "List", "items": [{"metadata": {"name": "a"', "not valid JSON"),
}
OPTIONS = ["validate", "weights", "--config", "--nodes", "--pod", "--pods"]


def _args_for(option: str, path: Path) -> list[str]:
    if option in ("validate", "weights"):
        return ["scheduler", option, str(path)]
    return score_args(**{option.strip("-"): path})


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
@pytest.mark.parametrize("option", OPTIONS)
def test_unreadable_file_is_one_line_naming_it(tmp_path, option, kind):
    data, words = BAD_FILES[kind]
    path = tmp_path / f"{kind}.in"
    path.write_bytes(data)
    one_error_line(invoke(*_args_for(option, path)), str(path), words)


@pytest.mark.parametrize("option", ["--pods", "--nodes", "--pod", "validate"])
def test_empty_file_is_an_error(tmp_path, option):
    path = tmp_path / "empty.yaml"
    path.write_text("\n  \n")
    one_error_line(invoke(*_args_for(option, path)), str(path), "empty file")


def test_repeated_key_is_an_error_as_strict_decoding_makes_it(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump(HDR) + "percentageOfNodesToScore: 1\npercentageOfNodesToScore: 2\n")
    one_error_line(invoke("scheduler", "weights", str(path)), str(path), "duplicate key 'percentageOfNodesToScore'", "line 4")


def test_deep_nesting_is_an_error_not_a_recursion_traceback(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("extenders: " + "[" * 1200 + "]" * 1200 + "\n")
    one_error_line(invoke("scheduler", "validate", str(path)), str(path), "nested too deeply")


# --- nodes, pods: bad quantities and shapes -------------------------------------------------------


def _patch(obj: dict, patch: dict) -> None:
    """Set ``a__b__c=value`` paths in a nested object (the tests' way of naming one field)."""
    for dotted, value in patch.items():
        cur = obj
        keys = dotted.split("__")
        for k in keys[:-1]:
            cur = cur[k]
        cur[keys[-1]] = value


def _nodes_file(tmp_path: Path, **patch) -> Path:
    n = node_obj("n1", capacity={"cpu": "4", "memory": "8Gi", "pods": "110"}, labels={"kubernetes.io/hostname": "n1"})
    _patch(n, patch)
    p = tmp_path / "nodes.json"
    p.write_text(json.dumps({"kind": "List", "items": [n]}))
    return p


NODE_CASES = [
    ({"status__allocatable": {"cpu": "NaN"}}, "items[0].status.allocatable.cpu", "not a finite quantity"),
    ({"status__allocatable": {"memory": "1e400"}}, "items[0].status.allocatable.memory", "too large"),
    ({"status__allocatable": {"memory": "9" * 40}}, "items[0].status.allocatable.memory", "too large"),
    ({"status__allocatable": {"cpu": "-4"}}, "items[0].status.allocatable.cpu", "greater than or equal to 0"),
    ({"status__allocatable": {"cpu": True}}, "items[0].status.allocatable.cpu", "not a Kubernetes quantity"),
    ({"status": [1]}, "items[0].status", "must be a mapping, not a list"),
    ({"metadata": [1]}, "items[0].metadata", "must be a mapping"),
    ({"metadata__labels": ["a"]}, "items[0].metadata.labels", "must be a mapping"),
    ({"metadata__labels": {"zone": 5}}, "items[0].metadata.labels.zone", "must be a string"),
    ({"spec__taints": {"key": "a"}}, "items[0].spec.taints", "must be a list"),
    ({"spec__taints": ["a"]}, "items[0].spec.taints[0]", "must be a mapping"),
    ({"spec__unschedulable": "false"}, "items[0].spec.unschedulable", "true or false"),
    ({"status__images": [{"names": ["a"], "sizeBytes": "x"}]}, "items[0].status.images[0].sizeBytes", "non-negative integer"),
    ({"status__images": [{"names": "abc", "sizeBytes": 1}]}, "items[0].status.images[0].names", "must be a list"),
    ({"status__conditions": {"type": "Ready"}}, "items[0].status.conditions", "must be a list"),
]


@pytest.mark.parametrize(("patch", "field", "words"), NODE_CASES, ids=[c[1] + ":" + c[2] for c in NODE_CASES])
def test_bad_node_names_file_and_field(tmp_path, patch, field, words):
    path = _nodes_file(tmp_path, **patch)
    one_error_line(invoke(*score_args(nodes=path)), str(path), f"field {field}:", words)


def test_duplicate_node_names_name_the_file(tmp_path):
    n = node_obj("n1", capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "List", "items": [n, n]}))
    one_error_line(invoke(*score_args(nodes=path)), str(path), "field items[1].metadata.name", "used twice")


def _pod(requests=None, **patch) -> dict:
    p = json.loads((EX / "pod.json").read_text())
    if requests is not None:
        p["spec"]["containers"][0]["resources"]["requests"] = requests
    _patch(p, patch)
    return p


POD_CASES = [
    ({"requests": {"cpu": "-1"}}, "spec.containers[0].resources.requests.cpu", "greater than or equal to 0"),
    ({"requests": {"memory": "-256Mi"}}, "spec.containers[0].resources.requests.memory", "greater than or equal to 0"),
    ({"requests": {"example.com/gpu": "-1"}}, "spec.containers[0].resources.requests.example.com/gpu", "greater than or equal to 0"),
    ({"requests": {"cpu": "NaN"}}, "spec.containers[0].resources.requests.cpu", "not a finite quantity"),
    ({"requests": {"memory": "1e400"}}, "spec.containers[0].resources.requests.memory", "too large"),
    ({"requests": {"cpu": True}}, "spec.containers[0].resources.requests.cpu", "not a Kubernetes quantity"),
    ({"spec__overhead": {"cpu": "-1"}}, "spec.overhead.cpu", "greater than or equal to 0"),
    ({"spec__containers": [{"name": "c", "resources": {"limits": {"cpu": "-2"}}}]}, "spec.containers[0].resources.limits.cpu", "greater than or equal to 0"),
    ({"spec__containers": [{"name": "c", "resources": [1]}]}, "spec.containers[0].resources", "must be a mapping"),
    ({"spec": [1]}, "spec", "must be a mapping"),
    ({"metadata__labels": ["a"]}, "metadata.labels", "must be a mapping"),
    ({"spec__nodeSelector": ["a"]}, "spec.nodeSelector", "must be a mapping"),
    ({"spec__affinity": [1]}, "spec.affinity", "must be a mapping"),
    ({"spec__affinity": {"podAntiAffinity": "x"}}, "spec.affinity.podAntiAffinity", "must be a mapping"),
    ({"metadata__ownerReferences": {"kind": "ReplicaSet"}}, "metadata.ownerReferences", "must be a list"),
    ({"spec__tolerations": [{"key": "a", "operator": "Exists", "tolerationSeconds": "x"}]}, "spec.tolerations[0].tolerationSeconds", "integer"),
    ({"spec__nodeName": 5}, "spec.nodeName", "must be a string"),
]


@pytest.mark.parametrize(("patch", "field", "words"), POD_CASES, ids=[c[1] + ":" + c[2] for c in POD_CASES])
def test_bad_pod_names_file_and_field(tmp_path, patch, field, words):
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(_pod(**patch)))
    one_error_line(invoke(*score_args(pod=path)), str(path), f"field {field}:", words)


def test_bad_running_pod_names_its_item(tmp_path):
    bad = _pod({"cpu": "-1"}, spec__nodeName="worker-a")
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [bad]}))
    one_error_line(invoke(*score_args(pods=path)), str(path), "field items[0].spec.containers[0].resources.requests.cpu:")


# --- KubeSchedulerConfiguration values upstream refuses ------------------------------------------

CONFIG_CASES = [
    # Plugin.weight is an int32
    ({"profiles": [{"schedulerName": "a", "plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": 2**31}]}}}]}, "profiles[0].plugins.score.enabled[0].weight", "int32"),
    ({"parallelism": 2**40}, "parallelism", "int32"),
    ({"leaderElection": True}, "leaderElection", "must be a mapping"),
    ({"leaderElection": {"leaderElect": True, "resourceLock": "endpoints"}}, "leaderElection.resourceLock", 'must be "leases"'),
    ({"clientConnection": {"burst": -1}}, "clientConnection.burst", "non-negative"),
    ({"enableProfiling": "yes"}, "enableProfiling", "true or false"),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "InterPodAffinity", "args": {"ignorePreferredTermsOfExistingPods": "false"}}]}]},
        "profiles[0].pluginConfig[0].args.ignorePreferredTermsOfExistingPods",
        "true or false",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"ignoredResources": {"a": 1}}}]}]},
        "profiles[0].pluginConfig[0].args.ignoredResources",
        "must be a list",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"ignoredResourceGroups": ["-bad-"]}}]}]},
        "profiles[0].pluginConfig[0].args.ignoredResourceGroups[0]",
        "alphanumeric",
    ),
    (
        {
            "profiles": [
                {
                    "schedulerName": "a",
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "LeastAllocated", "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]}}},
                        }
                    ],
                }
            ]
        },
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio",
        "Forbidden: must be nil when type is not RequestedToCapacityRatio",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": [1]}}}]}]},
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio",
        "must be a mapping",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": [1]}}]}]},
        "profiles[0].pluginConfig[0].args.addedAffinity",
        "must be a mapping",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [1]}}}]}]},
        "profiles[0].pluginConfig[0].args.addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]",
        "must be a mapping",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": {"a": 1}}}]}]},
        "profiles[0].pluginConfig[0].args.defaultConstraints",
        "must be a list",
    ),
    (
        {
            "profiles": [
                {
                    "schedulerName": "a",
                    "pluginConfig": [
                        {
                            "name": "PodTopologySpread",
                            "args": {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 2**40, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]},
                        }
                    ],
                }
            ]
        },
        "profiles[0].pluginConfig[0].args.defaultConstraints[0].maxSkew",
        "int32",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}}]}]},
        "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage",
        "cannot be zero at the same time as minCandidateNodesAbsolute",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 101}}]}]},
        "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage",
        "not in valid range [0, 100]",
    ),
    (
        {"profiles": [{"schedulerName": "a", "pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": -1}}]}]},
        "profiles[0].pluginConfig[0].args.bindTimeoutSeconds",
        "should not be a negative value",
    ),
]


@pytest.mark.parametrize(("doc", "field", "words"), CONFIG_CASES, ids=[c[1] for c in CONFIG_CASES])
def test_validate_refuses_what_upstream_refuses(tmp_path, doc, field, words):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({**HDR, **doc}))
    r = invoke("scheduler", "validate", str(path))
    assert r.exit_code == 1, r.output
    assert any(ln.startswith(f"{path}: {field}: ") and words in ln for ln in r.output.splitlines()), r.output
    # the same file through --config is one error line naming the file and the field
    one_error_line(invoke(*score_args(config=path)), str(path), f"field {field}:")


def test_total_weight_overflow_is_refused_as_the_framework_does():
    assert total_weight_error({"A": 2**31 - 1, "B": 2**31 - 1}) is None
    assert total_weight_error({"A": 2**60, "B": 2**60}) == "total score of Score plugins could overflow"
    # the largest int32 weights on every default score plugin stay far below MaxInt64
    doc = {**HDR, "profiles": [{"schedulerName": "a", "plugins": {"multiPoint": {"enabled": [{"name": "ImageLocality", "weight": 2**31 - 1}]}}}]}
    assert validate_config_dict(doc) == []
    assert parse_config(doc).profile("a").weight("ImageLocality") == 2**31 - 1


# --- scheduler config: --weights, --shape, --resources, -o ---------------------------------------


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        ("NodeResourcesFit=1,NodeResourcesFit=2", "NodeResourcesFit is given twice"),
        ("NodeResourcesFit=1,,ImageLocality=2", "item 2"),
        ("NodeResourcesFit=5,", "item 2"),
        (",", "item 1"),
        ("NodeResourcesFit=1_0", "not an integer"),
        ("NodeResourcesFit=\u0665", "not an integer"),
        ("=3", "no plugin name"),
    ],
)
def test_config_weights_refuses_sloppy_items(weights, words):
    one_error_line(invoke("scheduler", "config", "--weights", weights), "field weights", words)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--strategy", "RequestedToCapacityRatio", "--shape", "0:0,,100:10"], "field shape"),
        (["--strategy", "RequestedToCapacityRatio", "--shape", "a:0,100:10"], "field shape[0].utilization"),
        (["--resources", "cpu=1,cpu=2"], "field resources.cpu"),
        (["--resources", "=1"], "field resources"),
        (["--resources", "cpu=x"], "field resources.cpu"),
        (["--scheduler-name", ""], "field schedulerName"),
    ],
)
def test_config_options_name_the_bad_item(args, field):
    one_error_line(invoke("scheduler", "config", *args), field)


def test_config_output_naming_a_directory_or_a_path_under_a_file(tmp_path):
    one_error_line(invoke("scheduler", "config", "-o", str(tmp_path)), str(tmp_path), "is a directory")
    assert os.listdir(tmp_path) == []
    plain = tmp_path / "plain"
    plain.write_text("x")
    one_error_line(invoke("scheduler", "config", "-o", str(plain / "out.yaml")), str(plain), "not a directory")
    assert plain.read_text() == "x"


def test_config_output_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "sched.yaml"
    out.write_text("previous\n")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    one_error_line(invoke("scheduler", "config", "--weights", "NodeResourcesFit=5", "-o", str(out)), str(out), "No space left")
    assert out.read_text() == "previous\n"
    assert sorted(os.listdir(tmp_path)) == ["sched.yaml"]  # no temporary left behind
    monkeypatch.undo()
    r = invoke("scheduler", "config", "--weights", "NodeResourcesFit=5", "-o", str(out))
    assert r.exit_code == 0, r.output
    assert "NodeResourcesFit" in out.read_text() and sorted(os.listdir(tmp_path)) == ["sched.yaml"]
    assert oct(out.stat().st_mode & 0o777) != oct(0o600)  # the mode a plain open() gives, not mkstemp's


def test_unknown_profile_names_the_config_file():
    one_error_line(invoke(*score_args(config=EX / "binpack-profile.yaml"), "--profile", "nope"), str(EX / "binpack-profile.yaml"), "'nope'")
    one_error_line(invoke("scheduler", "weights", str(EX / "binpack-profile.yaml"), "--profile", "nope"), str(EX / "binpack-profile.yaml"))


# --- scheduler score: why a node does not fit -----------------------------------------------------


def _cluster(tmp_path: Path, nodes: list[dict], pod: dict) -> tuple[Path, Path]:
    np_, pp = tmp_path / "nodes.json", tmp_path / "pod.json"
    np_.write_text(json.dumps({"kind": "List", "items": nodes}))
    pp.write_text(json.dumps(pod))
    return np_, pp


def _node(name, cpu="4", mem="8Gi", pods="110", **kw):
    return node_obj(name, capacity={"cpu": cpu, "memory": mem, "pods": pods}, labels={"kubernetes.io/hostname": name, **kw.pop("labels", {})}, **kw)


def _simple_pod(cpu="1", mem="1Gi", **spec):
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": mem}}}], **spec}}


def test_nothing_fits_prints_upstreams_fit_error_and_per_node_reasons(tmp_path):
    nodes = [
        _node("small", cpu="500m"),
        _node("tainted", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        _node("elsewhere", labels={"disk": "hdd"}),
        _node("cordoned", unschedulable=True),
        _node("tiny", cpu="100m", mem="64Mi"),
        _node("full", pods="0"),
        _node("down", ready=False),
    ]
    np_, pp = _cluster(tmp_path, nodes, _simple_pod(nodeSelector={"disk": "ssd"}))
    r = invoke(*score_args(nodes=np_, pod=pp))
    out = json.loads(r.stdout)
    assert out["selected"] is None and out["feasible"] == []
    # NodeAffinity runs before NodeResourcesFit: the first failing plugin decides (RunFilterPlugins)
    assert out["unschedulable"] == {
        "small": ["node(s) didn't match Pod's node affinity/selector"],
        "tainted": ["node(s) had untolerated taint {dedicated: gpu}"],
        "elsewhere": ["node(s) didn't match Pod's node affinity/selector"],
        "cordoned": ["node(s) were unschedulable"],
        "tiny": ["node(s) didn't match Pod's node affinity/selector"],
        "full": ["node(s) didn't match Pod's node affinity/selector"],
        "down": ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"],
    }
    expected = (
        "0/7 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
        "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) were unschedulable, 4 node(s) didn't match Pod's node affinity/selector."
    )
    assert out["fit_error"] == expected
    one_error_line(r, f"pod default/p: {expected}")


def test_resource_reasons_list_every_insufficient_resource_in_upstream_order(tmp_path):
    nodes = [_node("small", cpu="500m"), _node("tiny", cpu="100m", mem="64Mi"), _node("full", pods="0", cpu="100m")]
    pod = _simple_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"
    np_, pp = _cluster(tmp_path, nodes, pod)
    r = invoke(*score_args(nodes=np_, pod=pp))
    out = json.loads(r.stdout)
    assert out["unschedulable"] == {
        "small": ["Insufficient cpu", "Insufficient example.com/fpga"],
        "tiny": ["Insufficient cpu", "Insufficient memory", "Insufficient example.com/fpga"],
        "full": ["Too many pods", "Insufficient cpu", "Insufficient example.com/fpga"],
    }
    one_error_line(
        r,
        "0/3 nodes are available: 1 Insufficient memory, 1 Too many pods, 3 Insufficient cpu, 3 Insufficient example.com/fpga.",
    )


def test_some_nodes_fit_exit_zero_and_report_only_the_others(tmp_path):
    nodes = [_node("ok"), _node("small", cpu="500m"), _node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])]
    np_, pp = _cluster(tmp_path, nodes, _simple_pod())
    r = invoke(*score_args(nodes=np_, pod=pp))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["selected"] == "ok" and "fit_error" not in out
    assert out["unschedulable"] == {"small": ["Insufficient cpu"], "tainted": ["node(s) had untolerated taint {k: v}"]}


def test_node_name_and_enforced_affinity_reasons(tmp_path):
    nodes = [_node("a"), _node("b", labels={"pool": "x"})]
    np_, pp = _cluster(tmp_path, nodes, _simple_pod(nodeName="ghost"))
    out = json.loads(invoke(*score_args(nodes=np_, pod=pp)).stdout)
    assert out["unschedulable"] == {n: ["node(s) didn't match the requested node name"] for n in ("a", "b")}
    added = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["y"]}]}]}}
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({**HDR, "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": added}}]}]}))
    np_, pp = _cluster(tmp_path, nodes, _simple_pod())
    r = invoke(*score_args(nodes=np_, pod=pp, config=cfg))
    assert json.loads(r.stdout)["unschedulable"] == {n: ["node(s) didn't match scheduler-enforced node affinity"] for n in ("a", "b")}
    one_error_line(r, "0/2 nodes are available: 2 node(s) didn't match scheduler-enforced node affinity.")


def test_fit_error_message_matches_upstream_format():
    reasons = {"a": ["Insufficient cpu"], "b": ["Insufficient cpu", "Insufficient memory"], "c": ["node(s) had untolerated taint {k: v}"]}
    assert fit_error_message(3, reasons) == "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu."


# --- property: every reported score is within 0..100; negative requests are refused ---------------

QTY = st.integers(0, MAX_QUANTITY)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    caps=st.lists(st.tuples(QTY, QTY), min_size=1, max_size=4),
    req=st.tuples(st.integers(-(10**6), MAX_QUANTITY), st.integers(-(10**6), MAX_QUANTITY)),
    running=st.lists(st.tuples(st.integers(0, 3), QTY, QTY), max_size=4),
    strategy=st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]),
)
def test_scores_stay_in_0_100_and_negative_requests_are_errors(tmp_path, caps, req, running, strategy):
    nodes = [node_obj(f"n{i}", capacity={"cpu": f"{c}m", "memory": str(m), "pods": "110"}, labels={"kubernetes.io/hostname": f"n{i}"}) for i, (c, m) in enumerate(caps)]
    np_, pp = _cluster(tmp_path, nodes, _simple_pod(cpu=f"{req[0]}m", mem=str(req[1])))
    existing = []
    for j, (k, c, m) in enumerate(running):
        p = _simple_pod(cpu=f"{c}m", mem=str(m), nodeName=f"n{k % len(caps)}")
        p["metadata"]["name"] = f"r{j}"
        existing.append(p)
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": existing}))
    cfg = tmp_path / "cfg.yaml"
    r0 = invoke("scheduler", "config", "--strategy", strategy, "-o", str(cfg))
    assert r0.exit_code == 0, r0.output
    r = invoke(*score_args(nodes=np_, pod=pp, pods=pods, config=cfg))
    if req[0] < 0 or req[1] < 0:
        field = "cpu" if req[0] < 0 else "memory"
        one_error_line(r, str(pp), f"field spec.containers[0].resources.requests.{field}:", "greater than or equal to 0")
        return
    assert r.exit_code in (0, 1), r.output
    out = json.loads(r.stdout)
    for node in out["scores"].values():
        assert all(0 <= s <= 100 for s in node["plugins"].values()), node
    assert (out["selected"] is None) == (r.exit_code == 1) == (out["feasible"] == [])


def test_config_error_class_is_an_input_error():
    # the CLI turns these into the one Error: line; callers can catch them by type
    with pytest.raises(ConfigError):
        parse_config({**HDR, "parallelism": 2**40})


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "scheduler", "--nodes", "0"],
        ["bench", "scheduler", "--decisions", "-1"],
        ["bench", "scheduler", "--pods-per-node", "-1"],
        ["bench", "scheduler", "--seed", "-1", "--nodes", "5", "--decisions", "3"],
        ["bench", "scheduler", "--nodes", "99999999999999999999"],
        score_args() + ["--seed", "-1"],
    ],
)
def test_out_of_range_options_are_usage_errors(args):
    r = invoke(*args)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2 and "Invalid value for '--" in r.stderr, r.output
