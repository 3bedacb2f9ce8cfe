"""Every tuner answers the same ask-and-tell calls; the policy tuner sees the training observations."""

from __future__ import annotations

import numpy as np
import pytest
from agent_fixtures import AnalyticObjective, analytic_sampler

from agent.actions import ActionCodec
from agent.errors import AgentError, InputError
from agent.evaluation.runner import run_experiment
from agent.evaluation.scoring import steps_to_fraction
from agent.rl.artefacts import PolicyConfig
from agent.rl.env import make_env
from agent.tuners.factory import BASELINES, MethodSpec, make_tuner
from agent.tuners.policy import PolicyTuner
from agent.tuners.search import HillClimber

CODEC = ActionCodec()


class _Recording:
    """A tuner wrapper keeping every raw suggestion: run_experiment clips what it runs, so a tuner
    stepping outside the box would be hidden by the loop; the test reads what the tuner asked for."""

    def __init__(self, tuner):
        self.tuner, self.name, self.suggested = tuner, tuner.name, []

    def suggest(self):
        action = np.asarray(self.tuner.suggest(), dtype=float)
        self.suggested.append(action.copy())
        return action

    def tell(self, action, metric):
        self.tuner.tell(action, metric)


@pytest.mark.parametrize("method", BASELINES)
def test_every_baseline_runs_the_budget_inside_the_box(method):
    obj = AnalyticObjective(seed=3)
    tuner = _Recording(make_tuner(method, CODEC, seed=0))
    metrics = run_experiment(tuner, obj, 6, CODEC)[1]
    assert len(metrics) == 7 and obj.calls == 7
    assert len(tuner.suggested) == 6
    for action in tuner.suggested:
        assert action.shape == (CODEC.dim,)
        assert np.all(np.isfinite(action)) and np.all(action >= -1.0) and np.all(action <= 1.0), (method, action)
    ref = obj(CODEC.reference())
    assert metrics[0] == ref
    if method == "default":
        assert metrics == [ref] * 7
    if method == "equal":
        assert len(set(metrics[1:])) == 1


@pytest.mark.parametrize("method", ["random", "tpe", "gp", "cmaes", "hill"])
def test_seeded_tuners_are_reproducible(method):
    a = run_experiment(make_tuner(method, CODEC, seed=4), AnalyticObjective(seed=2), 5, CODEC)[1]
    b = run_experiment(make_tuner(method, CODEC, seed=4), AnalyticObjective(seed=2), 5, CODEC)[1]
    assert a == b


def test_hill_climber_never_accepts_a_worse_point_and_improves_a_smooth_objective():
    obj = AnalyticObjective(seed=7)
    tuner = HillClimber(CODEC, seed=0)
    metrics = run_experiment(tuner, obj, 30, CODEC)[1]
    assert tuner.best_metric == min(metrics)
    assert min(metrics) < metrics[0]


def test_unknown_method_and_missing_policy():
    with pytest.raises(AgentError, match="unknown method"):
        make_tuner("annealing", CODEC)
    with pytest.raises(AgentError, match="needs a policy file"):
        make_tuner("policy", CODEC)


def test_steps_to_fraction():
    assert steps_to_fraction([10, 9, 5, 5, 4]) == 4  # gain 6: 90 % (5.4) only at the last step
    assert steps_to_fraction([10, 4.5, 4.4, 4]) == 1  # gain 5.5 >= 5.4 at step 1
    assert steps_to_fraction([10, 10, 10]) == 0


