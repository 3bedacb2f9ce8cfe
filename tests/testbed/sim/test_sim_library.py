"""The scenario library and cluster specs: enough variety, a real split, cached workloads, the
Alibaba-derived spec reproducible from the trace, and the kubectl twin importer."""

from __future__ import annotations

import json

import pytest
import yaml

from testbed.cluster import CLUSTERS_DIR, load_cluster
from testbed.errors import ClusterSpecError, ConfigError
from testbed.scenarios import SCENARIOS, WORKLOADS, build_workload, get_scenario, scenarios
from testbed.sim.importer import alibaba_node_mix, import_cluster


def test_cluster_library():
    names = sorted(p.stem for p in CLUSTERS_DIR.glob("*.yaml"))
    assert len(names) >= 8
    for required in ("lab-small", "homogeneous-20", "large-120", "alibaba-gpu2023-32", "spot-16", "memory-tight-12",
                     "zones-18", "image-skew-12", "mixed-speed-16"):
        assert required in names
    specs = {n: load_cluster(n) for n in names}
    assert len(specs["large-120"].nodes) >= 100
    assert any(t.effect == "PreferNoSchedule" for n in specs["spot-16"].nodes for t in n.taints)
    assert len({n.speed for n in specs["mixed-speed-16"].nodes}) > 1
    assert len({n.images for n in specs["image-skew-12"].nodes}) > 1
    assert len({n.labels.get("topology.kubernetes.io/zone") for n in specs["zones-18"].nodes}) == 3
    assert min(n.memory_bytes for n in specs["memory-tight-12"].nodes) <= 2 * 2**30


def test_scenarios_reference_shipped_clusters_and_split():
    assert len(WORKLOADS) >= 8
    kinds = {w.kind for w in WORKLOADS.values()}
    assert kinds == {"synth", "trace"}
    train, test = scenarios("train"), scenarios("test")
    assert train and test and len(train) + len(test) == len(SCENARIOS)
    for s in SCENARIOS.values():
        load_cluster(s.cluster)
    seen_clusters = {s.cluster for s in train}
    seen_workloads = {s.workload.name for s in train}
    assert any(s.cluster not in seen_clusters for s in test), "test needs an unseen cluster"
    assert any(s.workload.name not in seen_workloads for s in test), "test needs an unseen workload"
    assert get_scenario("homog-web").split == "train"
    with pytest.raises(ConfigError, match="unknown scenario"):
        get_scenario("nope")
    with pytest.raises(ConfigError, match="unknown split"):
        scenarios("validation")


def test_build_workload_caches_outside_the_repo(tmp_path, monkeypatch):
    monkeypatch.setenv("SCORETUNE_CACHE", str(tmp_path))
    s = get_scenario("homog-web")
    w1 = build_workload(s)
    files = list((tmp_path / "workloads").glob("*.parquet"))
    assert len(files) == 1
    w2 = build_workload(s)
    assert w1.frame.equals(w2.frame)
    assert w1.metadata["name"] == "poisson-web" and w1.metadata["recipe"]["seed"] == s.seed
    assert 250 <= w1.duration_s <= 360


def test_trace_scenario_builds(tmp_path, use_fixture_traces):
    w = build_workload(get_scenario("homog-azure21"), cache=tmp_path)
    assert len(w) > 100 and w.duration_s <= 300.0 + 1e-6


def test_alibaba_spec_reproducible(real_trace):
    got = alibaba_node_mix(real_trace("alibaba/gpu2023_openb_node_list_all_node.csv"))
    shipped = yaml.safe_load((CLUSTERS_DIR / "alibaba-gpu2023-32.yaml").read_text())
    assert got == shipped
    assert sum(g["count"] for g in got["groups"]) == 32


def _node(name, cpu="4", mem="8Gi", *, labels=None, taints=None, images=None, ann=None):
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}, "annotations": ann or {}},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"},
                   "images": [{"names": [i], "sizeBytes": 1000} for i in (images or [])]},
    }


def _pod(name, node, cpu, mem, labels=None, phase="Running"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "kube-system", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                                                       "resources": {"requests": {"cpu": cpu, "memory": mem}}}]},
            "status": {"phase": phase}}


def test_import_cluster_twin(tmp_path):
    nodes = {"kind": "List", "items": [
        _node("w1", labels={"topology.kubernetes.io/zone": "a"}, images=["img:1"], ann={"scoretune.io/speed": "1.5"}),
        _node("w2", cpu="2", mem="4Gi", taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]),
    ]}
    pods = {"kind": "List", "items": [
        _pod("dns", "w1", "500m", "1Gi"),
        _pod("done", "w1", "1", "1Gi", phase="Succeeded"),
        _pod("fn", "w2", "1", "1Gi", labels={"serving.knative.dev/revision": "fn-00001"}),
    ]}
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    spec = import_cluster(tmp_path / "nodes.json", tmp_path / "pods.json", name="twin")
    w1, w2 = spec.nodes
    assert (w1.name, w1.cpu_milli, w1.memory_bytes, w1.pods) == ("w1", 3500, 7 * 2**30, 109)
    assert w1.speed == 1.5 and w1.images == ("img:1",) and w1.labels == {"topology.kubernetes.io/zone": "a"}
    assert (w2.cpu_milli, w2.memory_bytes, w2.pods) == (2000, 4 * 2**30, 110)  # the Knative pod is not subtracted
    assert w2.taints[0].effect == "PreferNoSchedule"
    assert "1 running non-Knative pods" in spec.description


def test_import_cluster_cli(tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app

    (tmp_path / "nodes.json").write_text(json.dumps({"items": [_node("a"), _node("b")]}))
    out = tmp_path / "twin.yaml"
    r = CliRunner().invoke(app, ["sim", "import-cluster", "--nodes", str(tmp_path / "nodes.json"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    spec = load_cluster(out)
    assert [n.name for n in spec.nodes] == ["a", "b"]


def test_import_cluster_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ClusterSpecError, match="bad.json: not valid JSON"):
        import_cluster(tmp_path / "bad.json")
    (tmp_path / "empty.json").write_text(json.dumps({"items": []}))
    with pytest.raises(ClusterSpecError, match="no nodes"):
        import_cluster(tmp_path / "empty.json")
    (tmp_path / "full.json").write_text(json.dumps({"items": [_node("a", cpu="500m")]}))
    (tmp_path / "hog.json").write_text(json.dumps({"items": [_pod("hog", "a", "1", "1Mi")]}))
    with pytest.raises(ClusterSpecError, match="nothing left"):
        import_cluster(tmp_path / "full.json", tmp_path / "hog.json")
