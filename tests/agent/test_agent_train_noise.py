"""``scoretune train --noise FILE``: training episodes measured as the calibrated lab would measure them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.errors import AgentError, InputError
from agent.rl.artefacts import PolicyConfig
from agent.rl.train import Args, train
from testbed.noise_model import NoiseCell, load_noise_model, write_noise


def _tiny(tmp_path, noise, **kw) -> Args:
    return Args(out=str(tmp_path / "run"), total_timesteps=100, num_envs=2, vec="dummy", steps=4, frame_stack=2,
                n_steps=20, batch_size=20, n_epochs=1, checkpoint_freq=0, progress_bar=False, noise=str(noise), **kw)


def _no_episode(rng):
    raise AssertionError("an environment started before the noise file was checked")


@pytest.mark.parametrize("text", ["metrics: [1, 2", "metrics: {p95: {model: {c0: 0.1}}}\n",
                                  "metrics: {mean: {model: {c0: -0.1}}}\n", None])
def test_a_bad_noise_file_fails_before_training(tmp_path, text):
    bad = tmp_path / "noise.yaml"
    if text is not None:  # None: the file is missing
        bad.write_text(text)
    with pytest.raises(InputError) as err:
        train(_tiny(tmp_path, bad), sampler=_no_episode)
    message = str(err.value)
    assert str(bad) in message and "\n" not in message
    assert not (tmp_path / "run").exists()


def test_training_on_noisy_episodes_records_the_calibration(tmp_path, monkeypatch):
    import agent.objectives.noisy
    from agent.objectives.sim import SimObjective
    from loadgen.synth import poisson
    from testbed.cluster import load_cluster

    path = write_noise(tmp_path / "cal" / "noise.yaml", {
        "mean": [NoiseCell(10.0, 3.0, (0.50, 0.56, 0.47)), NoiseCell(40.0, 3.0, (0.51, 0.53, 0.50))],
        "p95": [NoiseCell(10.0, 3.0, (1.0, 1.3, 0.9)), NoiseCell(40.0, 3.0, (1.0, 1.1, 0.95))],
    }, {"cluster": "lab-small", "repeats": 3})
    model = load_noise_model(path, "mean")
    assert model.c0 > 0

    cluster = load_cluster("lab-small")
    workload = poisson(2.0, 10.0, ["float-ops", "aes"], seed=0)
    bases: list[SimObjective] = []
    noisy: list[agent.objectives.noisy.NoisyObjective] = []

    def sampler(rng):
        bases.append(SimObjective(cluster, workload, seed=int(rng.integers(3))))
        return bases[-1]

    real = agent.objectives.noisy.noisy_objective

    def recording(objective, noise_model, **kw):
        assert noise_model == model  # the calibrated model for --metric
        noisy.append(real(objective, noise_model, **kw))
        return noisy[-1]

    monkeypatch.setattr(agent.objectives.noisy, "noisy_objective", recording)
    model_path = train(_tiny(tmp_path, path), sampler=sampler)

    # every episode ran on a noisy objective wrapping the sampler's, and measured with noise
    assert bases and len(noisy) == len(bases)
    assert all(n.noise_cv > 0 for n in noisy)
    assert sum(n.runs for n in noisy) >= 100
    assert all(len(set(n.seeds)) == n.runs for n in noisy)  # a fresh simulator seed every run
    # the config says how it was trained, and still loads as a policy config
    config = json.loads(model_path.with_suffix(".json").read_text())
    assert config["noise"] == str(path)
    assert config["noise_model"] == model.to_dict()
    assert config["train_args"]["noise"] == str(path)
    loaded = PolicyConfig.load(model_path.with_suffix(".json"))
    assert loaded.extra["noise"] == str(path)


def test_without_noise_the_config_says_noise_free(tmp_path):
    from agent.rl.train import policy_config

    config = policy_config(Args(), command="")
    assert config["noise"] is None and "noise_model" not in config


def test_init_starts_from_the_shipped_policys_weights(tmp_path):
    """--init: the new model acts exactly as the policy it starts from, before any update."""
    import numpy as np
    from stable_baselines3 import PPO

    from agent.rl.artefacts import PolicyConfig, load_model
    from agent.rl.env import make_env
    from agent.rl.train import init_weights

    shipped = Path(__file__).resolve().parents[2] / "agent" / "policies" / "scoretune-ppo.zip"
    cfg = PolicyConfig.load(shipped.with_suffix(".json"))
    env = make_env(None, steps=cfg.steps, info=cfg.info, frame_stack=cfg.frame_stack, incumbent=cfg.incumbent)
    model = PPO("MlpPolicy", env, policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64])), device="cpu")
    obs = np.random.default_rng(0).uniform(-1, 1, env.observation_space.shape).astype(np.float32)
    source = load_model(shipped, cfg.algo, cfg.format)
    before = model.predict(obs, deterministic=True)[0]
    init_weights(model, shipped)
    after = model.predict(obs, deterministic=True)[0]
    assert np.allclose(after, source.predict(obs, deterministic=True)[0]) and not np.allclose(before, after)
    small = PPO("MlpPolicy", env, policy_kwargs=dict(net_arch=dict(pi=[8], vf=[8])), device="cpu")
    with pytest.raises(InputError, match="does not fit"):
        init_weights(small, shipped)


def _lab_noise(tmp_path) -> Path:
    return write_noise(tmp_path / "cal" / "noise.yaml", {
        "mean": [NoiseCell(10.0, 3.0, (0.50, 0.56, 0.47)), NoiseCell(40.0, 3.0, (0.51, 0.53, 0.50))],
    }, {"cluster": "lab-small", "repeats": 3})


def test_true_reward_training_gives_each_episode_its_truth_and_records_it(tmp_path, monkeypatch):
    """--reward true --noise: every episode's objective carries a Truth over seeds no measurement
    draws, computed only for incumbents; the policy's config says how it was paid."""
    import agent.objectives.noisy as noise_mod
    from agent.objectives.sim import SimObjective
    from loadgen.synth import poisson
    from testbed.cluster import load_cluster

    cluster, workload = load_cluster("lab-small"), poisson(2.0, 10.0, ["float-ops", "aes"], seed=0)
    made: list[noise_mod.TrainingObjective] = []
    real = noise_mod.TrainingObjective.__init__

    def recording(self, measured, truth):
        real(self, measured, truth)
        made.append(self)

    monkeypatch.setattr(noise_mod.TrainingObjective, "__init__", recording)
    path = _lab_noise(tmp_path)
    model_path = train(_tiny(tmp_path, path, reward="true", truth_seeds=2),
                       sampler=lambda rng: SimObjective(cluster, workload, seed=int(rng.integers(3))))
    assert made and all(len(t.truth.seeds) == 2 for t in made)
    measured = {s for t in made for s in t.measured.seeds}
    assert measured and not measured & {s for t in made for s in t.truth.seeds}
    # a truth is computed for incumbents only: fewer profiles than runs
    assert 0 < sum(len(t.truth._cache) for t in made) < sum(t.runs for t in made)
    config = PolicyConfig.load(model_path.with_suffix(".json"))
    assert config.reward == "true" and json.loads(model_path.with_suffix(".json").read_text())["train_args"][
        "truth_seeds"] == 2


@pytest.mark.parametrize("kw, message", [(dict(reward="truth"), "--reward must be one of"),
                                          (dict(reward="true", truth_seeds=1), "--truth-seeds must be in 2..100")])
def test_bad_reward_options_fail_before_training(tmp_path, kw, message):
    with pytest.raises(AgentError, match=message):
        train(_tiny(tmp_path, _lab_noise(tmp_path), **kw), sampler=_no_episode)
    assert not (tmp_path / "run").exists()


def test_noise_scale_trains_at_a_fraction_of_the_calibrated_spread(tmp_path):
    from agent.rl.train import load_noise

    path = _lab_noise(tmp_path)
    full = load_noise(_tiny(tmp_path, path))
    quarter = load_noise(_tiny(tmp_path, path, noise_scale=0.25))
    assert quarter.c0 == pytest.approx(full.c0 / 4) and quarter.n_exp == full.n_exp
    assert quarter.cv(120, 20) == pytest.approx(full.cv(120, 20) / 4)
    with pytest.raises(AgentError, match="--noise-scale must be a finite number"):
        train(_tiny(tmp_path, path, noise_scale=-1.0), sampler=_no_episode)
    with pytest.raises(InputError, match="noise scale"):
        full.scaled(float("nan"))
