"""The plugin layer: adding a score plugin is one module plus one registry row, ablating one is
removing its row; the default plugins are one module each, citing upstream."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from testbed.errors import ConfigError, TestbedError
from testbed.scheduler.builders import make_node, make_pod
from testbed.scheduler.config import (
    API_VERSION,
    KIND,
    Profile,
    config_to_dict,
    parse_config,
    profile_from_weights,
    validate_config_dict,
)
from testbed.scheduler.framework import Scheduler
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.plugins.registry import DEFAULT_REGISTRY, SCORE, Entry
from testbed.scheduler.validation import type_error


@dataclass(frozen=True)
class FavouriteArgs:
    node: str = ""


class Favourite(ScorePlugin):
    """A toy plugin: 100 on the node its args name, 0 elsewhere (Skip without a favourite)."""

    name: ClassVar[str] = "Favourite"
    upstream: ClassVar[str] = "(none: a test plugin)"
    args_type: ClassVar[type] = FavouriteArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        node = raw.get("node", "")
        return [] if isinstance(node, str) else [type_error(f"{path}.node", node, "a string")]

    def decode_args(self, raw: Any, path: str) -> FavouriteArgs:
        return FavouriteArgs(raw.get("node", ""))

    def encode_args(self, args: FavouriteArgs) -> dict[str, Any] | None:
        return None if args == FavouriteArgs() else {"node": args.node}

    def pre_score(self, c: Cluster, t: Template, prepared: Any, args: FavouriteArgs) -> np.ndarray | None:
        if not args.node:
            return None
        return np.array([100 if node.name == args.node else 0 for node in c.nodes], dtype=np.int64)

    def score(self, c: Cluster, state: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return state[idx]


#: the one registry line
TOY = DEFAULT_REGISTRY.with_entry(Entry("Favourite", frozenset({SCORE}), weight=50, plugin=Favourite()))

NODES = [make_node(f"n{i}", capacity={"cpu": "4", "memory": "8Gi", "pods": "10"}) for i in range(4)]
POD = make_pod("p", requests=[{"cpu": "100m", "memory": "100Mi"}])


def _doc(args: dict[str, Any] | None) -> dict[str, Any]:
    prof: dict[str, Any] = {"schedulerName": "toy"}
    if args is not None:
        prof["pluginConfig"] = [{"name": "Favourite", "args": args}]
    return {"apiVersion": API_VERSION, "kind": KIND, "profiles": [prof]}


def test_a_registered_toy_plugin_is_configured_and_scored():
    profile = parse_config(_doc({"node": "n2"}), registry=TOY).profile("toy")
    assert profile.weight("Favourite") == 50
    assert profile.args("Favourite", TOY) == FavouriteArgs("n2")
    s = Scheduler(NODES, profile, registry=TOY)
    scores, skipped = s.plugin_scores(POD)
    assert scores["Favourite"].tolist() == [0, 0, 100, 0] and "Favourite" not in skipped
    # identical empty nodes tie on every default plugin: the toy plugin decides
    assert all(s.schedule(POD) == 2 for _ in range(5))
    detail = s.score(POD)
    assert detail.scores["n2"]["plugins"]["Favourite"] == 100
    assert detail.scores["n2"]["total"] - detail.scores["n1"]["total"] == 50 * 100


def test_the_toy_plugins_args_are_validated_and_written_back():
    errs = validate_config_dict(_doc({"node": 3}), registry=TOY)
    assert errs == ["profiles[0].pluginConfig[0].args.node: Invalid value: 3: must be a string, not the number 3"]
    cfg = parse_config(_doc({"node": "n1"}), registry=TOY)
    out = config_to_dict(cfg, registry=TOY)
    assert {"name": "Favourite", "args": {"node": "n1"}} in out["profiles"][0]["pluginConfig"]
    assert parse_config(out, registry=TOY) == cfg


def test_without_args_the_toy_plugin_skips_and_the_default_registry_does_not_know_it():
    s = Scheduler(NODES, profile_from_weights({"Favourite": 7}, registry=TOY), registry=TOY)
    assert "Favourite" in s.plugin_scores(POD)[1]
    with pytest.raises(ConfigError, match="unknown score plugin 'Favourite'"):
        profile_from_weights({"Favourite": 7})
    assert any("does not exist" in e for e in validate_config_dict(
        {**_doc(None), "profiles": [{"plugins": {"score": {"enabled": [{"name": "Favourite"}]}}}]}
    ))
    with pytest.raises(TestbedError, match="not in the registry"):
        Scheduler(NODES, Profile(score_weights=(("Favourite", 1),)))


def test_ablating_a_plugin_is_removing_its_registry_row():
    ablated = DEFAULT_REGISTRY.without("ImageLocality")
    profile = profile_from_weights({}, registry=ablated)
    assert "ImageLocality" not in dict(profile.score_weights)
    scores, _ = Scheduler(NODES, profile, registry=ablated).plugin_scores(POD)
    assert "ImageLocality" not in scores and "NodeResourcesFit" in scores
    doc = {**_doc(None), "profiles": [{"plugins": {"score": {"enabled": [{"name": "ImageLocality"}]}}}]}
    assert any("plugin 'ImageLocality' does not exist" in e for e in validate_config_dict(doc, registry=ablated))
    assert validate_config_dict(doc) == []


def test_each_default_score_plugin_is_one_module_citing_upstream():
    modules = {}
    for name in DEFAULT_REGISTRY.score_plugins:
        plugin = DEFAULT_REGISTRY.plugin(name)
        assert plugin.name == name
        assert plugin.upstream.startswith("pkg/scheduler/framework/plugins/")
        module = importlib.import_module(type(plugin).__module__)
        assert module.__name__.startswith("testbed.scheduler.plugins.")
        assert plugin.upstream in (module.__doc__ or "")
        modules[name] = module.__name__
    assert len(set(modules.values())) == len(modules) == 7
    assert DEFAULT_REGISTRY.default_weights == {
        "TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1, "PodTopologySpread": 2,
        "InterPodAffinity": 2, "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1,
    }  # fmt: skip


def test_a_registry_refuses_a_score_plugin_without_a_weight_or_under_another_name():
    with pytest.raises(ValueError, match="default weight"):
        DEFAULT_REGISTRY.with_entry(Entry("Favourite", frozenset({SCORE}), plugin=Favourite()))
    with pytest.raises(ValueError, match="own name"):
        DEFAULT_REGISTRY.with_entry(Entry("Other", frozenset({SCORE}), weight=1, plugin=Favourite()))
