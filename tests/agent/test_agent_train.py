"""A tiny end-to-end training run: PPO learns, saves a model the policy tuner can run."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from agent_fixtures import AnalyticObjective, analytic_sampler

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.evaluation.runner import run_experiment
from agent.objectives.sim import (
    GENERATED_TRAIN_SEEDS,
    GeneratedObjective,
    MixedSampler,
    split_names,
    split_sampler,
)
from agent.rl.artefacts import export_policy, run_checkpoints
from agent.rl.train import Args, learning_rate, train
from agent.tuners.policy import PolicyTuner


def test_tiny_ppo_run_saves_a_usable_policy(tmp_path):
    args = Args(out=str(tmp_path / "run"), total_timesteps=240, num_envs=2, vec="dummy", steps=5, frame_stack=2,
                n_steps=20, batch_size=20, n_epochs=2, checkpoint_freq=120, progress_bar=False)
    model_path = train(args, sampler=analytic_sampler)
    assert model_path.exists()
    config = json.loads(model_path.with_suffix(".json").read_text())
    assert config["frame_stack"] == 2 and config["steps"] == 5 and config["reward"] == "best"
    assert config["train_args"]["total_timesteps"] == 240
    checkpoints = sorted((tmp_path / "run" / "checkpoints").glob("model_*_steps.zip"))
    assert checkpoints
    # a checkpoint loads with the run's config (no JSON beside it) and acts like any policy
    assert not checkpoints[0].with_suffix(".json").exists()
    from_checkpoint = run_experiment(PolicyTuner.from_file(checkpoints[0]), AnalyticObjective(seed=1), 5, ActionCodec())[1]
    assert len(from_checkpoint) == 6 and all(np.isfinite(from_checkpoint))
    assert (tmp_path / "run" / "logs" / "progress.csv").exists()
    # `scoretune evaluate --checkpoints RUN` finds them all, labelled and in step order
    assert run_checkpoints(tmp_path / "run") == {f"{p.stem.split('_')[1]}steps": p for p in
                                                 sorted(checkpoints, key=lambda p: int(p.stem.split("_")[1]))}
    # `--checkpoints NAME=RUN` (repeatable) prefixes the methods, so two runs evaluate together
    from agent.cli.evaluate import checkpoint_policies

    run = str(tmp_path / "run")
    named = checkpoint_policies([run, f"b={run}"])
    first = next(iter(run_checkpoints(tmp_path / "run")))
    assert named[first] == named[f"b/{first}:sample"] == str(run_checkpoints(tmp_path / "run")[first])
    assert len(named) == 4 * len(checkpoints)
    with pytest.raises(AgentError, match="two runs give method"):
        checkpoint_policies([run, run])
    with pytest.raises(AgentError, match="NAME=RUN"):
        checkpoint_policies([f"={run}"])
    tuner = PolicyTuner.from_file(model_path)
    metrics = run_experiment(tuner, AnalyticObjective(seed=1), 5, ActionCodec())[1]
    assert len(metrics) == 6 and all(np.isfinite(metrics))
    # deterministic: the same experiment twice gives the same runs
    again = run_experiment(PolicyTuner.from_file(model_path), AnalyticObjective(seed=1), 5, ActionCodec())[1]
    assert again == metrics
    # the shipped form (policy network only) acts exactly like the whole model, and is smaller
    shipped = export_policy(model_path, config, tmp_path / "ship" / "p.zip")
    assert json.loads(shipped.with_suffix(".json").read_text())["format"] == "policy"
    assert shipped.stat().st_size < model_path.stat().st_size
    assert run_experiment(PolicyTuner.from_file(shipped), AnalyticObjective(seed=1), 5, ActionCodec())[1] == metrics


def test_tiny_lattice_run_acts_on_lattice_points(tmp_path):
    """A categorical (lattice) policy trains, ships, and acts only on lattice points, both ways."""
    args = Args(out=str(tmp_path / "run"), total_timesteps=120, num_envs=2, vec="dummy", steps=5, frame_stack=2,
                n_steps=20, batch_size=20, n_epochs=2, checkpoint_freq=0, progress_bar=False, action="lattice")
    model_path = train(args, sampler=analytic_sampler)
    config = json.loads(model_path.with_suffix(".json").read_text())
    assert config["action"] == "lattice"
    shipped = export_policy(model_path, config, tmp_path / "ship" / "p.zip")
    codec = ActionCodec()
    centres = {round(float(codec.lattice_action(np.array([i] * 8))[0]), 6) for i in range(11)}
    for deterministic in (True, False):
        tuner = PolicyTuner.from_file(shipped, deterministic=deterministic, seed=3)
        metrics = run_experiment(tuner, AnalyticObjective(seed=1), 5, codec)[1]
        assert len(metrics) == 6 and all(np.isfinite(metrics))
        tuner = PolicyTuner.from_file(shipped, deterministic=deterministic, seed=3)
        tuner.tell(codec.reference_action(), 1.0)
        suggestion = tuner.suggest()
        assert {round(float(a), 6) for a in suggestion[:7]} <= centres
        # seeded: the same draw again
        again = PolicyTuner.from_file(shipped, deterministic=deterministic, seed=3)
        again.tell(codec.reference_action(), 1.0)
        assert np.array_equal(again.suggest(), suggestion)


def test_lattice_needs_ppo(tmp_path):
    with pytest.raises(AgentError, match="categorical"):
        train(Args(out=str(tmp_path / "r"), algo="sac", action="lattice", vec="dummy"), sampler=analytic_sampler)
    with pytest.raises(AgentError, match="--action"):
        train(Args(out=str(tmp_path / "r"), action="grid", vec="dummy"), sampler=analytic_sampler)


def test_tiny_ppo_run_on_the_simulator(tmp_path):
    """A few hundred PPO steps on the real simulator (the lab cluster, a 20-second workload)."""
    from agent.objectives.sim import SimObjective
    from loadgen.synth import poisson
    from testbed.cluster import load_cluster

    cluster = load_cluster("lab-small")
    workload = poisson(3.0, 20.0, ["float-ops", "aes"], seed=0)

    def sampler(rng):
        return SimObjective(cluster, workload, seed=int(rng.integers(3)))

    args = Args(out=str(tmp_path / "sim"), total_timesteps=200, num_envs=2, vec="dummy", steps=4, frame_stack=2,
                n_steps=20, batch_size=20, n_epochs=2, checkpoint_freq=0, progress_bar=False, incumbent=True)
    model_path = train(args, sampler=sampler)
    assert json.loads(model_path.with_suffix(".json").read_text())["incumbent"] is True
    obj = SimObjective(cluster, workload, seed=0)
    metrics = run_experiment(PolicyTuner.from_file(model_path), obj, 4, ActionCodec())[1]
    assert len(metrics) == 5 and all(m > 0 for m in metrics)
    assert metrics[0] == obj(ActionCodec().reference())


def test_mixed_sampler_draws_generated_and_split_scenarios_in_proportion(use_fixture_traces):
    sampler = split_sampler("train", generated=0.75)
    assert isinstance(sampler, MixedSampler)
    sampler = pickle.loads(pickle.dumps(sampler))  # SubprocVecEnv workers rebuild it
    rng = np.random.default_rng(0)
    draws = [sampler(rng) for _ in range(40)]
    generated = [d for d in draws if isinstance(d, GeneratedObjective)]
    assert 20 <= len(generated) <= 38  # 30 expected
    assert all(int(d.scenario_name.split("-")[1]) < GENERATED_TRAIN_SEEDS for d in generated)
    assert {d.scenario_name for d in draws if d not in generated} <= set(split_names("train"))
    # the same generator state draws the same objectives (episodes are reproducible)
    again = [sampler(np.random.default_rng(0)).name for _ in range(1)]
    assert again == [draws[0].name]
    only = split_sampler("train", generated=1.0)
    assert all(isinstance(only(rng), GeneratedObjective) for _ in range(3))
    for bad in (1.5, -0.25):
        with pytest.raises(AgentError, match="generated share"):
            split_sampler("train", generated=bad)


def test_generated_scenarios_are_addressable_by_name():
    from agent.objectives.sim import scenario_objective

    obj = scenario_objective(f"gen-{GENERATED_TRAIN_SEEDS + 3}", 0)
    assert isinstance(obj, GeneratedObjective) and obj.name == f"gen-{GENERATED_TRAIN_SEEDS + 3}@0"
    for bad in ("gen-x", "gen--2"):
        with pytest.raises(AgentError, match="gen-N"):
            scenario_objective(bad, 0)


def test_generated_traces_share_picks_the_trace_window_family(use_fixture_traces):
    rng = np.random.default_rng(0)
    sampler = pickle.loads(pickle.dumps(split_sampler("train", generated=1.0, traces=0.5)))
    names = [sampler(rng).scenario_name for _ in range(30)]
    traced = [n for n in names if n.startswith("gentrace-")]
    assert 6 <= len(traced) <= 24 and len(traced) + sum(n.startswith("gen-") for n in names) == 30
    # without a traces share the sampler draws exactly what it drew before the trace family existed
    old, new = MixedSampler("train", 0.75), MixedSampler("train", 0.75, traces=0.0)
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert [old(a).name for _ in range(8)] == [new(b).name for _ in range(8)]


def test_generated_small_share_picks_the_small_family_and_keeps_older_draws(use_fixture_traces):
    rng = np.random.default_rng(1)
    sampler = pickle.loads(pickle.dumps(split_sampler("train", generated=1.0, traces=0.5, small=0.4)))
    names = [sampler(rng).scenario_name for _ in range(40)]
    small = [n for n in names if n.startswith("gensmall-")]
    assert 8 <= len(small) <= 26  # 16 expected
    assert all(int(n.split("-")[1]) < GENERATED_TRAIN_SEEDS for n in small)  # never a held-out member
    assert any(n.startswith("gentrace-") for n in names) and any(n.startswith("gen-") for n in names)
    # without a small share the sampler draws exactly what it drew before the small family existed
    old, new = MixedSampler("train", 0.75, traces=0.5), MixedSampler("train", 0.75, traces=0.5, small=0.0)
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    assert [old(a).name for _ in range(8)] == [new(b).name for _ in range(8)]
    with pytest.raises(AgentError, match="generated-small share must be in"):
        split_sampler("train", generated=0.5, small=2.0)
    with pytest.raises(AgentError, match="needs a generated share"):
        split_sampler("train", small=0.5)


def test_generated_traces_share_is_checked():
    with pytest.raises(AgentError, match="generated-traces share must be in"):
        split_sampler("train", generated=0.5, traces=1.5)
    with pytest.raises(AgentError, match="needs a generated share"):
        split_sampler("train", traces=0.5)


def test_trace_window_scenarios_are_addressable_by_name(use_fixture_traces):
    from agent.objectives.sim import scenario_objective

    obj = scenario_objective(f"gentrace-{GENERATED_TRAIN_SEEDS}", 0)
    assert isinstance(obj, GeneratedObjective) and obj.scenario_name == f"gentrace-{GENERATED_TRAIN_SEEDS}"
    with pytest.raises(AgentError, match="gentrace-N"):
        scenario_objective("gentrace-x", 0)


def test_linear_learning_rate_decays_to_a_tenth():
    schedule = learning_rate(Args(learning_rate=3e-4, lr_schedule="linear"))
    assert schedule(1.0) == pytest.approx(3e-4) and schedule(0.0) == pytest.approx(3e-5)
    assert schedule(0.5) == pytest.approx(1.65e-4)
    assert learning_rate(Args(learning_rate=1e-3)) == 1e-3
    with pytest.raises(AgentError, match="--lr-schedule must be constant or linear"):
        learning_rate(Args(lr_schedule="cosine"))


def test_a_run_without_checkpoints_or_config_is_a_clear_error(tmp_path):
    with pytest.raises(AgentError, match="no checkpoints"):
        run_checkpoints(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "model_40000_steps.zip").write_bytes(b"")
    with pytest.raises(AgentError, match="model.json: missing"):
        run_checkpoints(tmp_path)
    (tmp_path / "model.json").write_text("{}")
    assert list(run_checkpoints(tmp_path)) == ["40k"]


def test_ship_writes_beside_the_shipped_policy():
    import agent.rl.train
    from agent.rl.artefacts import SHIPPED_POLICY

    assert agent.rl.train.POLICIES_DIR == SHIPPED_POLICY.parent and SHIPPED_POLICY.is_file()


def test_a_bad_share_fails_before_the_run_directory_is_made(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(AgentError, match="needs a generated share"):
        train(Args(out=str(out), generated_small=0.5, vec="dummy", progress_bar=False))
    assert not out.exists()
