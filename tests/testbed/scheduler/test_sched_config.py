"""KubeSchedulerConfiguration: defaults, merging, weights semantics, validation, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.errors import ConfigError
from testbed.scheduler.config import (
    DEFAULT_SCORE_WEIGHTS,
    SCORE_PLUGINS,
    config_for_profile,
    config_to_dict,
    default_profile,
    format_weights,
    load_config,
    parse_config,
    parse_weights,
    profile_from_weights,
    profile_weights,
    validate_config_dict,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "testbed" / "scheduler" / "examples"


def cfg(*profiles, **top):
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", **top, "profiles": list(profiles)}


def test_default_profile_has_upstream_weights():
    p = parse_config(cfg({"schedulerName": "default-scheduler"})).profile()
    assert profile_weights(p) == DEFAULT_SCORE_WEIGHTS
    assert p.fit.strategy == "LeastAllocated" and p.fit.resources == (("cpu", 1), ("memory", 1))
    assert p.args("InterPodAffinity").hard_pod_affinity_weight == 1
    assert p.args("PodTopologySpread").defaulting_type == "System"
    assert sum(w for _, w in p.score_weights) * 100 == 1200


def test_missing_profiles_default_to_one_default_scheduler():
    c = parse_config({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"})
    assert [p.scheduler_name for p in c.profiles] == ["default-scheduler"]


def test_shipped_second_profile_example_merges_like_upstream():
    c = load_config(EXAMPLES / "binpack-profile.yaml")
    assert profile_weights(c.profile("default-scheduler")) == DEFAULT_SCORE_WEIGHTS
    w = profile_weights(c.profile("testbed-binpack"))
    assert w == {
        "TaintToleration": 1,  # score-level weight wins over the multiPoint default 3
        "NodeAffinity": 2,
        "NodeResourcesFit": 5,  # re-listed in multiPoint: replaced in place
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesBalancedAllocation": None,  # score.disabled
        "ImageLocality": 3,
    }
    assert c.profile("testbed-binpack").fit.strategy == "MostAllocated"


def test_weight_zero_or_unset_means_one():
    c = parse_config(cfg({"schedulerName": "a", "plugins": {"multiPoint": {"enabled": [{"name": "TaintToleration", "weight": 0}]}, "score": {"enabled": [{"name": "ImageLocality"}]}}}))
    w = profile_weights(c.profile("a"))
    assert w["TaintToleration"] == 1 and w["ImageLocality"] == 1


def test_star_disables_every_score_plugin_but_listed_ones():
    c = parse_config(cfg({"schedulerName": "a", "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit", "weight": 7}]}}}))
    assert c.profile("a").score_weights == (("NodeResourcesFit", 7),)
    # filters are untouched by score.disabled
    assert "NodeResourcesFit" in c.profile("a").filters


def test_multipoint_disabled_removes_filter_and_score():
    c = parse_config(cfg({"schedulerName": "a", "plugins": {"multiPoint": {"disabled": [{"name": "TaintToleration"}]}}}))
    p = c.profile("a")
    assert p.weight("TaintToleration") is None and "TaintToleration" not in p.filters
    again = parse_config(config_to_dict(c))
    assert again == c


def test_percentage_global_and_per_profile():
    c = parse_config(cfg({"schedulerName": "a"}, {"schedulerName": "b", "percentageOfNodesToScore": 70}, percentageOfNodesToScore=40))
    assert c.profile("a").percentage_of_nodes_to_score == 40
    assert c.profile("b").percentage_of_nodes_to_score == 70


@pytest.mark.parametrize(
    "doc,field,fragment",
    [
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}}}]}),
         "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight", "not in valid range (0, 100]"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "memory", "weight": -1}]}}}]}),
         "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight", "resource weight of memory"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 5}]}}}}]}),
         "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization", "sorted in increasing order"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11}]}}}}]}),
         "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[0].score", "not in valid range [0, 10]"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Cheapest"}}}]}),
         "profiles[0].pluginConfig[0].args.scoringStrategy.type", "Unsupported value"),
        (cfg({"schedulerName": "a", "plugins": {"score": {"enabled": [{"name": "NoSuchPlugin", "weight": 3}]}}}),
         "profiles[0].plugins.score.enabled[0].name", "does not exist"),
        (cfg({"schedulerName": "a", "plugins": {"score": {"enabled": [{"name": "NodePorts", "weight": 3}]}}}),
         "profiles[0].plugins.score.enabled[0].name", "does not extend score plugin"),
        (cfg({"schedulerName": "a", "plugins": {"score": {"enabled": [{"name": "ImageLocality", "weight": -2}]}}}),
         "profiles[0].plugins.score.enabled[0].weight", "must not be negative"),
        (cfg({"schedulerName": "a"}, {"schedulerName": "a"}), "profiles[1].schedulerName", "Duplicate value"),
        (cfg({"schedulerName": "a"}, percentageOfNodesToScore=101), "percentageOfNodesToScore", "not in valid range [0-100]"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 101}}]}),
         "profiles[0].pluginConfig[0].args.hardPodAffinityWeight", "not in valid range [0, 100]"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": "cpu", "weight": 2}]}}]}),
         "profiles[0].pluginConfig[0].args.resources[0].weight", "must be 1"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "System", "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}]}),
         "profiles[0].pluginConfig[0].args.defaultingType", "when .defaultConstraints are not empty"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]}}]}),
         "profiles[0].pluginConfig[0].args.defaultConstraints[0].maxSkew", "not in valid range (0, inf)"),
        (cfg({"schedulerName": "a", "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}}}, {"schedulerName": "b"}),
         "profiles[1].plugins.queueSort", "has to match for all profiles"),
        (cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit"}, {"name": "NodeResourcesFit"}]}), "profiles[0].pluginConfig[1]", "Duplicate value"),
        (cfg({"schedulerName": "a"}, extenders=[{"urlPrefix": "http://127.0.0.1:1", "prioritizeVerb": "prioritize", "weight": 0}]), "extenders[0].weight", "positive weight"),
        ({**cfg({"schedulerName": "a"}), "apiVersion": "kubescheduler.config.k8s.io/v1beta3"}, "apiVersion", "must be kubescheduler.config.k8s.io/v1"),
        ({**cfg({"schedulerName": "a"}), "surprise": 1}, "surprise", "unknown field"),
    ],
)
def test_validation_errors_name_the_field(doc, field, fragment):
    errs = validate_config_dict(doc)
    assert any(e.startswith(field + ":") and fragment in e for e in errs), errs
    with pytest.raises(ConfigError) as ei:
        parse_config(doc, file="x.yaml")
    assert str(ei.value).startswith("x.yaml: field ")


def test_zero_resource_weight_is_defaulted_not_rejected():
    doc = cfg({"schedulerName": "a", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 0}]}}}]})
    assert validate_config_dict(doc) == []
    assert parse_config(doc).profile("a").fit.resources == (("cpu", 1),)


def test_compact_weights_round_trip():
    text = "TaintToleration=1,NodeResourcesFit=5,ImageLocality=disabled"
    w = parse_weights(text)
    assert w == {"TaintToleration": 1, "NodeResourcesFit": 5, "ImageLocality": None}
    p = profile_from_weights(w, scheduler_name="tuned")
    full = profile_weights(p)
    assert full["ImageLocality"] is None and full["NodeAffinity"] == 2
    assert parse_weights(format_weights(full)) == full
    c = parse_config(config_to_dict(config_for_profile(p)))
    assert profile_weights(c.profile("tuned")) == full
    assert profile_weights(c.profile("default-scheduler")) == DEFAULT_SCORE_WEIGHTS


@pytest.mark.parametrize("text", ["Nope=1", "NodeResourcesFit=0", "NodeResourcesFit=101", "NodeResourcesFit", "ImageLocality=x"])
def test_compact_weights_errors(text):
    with pytest.raises(ConfigError):
        parse_weights(text)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"strategy": "MostAllocated"},
        {"strategy": "RequestedToCapacityRatio"},
        {"strategy": "RequestedToCapacityRatio", "shape": [(0, 10), (50, 2), (100, 0)], "resources": [("cpu", 3), ("memory", 1)]},
        {"resources": [("cpu", 100), ("memory", 1)]},
    ],
)
def test_profile_from_weights_exports_valid_config_and_round_trips(kw):
    p = profile_from_weights({n: 1 + i for i, n in enumerate(SCORE_PLUGINS)}, scheduler_name="testbed-x", **kw)
    d = config_to_dict(config_for_profile(p))
    assert validate_config_dict(yaml.safe_load(yaml.safe_dump(d))) == []
    assert parse_config(d).profile("testbed-x") == p


def test_profile_is_hashable_and_value_equal():
    a = profile_from_weights({"ImageLocality": 9})
    b = profile_from_weights({"ImageLocality": 9})
    assert a == b and hash(a) == hash(b) and len({a, b, default_profile()}) == 2


def test_parse_config_round_trip_keeps_other_fields():
    doc = cfg({"schedulerName": "a", "pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 20, "minCandidateNodesAbsolute": 50}}]}, parallelism=8, leaderElection={"leaderElect": False})
    c = parse_config(doc)
    d = config_to_dict(c)
    assert d["parallelism"] == 8 and d["leaderElection"] == {"leaderElect": False}
    assert {"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": 50, "minCandidateNodesPercentage": 20}} in d["profiles"][0]["pluginConfig"]
    assert parse_config(d) == c
