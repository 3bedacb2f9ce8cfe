"""The noisy protocol: the noise arithmetic, the tuners' noise handling, and that no tuner ever
sees a true value."""

from __future__ import annotations

import math

import numpy as np
import pytest

import agent.objectives.noisy as noisy
import agent.objectives.sim as so
from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.evaluation.runner import run_experiment
from agent.evaluation.scoring import score
from agent.evaluation.study import Protocol, combine, evaluate
from agent.objectives.noisy import TRUTH_SEED_BASE, NoisyObjective, Truth, extra_cv, lognormal_sigma
from agent.tuners.applied import applied_setting, best_mean
from agent.tuners.noise_aware import NoiseRule, Reeval, gp_posterior_best, split_rule
from testbed.noise_model import NoiseModel


@pytest.fixture(scope="module")
def lab():
    """The lab-small cluster under a short lab workload on the simulator (runs in milliseconds)."""
    from testbed.cluster import load_cluster
    from testbed.scenarios import lab_workload

    return load_cluster("lab-small"), lab_workload(0, duration_s=8.0)


def test_extra_cv_tops_the_seed_spread_up_to_the_lab():
    assert extra_cv(0.10, 0.06) == pytest.approx(0.08)  # variances add: 0.06^2 + 0.08^2 = 0.10^2
    assert extra_cv(0.05, 0.07) == 0.0  # the simulator is already noisier than the lab
    with pytest.raises(AgentError):
        extra_cv(float("nan"), 0.0)


def test_lognormal_error_has_mean_one_and_the_asked_cv():
    sigma = lognormal_sigma(0.2)
    z = np.random.default_rng(0).standard_normal(400_000)
    e = np.exp(sigma * z - 0.5 * sigma**2)
    assert e.mean() == pytest.approx(1.0, abs=2e-3)
    assert e.std() / e.mean() == pytest.approx(0.2, rel=1e-2)


def test_noisy_objective_draws_a_fresh_run_every_time(lab):
    cluster, workload = lab
    codec = ActionCodec()
    obj = NoisyObjective(cluster, workload, noise_cv=0.1, rng_seed=7)
    a, b = obj(codec.reference()), obj(codec.reference())
    assert a != b  # nothing memoised
    again = NoisyObjective(cluster, workload, noise_cv=0.1, rng_seed=7)
    assert [again(codec.reference()), again(codec.reference())] == [a, b]  # seeded: repeatable
    assert all(s < TRUTH_SEED_BASE for s in obj.seeds)


def test_truth_is_the_mean_over_its_own_seeds(lab):
    from testbed.sim import evaluate

    cluster, workload = lab
    codec = ActionCodec()
    truth = Truth(cluster, workload, seeds=3)
    means = [evaluate(cluster, workload, codec.reference().to_profile(), seed=TRUTH_SEED_BASE + k)["latency_mean_s"]
             for k in range(3)]
    assert truth(codec.reference()) == pytest.approx(np.mean(means))
    assert truth.seed_cv(codec.reference()) == pytest.approx(np.std(means, ddof=1) / np.mean(means))


class Spy:
    """A random-search tuner that records everything it is told."""

    name = "spy"

    def __init__(self, codec):
        self.codec = codec
        self.rng = np.random.default_rng(0)
        self.told: list[float] = []

    def suggest(self):
        return self.rng.uniform(-1, 1, self.codec.dim).astype(np.float32)

    def tell(self, action, metric):
        self.told.append(float(metric))