class _RecordingModel:
    """Stands in for an SB3 model: records what it was shown, answers a fixed action sequence."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.seen = []

    def predict(self, obs, deterministic=True):
        self.seen.append(np.array(obs))
        return self.actions[len(self.seen) - 1], None


def test_policy_tuner_feeds_the_model_the_training_observations():
    rng = np.random.default_rng(1)
    actions = [rng.uniform(-1, 1, 8).astype(np.float32) for _ in range(5)]
    obj = AnalyticObjective(seed=9)
    config = PolicyConfig(steps=5, reward="best", info="limited", frame_stack=3, codec=CODEC.to_dict())
    model = _RecordingModel(actions)
    metrics = run_experiment(PolicyTuner(model, config), obj, 5, CODEC)[1]

    env = make_env(analytic_sampler, steps=5, frame_stack=3, codec=CODEC)
    obs, _ = env.reset(options={"objective": AnalyticObjective(seed=9)})
    expected = [obs]
    replayed = [env.unwrapped.history[0]]
    for a in actions[:-1]:
        obs, _, _, _, info = env.step(a)
        expected.append(obs)
        replayed.append(info["metric"])
    assert len(model.seen) == 5
    for got, want in zip(model.seen, expected, strict=False):
        np.testing.assert_array_equal(got, want)
    assert metrics[:5] == replayed


def test_policy_tuner_requires_the_reference_first():
    config = PolicyConfig(steps=3, frame_stack=2, codec=CODEC.to_dict())
    tuner = PolicyTuner(_RecordingModel([]), config)
    with pytest.raises(AgentError, match="told the reference"):
        tuner.suggest()
    with pytest.raises(AgentError, match="first run must be the reference"):
        tuner.tell(np.ones(8, np.float32), 1.0)


class _GaussianModel:
    """A fixed-mean Gaussian policy as SB3 exposes it: ``predict`` gives the mean, ``policy.log_std`` the spread."""

    def __init__(self, mean, log_std):
        import torch

        self.mean = np.asarray(mean, dtype=np.float32)
        self.policy = type("Policy", (), {"log_std": torch.tensor(log_std, dtype=torch.float32)})()

    def predict(self, obs, deterministic=True):
        return self.mean, None


def _first_sample(std_scale):
    config = PolicyConfig(steps=3, frame_stack=2, codec=CODEC.to_dict())
    tuner = PolicyTuner(_GaussianModel(np.zeros(8), np.log(np.full(8, 0.1))), config, deterministic=False, seed=4,
                        std_scale=std_scale)
    tuner.tell(CODEC.reference_action(), 1.0)
    return tuner.suggest()


def test_std_scale_multiplies_the_sampling_spread():
    # Same seed, same noise: with the mean at 0 and std 0.1 nothing is clipped, so the draw scales exactly.
    base, wide = _first_sample(None), _first_sample(2.5)
    assert np.abs(base).max() < 0.5
    np.testing.assert_allclose(wide, 2.5 * base, rtol=1e-5)
    with pytest.raises(InputError, match="std_scale must be a positive number"):
        _first_sample(0.0)


def test_policy_method_names_say_how_the_policy_acts():
    from agent.tuners.factory import MethodSpec

    def policy_acting(name):
        spec = MethodSpec.parse(name)
        return spec.kind, spec.std_scale

    assert policy_acting("policy") == ("policy", None)
    assert policy_acting("ppo@40k:sample") == ("policy-sample", None)
    assert policy_acting("ppo:sample-std1.5") == ("policy-sample", 1.5)
    assert policy_acting("fs10/30k") == ("policy", None)
    # A zero scale parses; the policy tuner refuses it (test_std_scale_multiplies_the_sampling_spread).
    assert policy_acting("p:sample-std0") == ("policy-sample", 0.0)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("ppo", MethodSpec("ppo")),
        ("ppo@40k", MethodSpec("ppo@40k")),
        ("run/40k:sample", MethodSpec("run/40k", sample=True)),
        ("ppo:sample-std1.5", MethodSpec("ppo", sample=True, std_scale=1.5)),
        ("a:b:sample", MethodSpec("a:b", sample=True)),
        ("ppo:sampled", MethodSpec("ppo:sampled")),  # not the suffix: part of the name
        ("ppo:sample-stdX", MethodSpec("ppo:sample-stdX")),
    ],
)
def test_method_spec_parses_the_grammar_once_and_prints_it_back(text, spec):
    assert MethodSpec.parse(text) == spec
    assert MethodSpec.parse(str(spec)) == spec
    assert spec.kind == ("policy-sample" if spec.sample else "policy")
