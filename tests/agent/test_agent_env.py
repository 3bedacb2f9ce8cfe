"""The Gymnasium environment contract, the observation's information content and frame stacking."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from agent_fixtures import AnalyticObjective, analytic_sampler
from gymnasium.utils.env_checker import check_env

from agent.errors import AgentError
from agent.rl.env import ENV_ID, SchedulerTuningEnv, make_env


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")  # the lattice wrapper is the point
def test_gymnasium_env_checker():
    check_env(SchedulerTuningEnv(analytic_sampler, steps=5), skip_render_check=True)
    check_env(SchedulerTuningEnv(analytic_sampler, steps=5, info="full"), skip_render_check=True)
    check_env(make_env(analytic_sampler, steps=5, frame_stack=3).unwrapped, skip_render_check=True)
    check_env(make_env(analytic_sampler, steps=5, frame_stack=1, action="lattice"), skip_render_check=True)


def test_sb3_env_checker():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    sb3_check_env(make_env(analytic_sampler, steps=5, frame_stack=3), warn=True)
    sb3_check_env(make_env(analytic_sampler, steps=5, frame_stack=3, action="lattice"), warn=True)


def test_registered_id_builds_the_env():
    env = gym.make(ENV_ID, sampler=analytic_sampler, steps=4)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert info["step"] == 0


def test_episode_is_reference_plus_T_steps_and_terminates():
    env = SchedulerTuningEnv(analytic_sampler, steps=4)
    obs, info = env.reset(seed=0)
    ref = info["metric"]
    for t in range(1, 5):
        obs, r, terminated, truncated, info = env.step(env.action_space.sample())
        assert info["step"] == t and info["reference_metric"] == ref
        assert terminated == (t == 4) and truncated is False
        assert obs[-1] == pytest.approx(t / 4)  # progress
    with pytest.raises(AgentError, match="call reset"):
        env.step(env.action_space.sample())


def test_reset_seed_determines_the_scenario_draw():
    env = SchedulerTuningEnv(analytic_sampler, steps=3)
    _, a = env.reset(seed=11)
    _, b = env.reset(seed=11)
    _, c = env.reset(seed=12)
    assert a["objective"] == b["objective"] != c["objective"]


def test_rewards_follow_the_chosen_variant():
    obj = AnalyticObjective(seed=5)
    env = SchedulerTuningEnv(analytic_sampler, steps=3, reward_kind="reference")
    _, info = env.reset(options={"objective": obj})
    ref = info["metric"]
    _, r, *_rest, step_info = env.step(np.ones(env.action_space.shape, np.float32))
    assert r == pytest.approx(100 * (ref - step_info["metric"]) / ref)


class _LuckyObjective:
    """Measures a fixed sequence of values (noise the test chooses) over a known truth per profile."""

    def __init__(self, measured, truth):
        self.measured, self.true, self.name = list(measured), truth, "lucky"

    def __call__(self, setting):
        return self.measured.pop(0)

    def truth(self, setting):
        return self.true[setting.label()]

    def context(self):
        return {}


def test_true_reward_pays_the_incumbent_truth_and_punishes_a_lucky_measurement():
    from agent.actions import ActionCodec

    codec = ActionCodec()
    a, b, c = (np.full(codec.dim, v, np.float32) for v in (1.0, -0.2, 0.4))
    ref, sa, sb, sc = codec.reference(), codec.decode(a), codec.decode(b), codec.decode(c)
    assert len({s.label() for s in (ref, sa, sb, sc)}) == 4
    truth = {ref.label(): 10.0, sa.label(): 8.0, sb.label(): 9.0, sc.label(): 7.0}
    # a measures 8.5 (a new best, truly 8); b measures 7.9, lucky (truly 9, worse than a);
    # c measures 8.2, not a new best (truly 7, but the tuner cannot know it: nothing is paid)
    obj = _LuckyObjective([10.0, 8.5, 7.9, 8.2], truth)
    env = SchedulerTuningEnv(analytic_sampler, steps=3, reward_kind="true")
    env.reset(options={"objective": obj})
    rewards = [env.step(x)[1] for x in (a, b, c)]
    assert rewards == pytest.approx([20.0, -10.0, 0.0])
    assert sum(rewards) == pytest.approx(100 * (10.0 - 9.0) / 10.0)  # the applied profile (b)'s true gain
    # the measured "best" reward pays the lucky draw instead
    best = SchedulerTuningEnv(analytic_sampler, steps=3, reward_kind="best")
    best.reset(options={"objective": _LuckyObjective([10.0, 8.5, 7.9, 8.2], truth)})
    assert [best.step(x)[1] for x in (a, b, c)] == pytest.approx([15.0, 6.0, 0.0])


def test_true_reward_without_a_truth_equals_best():
    rng = np.random.default_rng(7)
    actions = [rng.uniform(-1, 1, _action_dim()).astype(np.float32) for _ in range(6)]
    paid = {}
    for kind in ("true", "best"):
        env = SchedulerTuningEnv(analytic_sampler, steps=6, reward_kind=kind)
        env.reset(options={"objective": AnalyticObjective(seed=11)})
        paid[kind] = [env.step(x)[1] for x in actions]
    assert paid["true"] == pytest.approx(paid["best"]) and sum(paid["best"]) > 0


def _action_dim() -> int:
    from agent.actions import ActionCodec

    return ActionCodec().dim


def _episode(env, objective, actions):
    obs, _ = env.reset(options={"objective": objective})
    out = [obs]
    for a in actions:
        obs, *_ = env.step(a)
        out.append(obs)
    return np.stack(out)


def test_limited_observation_does_not_identify_the_scenario():
    """Scaling every latency by 7 (a slower cluster) leaves the limited observation unchanged;
    the full-information variant sees the difference."""
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, 8).astype(np.float32) for _ in range(4)]
    fast, slow = AnalyticObjective(seed=1, base_s=0.1), AnalyticObjective(seed=1, base_s=0.7)
    limited = SchedulerTuningEnv(analytic_sampler, steps=4)
    np.testing.assert_allclose(_episode(limited, fast, actions), _episode(limited, slow, actions), atol=1e-6)
    full = SchedulerTuningEnv(analytic_sampler, steps=4, info="full")
    assert not np.allclose(_episode(full, fast, actions), _episode(full, slow, actions))


def test_frame_stack_shape_and_reset_padding():
    env = make_env(analytic_sampler, steps=4, frame_stack=3)
    base = SchedulerTuningEnv(analytic_sampler, steps=4)
    d = base.observation_space.shape[0]
    assert env.observation_space.shape == (3 * d,)
    obs, _ = env.reset(seed=0)
    obs = obs.reshape(3, d)
    np.testing.assert_array_equal(obs[0], obs[2])  # padded with the reference frame
    obs2, *_ = env.step(env.action_space.sample())
    obs2 = obs2.reshape(3, d)
    np.testing.assert_array_equal(obs2[1], obs[2])  # the stack shifts by one, oldest first
    assert obs2[2][-1] == pytest.approx(1 / 4)
    assert make_env(analytic_sampler, frame_stack=1).observation_space.shape == base.observation_space.shape
    with pytest.raises(AgentError, match="frame_stack"):
        make_env(analytic_sampler, frame_stack=0)


def test_invalid_arguments_are_named():
    with pytest.raises(AgentError, match="unknown reward"):
        SchedulerTuningEnv(analytic_sampler, reward_kind="x")
    with pytest.raises(AgentError, match="info mode"):
        SchedulerTuningEnv(analytic_sampler, info="everything")


def test_incumbent_slot_holds_the_best_action_so_far():
    env = SchedulerTuningEnv(analytic_sampler, steps=6, incumbent=True)
    check_env(SchedulerTuningEnv(analytic_sampler, steps=5, incumbent=True), skip_render_check=True)
    names = env.builder.names
    d = env.codec.dim
    b = slice(names.index(f"b:{env.codec.names[0]}"), names.index(f"b:{env.codec.names[0]}") + d)
    obs, info = env.reset(seed=1)
    reference = env.codec.encode(env.codec.reference())
    np.testing.assert_allclose(obs[b], reference, atol=1e-6)  # nothing has beaten the reference yet
    rng = np.random.default_rng(0)
    metrics, actions = [info["metric"]], [reference]
    for _ in range(6):
        action = rng.uniform(-1, 1, d).astype(np.float32)
        obs, _, _, _, info = env.step(action)
        metrics.append(info["metric"])
        actions.append(env.codec.encode(env.codec.decode(action)))
        best = actions[int(np.argmin(metrics))]
        np.testing.assert_allclose(obs[b], best, atol=1e-6)
        assert env.observation_space.contains(obs)
    # it changes nothing else: the other slots equal the plain observation's
    plain = SchedulerTuningEnv(analytic_sampler, steps=6)
    assert plain.builder.names == names[: len(plain.builder.names)]


def test_incumbent_observation_survives_the_frame_stack_and_the_policy_config(tmp_path):
    import json

    from agent.rl.artefacts import PolicyConfig
    from agent.rl.train import Args, policy_config

    env = make_env(analytic_sampler, steps=4, frame_stack=3, incumbent=True)
    base = make_env(analytic_sampler, steps=4, frame_stack=3)
    d = SchedulerTuningEnv(analytic_sampler).codec.dim
    assert env.observation_space.shape[0] == base.observation_space.shape[0] + 3 * d
    # the config training writes, read back as the tuner reads it: the flag is carried both ways
    for incumbent in (True, False):
        path = tmp_path / f"policy-{incumbent}.json"
        path.write_text(json.dumps(policy_config(Args(incumbent=incumbent, frame_stack=3, steps=4), command="test")))
        loaded = PolicyConfig.load(path)
        assert loaded.incumbent is incumbent and loaded.frame_stack == 3


def test_lattice_actions_step_the_box_environment_with_their_centres():
    from agent.actions import ActionCodec

    codec = ActionCodec()
    env = make_env(analytic_sampler, steps=3, frame_stack=1, action="lattice", codec=codec)
    env.reset(seed=0)
    index = np.array([0, 10, 1, 2, 3, 4, 5, 10])
    _, _, _, _, info = env.step(index)
    assert info["setting"] == codec.decode(codec.lattice_action(index))
    assert info["setting"].weights["TaintToleration"] is None and info["setting"].strategy == "MostAllocated"
    with pytest.raises(AgentError, match="unknown action space"):
        make_env(analytic_sampler, action="grid")