def test_a_tuner_never_sees_a_true_value(lab, monkeypatch):
    """Every value a tuner is told comes from a measurement seed (never a truth seed) with the
    measurement error on it; the truth's runs happen only outside the tuning loop."""
    cluster, workload = lab
    codec = ActionCodec()
    calls: list[tuple[int, bool]] = []
    inside = {"loop": False}
    real_metric, real_run = noisy.sim_metric, noisy.sim_run

    def recording(cluster_, workload_, setting, seed, metric, **kw):
        calls.append((seed, inside["loop"]))
        return real_metric(cluster_, workload_, setting, seed, metric, **kw)

    def recording_run(cluster_, workload_, setting, seed, metric, **kw):
        calls.append((seed, inside["loop"]))
        return real_run(cluster_, workload_, setting, seed, metric, **kw)

    monkeypatch.setattr(noisy, "sim_metric", recording)
    monkeypatch.setattr(noisy, "sim_run", recording_run)
    truth = Truth(cluster, workload, seeds=3)
    t_ref = truth(codec.reference())
    spy = Spy(codec)
    obj = NoisyObjective(cluster, workload, noise_cv=0.05, rng_seed=1)
    inside["loop"] = True
    settings, values = run_experiment(spy, obj, 4, codec)
    inside["loop"] = False
    assert spy.told == values and len(values) == 5
    in_loop = [s for s, flag in calls if flag]
    assert len(in_loop) == 5 and all(s < TRUTH_SEED_BASE for s in in_loop)
    assert all(s >= TRUTH_SEED_BASE for s, flag in calls if not flag)
    assert t_ref not in spy.told and truth(settings[1]) not in spy.told


def test_split_rule_grammar():
    assert split_rule("gp") == ("gp", None)
    assert split_rule("policy:sample+reeval") == ("policy:sample", NoiseRule(None))
    assert split_rule("gp+reeval2") == ("gp", NoiseRule(2))
    with pytest.raises(AgentError, match="reeval"):
        split_rule("gp+twice")
    assert NoiseRule(None).remeasures(10) == 3 and NoiseRule(None).remeasures(1) == 0
    assert NoiseRule(9).remeasures(5) == 4  # never the whole budget


def test_reeval_remeasures_the_incumbent_and_applies_a_replicated_profile():
    codec = ActionCodec()
    spy = Spy(codec)
    tuner = Reeval(spy, codec, steps=5, rule=NoiseRule(2))
    # a lucky 1.0 at step 2 is re-measured (9.0) and loses to step 1's profile, re-measured at 4.0
    values = iter([10.0, 5.0, 1.0, 6.0, 9.0, 4.0])
    measured_settings, measured_values = [], []
    ref = codec.reference_action()
    tuner.tell(ref, next(values))
    measured_settings.append(codec.decode(ref))
    measured_values.append(10.0)
    actions = []
    for _ in range(5):
        a = tuner.suggest()
        actions.append(a)
        v = next(values)
        tuner.tell(a, v)
        measured_settings.append(codec.decode(a))
        measured_values.append(v)
    assert len(spy.told) == 4  # the reference and the 3 exploration runs; re-measures stay out
    assert np.array_equal(actions[3], actions[1])  # step 4 re-measures step 2 (mean 1.0)
    assert np.array_equal(actions[4], actions[0])  # step 2 now 5.0, tied with step 1: the first measured
    applied = applied_setting(tuner, measured_settings, measured_values)
    assert applied == measured_settings[1]  # step 1: mean 4.5 over two runs, step 2: 5.0
    # without re-measures a plain tuner applies the lucky single run of step 2
    assert best_mean(measured_settings[:4], measured_values[:4]) == measured_settings[2]


def test_gp_posterior_picks_the_minimum_of_a_smooth_noise_free_function():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (12, 2))
    y = 1.0 + ((x - 0.3) ** 2).sum(axis=1)
    assert gp_posterior_best(list(x), list(y)) == int(np.argmin(y))


