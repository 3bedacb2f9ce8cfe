"""``scoretune scheduler score|config|validate`` and ``scoretune bench scheduler`` via CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from agent.cli import app
from testbed.scheduler.config import DEFAULT_SCORE_WEIGHTS, SCORE_PLUGINS, load_config, profile_weights

EX = Path(__file__).resolve().parents[3] / "testbed" / "scheduler" / "examples"
runner = CliRunner()


def score(*extra):
    args = ["scheduler", "score", "--nodes", str(EX / "nodes.json"), "--pods", str(EX / "pods.json"), "--pod", str(EX / "pod.json"), *extra]
    return runner.invoke(app, args)


def test_score_prints_the_feasible_nodes_scores_the_filtered_ones_apart_and_a_feasible_pick():
    r = score("--config", str(EX / "binpack-profile.yaml"))
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["profile"] == "default-scheduler"
    # worker-d has a NoSchedule taint the pod does not tolerate: not scored (upstream scores only
    # the nodes that pass Filter), listed apart with its reason
    assert out["feasible"] == ["worker-a", "worker-b", "worker-c"]
    assert set(out["scores"]) == set(out["feasible"])
    assert list(out["unschedulable"]) == ["worker-d"]
    assert out["unschedulable"]["worker-d"][0].startswith("node(s) had untolerated taint")
    assert out["selected"] in out["feasible"]
    assert "NodeAffinity" in out["skipped"]
    for node in out["scores"].values():
        assert node["total"] == sum(DEFAULT_SCORE_WEIGHTS[p] * v for p, v in node["plugins"].items())
    # the revision replica on worker-a and the PreferNoSchedule taint on worker-c
    assert out["scores"]["worker-a"]["plugins"]["InterPodAffinity"] == 0
    assert out["scores"]["worker-c"]["plugins"]["TaintToleration"] == 0
    assert out["selected"] == "worker-b"


def test_score_with_second_profile_and_versions():
    r = score("--config", str(EX / "binpack-profile.yaml"), "--profile", "testbed-binpack", "--kube-version", "1.35", "--seed", "3")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["profile"] == "testbed-binpack"
    assert all("NodeResourcesBalancedAllocation" not in n["plugins"] for n in out["scores"].values())


def test_score_unknown_profile_is_one_error_line():
    r = score("--profile", "nope")
    assert r.exit_code == 1
    assert "no profile has schedulerName 'nope'" in r.output + str(r.exception)


def test_config_writes_a_valid_file(tmp_path):
    out = tmp_path / "sched.yaml"
    r = runner.invoke(app, ["scheduler", "config", "--weights", "NodeResourcesFit=5,ImageLocality=3", "--strategy", "MostAllocated", "--scheduler-name", "testbed-tuned", "-o", str(out)])
    assert r.exit_code == 0, r.output
    c = load_config(out)
    assert [p.scheduler_name for p in c.profiles] == ["default-scheduler", "testbed-tuned"]
    w = profile_weights(c.profile("testbed-tuned"))
    assert w["NodeResourcesFit"] == 5 and w["ImageLocality"] == 3 and w["TaintToleration"] == 3
    assert c.profile("testbed-tuned").fit.strategy == "MostAllocated"
    assert runner.invoke(app, ["scheduler", "validate", str(out)]).exit_code == 0


def test_config_rtcr_shape_to_stdout():
    r = runner.invoke(app, ["scheduler", "config", "--weights", "NodeResourcesFit=2", "--strategy", "RequestedToCapacityRatio", "--shape", "0:0,100:10", "--resources", "cpu=2,memory=1"])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.output)
    st = doc["profiles"][0]["pluginConfig"][0]["args"]["scoringStrategy"]
    assert st["requestedToCapacityRatio"]["shape"] == [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
    assert st["resources"] == [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}]


def test_config_rejects_bad_weight():
    r = runner.invoke(app, ["scheduler", "config", "--weights", "NodeResourcesFit=500"])
    assert r.exit_code == 1 and "not in 1..100" in r.output + str(r.exception)


def test_validate_reports_field_named_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [
                    {
                        "schedulerName": "x",
                        "plugins": {"score": {"enabled": [{"name": "Mystery"}]}},
                        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}}],
                    }
                ],
            }
        )
    )
    r = runner.invoke(app, ["scheduler", "validate", str(bad)])
    assert r.exit_code == 1
    assert "profiles[0].plugins.score.enabled[0].name" in r.output
    assert "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight" in r.output
    assert runner.invoke(app, ["scheduler", "validate", str(EX / "binpack-profile.yaml")]).exit_code == 0


def test_bench_prints_json():
    r = runner.invoke(app, ["bench", "scheduler", "--nodes", "50", "--pods-per-node", "2", "--decisions", "30", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["nodes"] == 50 and out["decisions_per_s"] > 0 and out["placed"] == 30
    assert len(SCORE_PLUGINS) == 7


def test_weights_prints_the_compact_form():
    r = runner.invoke(app, ["scheduler", "weights", str(EX / "binpack-profile.yaml"), "--profile", "testbed-binpack"])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (
        "TaintToleration=1,NodeAffinity=2,NodeResourcesFit=5,PodTopologySpread=2,InterPodAffinity=2,NodeResourcesBalancedAllocation=disabled,ImageLocality=3"
    )


def test_bad_kube_version_is_one_error_line():
    r = score("--kube-version", "latest")
    assert r.exit_code == 1 and "MAJOR.MINOR" in r.output + str(r.exception)
