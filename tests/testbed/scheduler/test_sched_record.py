"""profile_record: the one shape every backend writes as summary.json["profile"] — JSON-safe,
all 7 score plugins named (None = disabled), and a config that parses back into the same profile."""

from __future__ import annotations

import json

import pytest

from testbed.scheduler.config import (
    SCORE_PLUGINS,
    default_profile,
    parse_config,
    profile_from_weights,
    profile_record,
    profile_weights,
    validate_config_dict,
)

PROFILES = {
    "default": default_profile(),
    "disabled": profile_from_weights({"ImageLocality": 40, "TaintToleration": None, "InterPodAffinity": None}),
    "binpack-other-name": profile_from_weights(
        {"NodeResourcesFit": 9, "NodeResourcesBalancedAllocation": None},
        strategy="RequestedToCapacityRatio", shape=[(0, 0), (50, 3), (100, 10)], scheduler_name="testbed-tuned",
    ),
    "most-allocated": profile_from_weights({"NodeResourcesFit": 100, "PodTopologySpread": 1}, strategy="MostAllocated"),
}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_config_parses_back_to_the_same_weights_and_profile(name):
    profile = PROFILES[name]
    # through JSON, as summary.json stores it
    record = json.loads(json.dumps(profile_record(profile), allow_nan=False))
    assert set(record) == {"scheduler_name", "weights", "config"}
    assert record["scheduler_name"] == profile.scheduler_name
    assert list(record["weights"]) == list(SCORE_PLUGINS)
    assert record["weights"] == profile_weights(profile)
    assert validate_config_dict(record["config"]) == []
    back = parse_config(record["config"], file="summary.json").profile(record["scheduler_name"])
    assert profile_weights(back) == record["weights"]
    assert back == profile  # strategy, shape and the other args survive as well


def test_disabled_plugins_are_none_and_enabled_ones_have_their_weight():
    weights = profile_record(PROFILES["disabled"])["weights"]
    assert weights["TaintToleration"] is None and weights["InterPodAffinity"] is None
    assert weights["ImageLocality"] == 40
    assert weights["NodeAffinity"] == 2  # not named: upstream's default weight
    assert sum(w is None for w in weights.values()) == 2


def test_a_profile_under_another_name_keeps_the_default_scheduler_untouched():
    cfg = parse_config(profile_record(PROFILES["binpack-other-name"])["config"])
    assert [p.scheduler_name for p in cfg.profiles] == ["default-scheduler", "testbed-tuned"]
    assert cfg.profile("default-scheduler") == default_profile()


def test_no_profile_is_recorded_as_none():
    assert profile_record(None) is None
    assert json.dumps({"profile": profile_record(None)}) == '{"profile": null}'