def test_scores_by_hand():
    def row(method, seed, applied):
        return {"scenario": "s", "seed": seed, "budget": 10, "method": method, "metrics": [1.0],
                "true_reference": 10.0, "true_applied": applied, "claimed_pct": 0.0, "oracle_search": 6.0,
                "truth_seeds": 10}

    frame = score([row("gp", 0, 8.0), row("random", 0, 9.0), row("policy", 0, 7.0)], 10).set_index("method")
    assert frame.attrs["best_baseline"] == "gp"
    assert frame.loc["policy", "improvement_pct"] == pytest.approx(30.0)
    assert frame.loc["policy", "gap_closed"] == pytest.approx(3.0 / 4.0)
    assert frame.loc["policy", "over_best_baseline_pct"] == pytest.approx(100 * (8.0 - 7.0) / 8.0)
    # an applied profile better than the oracle's search becomes the oracle
    frame = score([row("gp", 0, 5.0), row("policy", 0, 7.0)], 10).set_index("method")
    assert frame.loc["gp", "gap_closed"] == pytest.approx(1.0)


def test_evaluate_noisy_end_to_end(lab, tmp_path, monkeypatch):
    cluster, workload = lab
    monkeypatch.setattr(so, "scenario_objective",
                        lambda name, seed, metric="mean": so.SimObjective(cluster, workload, seed, metric, name=name))
    table = evaluate(["tiny"], seeds=2, out_dir=tmp_path, methods=["default", "random", "random+reeval", "gp-noisy"],
                     protocol=Protocol(steps=3, noise=NoiseModel(0.05, 0.3).to_dict(), budgets=(1,), truth_seeds=2,
                                       oracle_runs=12))
    import pandas as pd

    results = pd.read_csv(tmp_path / "results.csv")
    assert set(results["budget"]) == {1, 3}
    assert (results["metrics"].map(lambda m: len(eval(m))) == results["budget"] + 1).all()  # the budget counts every run
    default = results[results["method"] == "default"]
    assert (default["true_applied"] == default["true_reference"]).all() and (default["improvement_pct"] == 0).all()
    assert set(table["method"]) == {"default", "random", "random+reeval", "gp-noisy"}
    assert (tmp_path / "budget.md").read_text().count("|") > 10
    assert (tmp_path / "oracle-profiles.json").exists()
    assert math.isfinite(float(results["noise_cv"].iloc[0]))
    with pytest.raises(AgentError, match="not a baseline"):
        evaluate(["tiny"], seeds=1, out_dir=tmp_path, methods=["nope"],
                 protocol=Protocol(noise=NoiseModel(0.05, 0.3).to_dict(), truth_seeds=2))


def test_combine_rescored_over_the_union(lab, tmp_path, monkeypatch):
    cluster, workload = lab
    monkeypatch.setattr(so, "scenario_objective",
                        lambda name, seed, metric="mean": so.SimObjective(cluster, workload, seed, metric, name=name))
    common = dict(seeds=2, protocol=Protocol(steps=2, noise=NoiseModel(0.05, 0.3).to_dict(), truth_seeds=2,
                                             oracle_runs=10))
    evaluate(["tiny"], out_dir=tmp_path / "a", methods=["default", "random"], **common)
    evaluate(["tiny"], out_dir=tmp_path / "b", methods=["tpe"], **common)
    table = combine([tmp_path / "a", tmp_path / "b"], tmp_path / "c", steps=2)
    assert list(table["method"]) == ["default", "random", "tpe"]
    import pandas as pd

    a, c = pd.read_csv(tmp_path / "a" / "results.csv"), pd.read_csv(tmp_path / "c" / "results.csv")
    # the same measurement stream for every method at a seed: random's rows are unchanged by the merge
    assert a[a["method"] == "random"]["metrics"].tolist() == c[c["method"] == "random"]["metrics"].tolist()
    assert (c["oracle"] <= c["true_applied"].min() + 1e-12).all()
    with pytest.raises(AgentError, match="ran twice"):
        combine([tmp_path / "a", tmp_path / "a"], tmp_path / "d", steps=2)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "results.csv").write_text("scenario,seed\ns,0\n")
    from agent.errors import InputError

    with pytest.raises(InputError, match="no column"):
        combine([tmp_path / "e"], tmp_path / "f", steps=2)
