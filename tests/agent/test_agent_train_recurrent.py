"""RecurrentPPO (``--algo recurrent-ppo``): trains, ships, and tunes with its LSTM state carried along."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from agent_fixtures import AnalyticObjective, analytic_sampler

from agent.actions import ActionCodec
from agent.evaluation.runner import run_experiment
from agent.rl.artefacts import PolicyConfig, export_policy
from agent.rl.train import Args, check_args, train
from agent.tuners.policy import PolicyTuner

CODEC = ActionCodec()


def _tiny(tmp_path, **kw) -> Args:
    return Args(out=str(tmp_path / "run"), algo="recurrent-ppo", frame_stack=1, total_timesteps=200, num_envs=2,
                vec="dummy", steps=5, n_steps=20, batch_size=20, n_epochs=2, checkpoint_freq=0, progress_bar=False,
                **kw)


class _Recording:
    """A tuner wrapper that keeps every suggestion (run_experiment clips what it runs)."""

    def __init__(self, tuner: PolicyTuner) -> None:
        self.tuner = tuner
        self.name = tuner.name
        self.suggestions: list[np.ndarray] = []

    def suggest(self) -> np.ndarray:
        action = self.tuner.suggest()
        self.suggestions.append(action)
        return action

    def tell(self, action, metric) -> None:
        self.tuner.tell(action, metric)


def _feed(tuner: PolicyTuner, middle: list[float]) -> np.ndarray:
    """The reference (1.0), runs with metrics ``middle`` (all worse than the reference, so the best
    stays the reference), then one fixed run; the suggestion after it. The fixed actions are the
    same whatever the tuner suggested, so only the middle metrics differ between two histories."""
    rng = np.random.default_rng(0)
    tuner.tell(CODEC.reference_action(), 1.0)
    for metric in [*middle, 1.2]:
        tuner.suggest()
        tuner.tell(rng.uniform(-1, 1, CODEC.dim).astype(np.float32), metric)
    return tuner.suggest()


def test_tiny_recurrent_ppo_run_tunes_with_its_lstm_state(tmp_path):
    from sb3_contrib import RecurrentPPO
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    model_path = train(_tiny(tmp_path), sampler=analytic_sampler)
    config = json.loads(model_path.with_suffix(".json").read_text())
    assert config["algo"] == "recurrent-ppo" and config["frame_stack"] == 1
    model = RecurrentPPO.load(str(model_path), device="cpu")
    assert model.policy.lstm_actor.hidden_size == 64
    shipped = export_policy(model_path, config, tmp_path / "ship" / "p.zip")
    assert PolicyConfig.load(shipped.with_suffix(".json")).algo == "recurrent-ppo"

    runs = {}
    for name, path in (("model", model_path), ("policy", shipped)):
        tuner = PolicyTuner.from_file(path)
        assert isinstance(tuner.model, RecurrentPPO if name == "model" else RecurrentActorCriticPolicy)
        recording = _Recording(tuner)
        metrics = run_experiment(recording, AnalyticObjective(seed=1), 5, CODEC)[1]
        assert len(metrics) == 6 and all(np.isfinite(metrics))
        assert len(recording.suggestions) == 5
        assert all(np.all(np.abs(a) <= 1.0) and a.shape == (CODEC.dim,) for a in recording.suggestions)
        runs[name] = metrics
    # the shipped network acts exactly as the whole model
    assert runs["policy"] == runs["model"]

    # the state is carried: the episode starts on the first suggest only, and the state is kept
    tuner = PolicyTuner.from_file(shipped)
    tuner.tell(CODEC.reference_action(), 1.0)
    assert tuner._lstm_state is None and tuner._episode_start is True
    tuner.suggest()
    assert tuner._lstm_state is not None and tuner._episode_start is False
    first = [s.copy() for s in tuner._lstm_state]
    tuner.tell(CODEC.encode(CODEC.equal()), 1.1)
    tuner.suggest()
    assert not np.array_equal(first[0], tuner._lstm_state[0])

    # the property: the same newest observation after different histories gives different actions
    # (a policy that dropped its state between suggests would answer the same observation alike)
    a, b = PolicyTuner.from_file(shipped), PolicyTuner.from_file(shipped)
    action_a, action_b = _feed(a, [1.5, 1.9]), _feed(b, [1.05, 1.3])
    assert np.array_equal(a.obs, b.obs)
    assert not np.allclose(action_a, action_b, atol=1e-7)
    # ... and the same history gives the same actions (deterministic)
    assert np.array_equal(_feed(PolicyTuner.from_file(shipped), [1.5, 1.9]), action_a)

    # sampling adds the std-scaled Gaussian around the mean, seeded
    sample = PolicyTuner.from_file(shipped, deterministic=False, seed=3)
    sample.tell(CODEC.reference_action(), 1.0)
    drawn = sample.suggest()
    mean = PolicyTuner.from_file(shipped)
    mean.tell(CODEC.reference_action(), 1.0)
    assert not np.allclose(drawn, mean.suggest())
    assert np.all(np.abs(drawn) <= 1.0)
    again = PolicyTuner.from_file(shipped, deterministic=False, seed=3)
    again.tell(CODEC.reference_action(), 1.0)
    assert np.array_equal(again.suggest(), drawn)


def test_recurrent_ppo_with_lattice_actions(tmp_path):
    """RecurrentPPO takes the MultiDiscrete head; its tuner acts on lattice points, both ways."""
    args = _tiny(tmp_path, action="lattice")
    args.total_timesteps = 80
    model_path = train(args, sampler=analytic_sampler)
    centres = {round(float(CODEC.lattice_action(np.array([i] * 8))[0]), 6) for i in range(11)}
    for deterministic in (True, False):
        tuner = PolicyTuner.from_file(model_path, deterministic=deterministic, seed=3)
        metrics = run_experiment(tuner, AnalyticObjective(seed=1), 3, CODEC)[1]
        assert len(metrics) == 4 and all(np.isfinite(metrics))
        assert tuner._lstm_state is not None and tuner._episode_start is False
        tuner = PolicyTuner.from_file(model_path, deterministic=deterministic, seed=3)
        tuner.tell(CODEC.reference_action(), 1.0)
        assert {round(float(a), 6) for a in tuner.suggest()[:7]} <= centres


def test_recurrent_ppo_with_a_frame_stack_warns_but_is_allowed(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="agent.rl.train"):
        check_args(Args(out=str(tmp_path / "a"), algo="recurrent-ppo", frame_stack=4))
    assert any("recurrent-ppo" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agent.rl.train"):
        check_args(Args(out=str(tmp_path / "b"), algo="recurrent-ppo", frame_stack=1))
        check_args(Args(out=str(tmp_path / "c"), algo="ppo", frame_stack=4))
    assert not caplog.records


def test_policy_config_accepts_recurrent_ppo(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"algo": "recurrent-ppo", "frame_stack": 1}))
    assert PolicyConfig.load(path).algo == "recurrent-ppo"
    path.write_text(json.dumps({"algo": "recurrent-sac"}))
    with pytest.raises(Exception, match="recurrent-sac"):
        PolicyConfig.load(path)
