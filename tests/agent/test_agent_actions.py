"""The action → weights → KubeSchedulerConfiguration mapping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.actions import (
    DISABLE_BELOW,
    WEIGHT_LEVELS,
    ActionCodec,
    WeightSetting,
    coord_to_strategy,
    coord_to_weight,
    strategy_to_coord,
    weight_to_coord,
)
from agent.errors import AgentError
from testbed.scheduler.config import (
    DEFAULT_SCORE_WEIGHTS,
    SCORE_PLUGINS,
    config_for_profile,
    config_to_dict,
    parse_config,
    profile_weights,
    validate_config_dict,
)

CODEC = ActionCodec()


def test_weight_scale_ends_and_disable_region():
    assert coord_to_weight(-1.0) is None
    assert coord_to_weight(DISABLE_BELOW - 1e-9) is None
    assert coord_to_weight(DISABLE_BELOW) == 1
    assert coord_to_weight(1.0) == 100
    assert coord_to_weight(5.0) == 100  # clipped into the box
    # log scale: the middle of the weight range is weight 10
    assert coord_to_weight(DISABLE_BELOW + 0.5 * (1 - DISABLE_BELOW)) == 10
    assert coord_to_weight(-1.0, allow_disable=False) == 1


def test_every_weight_round_trips_through_float32():
    for w in range(1, 101):
        assert coord_to_weight(np.float32(weight_to_coord(w))) == w
        assert coord_to_weight(np.float32(weight_to_coord(w, allow_disable=False)), allow_disable=False) == w
    assert coord_to_weight(weight_to_coord(None)) is None


def test_strategy_coordinate():
    assert coord_to_strategy(-1.0) == ("LeastAllocated", None)
    assert coord_to_strategy(1.0) == ("MostAllocated", None)
    assert coord_to_strategy(0.0) == ("RequestedToCapacityRatio", ((0, 5), (100, 5)))
    assert coord_to_strategy(0.6) == ("RequestedToCapacityRatio", ((0, 2), (100, 8)))
    for k in range(11):
        name, shape = coord_to_strategy(np.float32(2 * k / 10 - 1))
        assert strategy_to_coord(name, shape) == pytest.approx(2 * k / 10 - 1)
    with pytest.raises(AgentError, match="not in the action space"):
        strategy_to_coord("RequestedToCapacityRatio", ((0, 0), (50, 5), (100, 10)))


def test_reference_action_decodes_to_the_kube_scheduler_defaults():
    setting = CODEC.decode(CODEC.reference_action())
    assert dict(setting.weights) == DEFAULT_SCORE_WEIGHTS
    assert setting.strategy == "LeastAllocated" and setting.shape is None
    profile = setting.to_profile()
    assert profile_weights(profile) == DEFAULT_SCORE_WEIGHTS
    assert profile.fit.strategy == "LeastAllocated"


def test_codec_validates_dimensions_and_names():
    with pytest.raises(AgentError, match="expects 8"):
        CODEC.decode(np.zeros(3))
    with pytest.raises(AgentError, match="non-finite"):
        CODEC.decode(np.full(8, np.nan))
    with pytest.raises(AgentError, match="unknown score plugin"):
        ActionCodec(plugins=("NodeResourcesFit", "Nope"))
    partial = ActionCodec(plugins=("NodeResourcesFit",), tune_strategy=False)
    s = partial.decode([1.0])
    assert s.weights["NodeResourcesFit"] == 100
    assert s.weights["TaintToleration"] == DEFAULT_SCORE_WEIGHTS["TaintToleration"]  # untuned: default
    assert ActionCodec.from_dict(partial.to_dict()) == partial


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=32), min_size=8, max_size=8))
def test_random_actions_export_valid_configurations(action):
    setting = CODEC.decode(action)
    config = config_for_profile(setting.to_profile())
    doc = config_to_dict(config)
    assert validate_config_dict(doc) == []
    # The exported document means the same profile when read back.
    reread = parse_config(doc).profile("default-scheduler")
    assert profile_weights(reread) == {p: setting.weights[p] for p in SCORE_PLUGINS}
    assert reread.fit.strategy == setting.strategy
    # and the canonical re-encoding decodes to the same setting
    assert CODEC.decode(CODEC.encode(setting)) == setting


def test_label_names_every_plugin():
    s = WeightSetting(weights={"ImageLocality": None, "NodeResourcesFit": 7}, strategy="MostAllocated")
    assert s.label() == "ImageLocality=off,NodeResourcesFit=7|MostAllocated"


def test_lattice_points_decode_to_their_levels():
    codec = ActionCodec()
    assert WEIGHT_LEVELS == (None, 1, 2, 3, 5, 8, 13, 22, 36, 60, 100)
    assert codec.lattice_sizes() == [11] * len(SCORE_PLUGINS) + [11]
    for level, weight in enumerate(WEIGHT_LEVELS):
        for k in range(11):
            index = np.array([level] * len(SCORE_PLUGINS) + [k])
            setting = codec.decode(codec.lattice_action(index))
            assert set(setting.weights.values()) == {weight}
            assert strategy_to_coord(setting.strategy, setting.shape) == pytest.approx(2 * k / 10 - 1)
    # the defaults (1, 2, 3) are lattice points, so the reference profile is one too
    index = [WEIGHT_LEVELS.index(DEFAULT_SCORE_WEIGHTS[p]) for p in SCORE_PLUGINS] + [0]
    assert codec.decode(codec.lattice_action(np.array(index))) == codec.reference()
    # without "disabled" the levels are the ten weights
    assert ActionCodec(allow_disable=False).lattice_sizes()[0] == 10


def test_lattice_action_rejects_bad_points():
    codec = ActionCodec()
    with pytest.raises(AgentError, match="outside the choices"):
        codec.lattice_action(np.array([11] + [0] * 7))
    with pytest.raises(AgentError, match="8 integers"):
        codec.lattice_action(np.array([0.5] * 8))
