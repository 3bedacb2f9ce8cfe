"""The evaluation's figures (by hand) and one small end-to-end comparison on the analytic fixture."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from agent_fixtures import AnalyticObjective

from agent.errors import AgentError
from agent.evaluation.scoring import budget_table, score, summary_table
from agent.evaluation.study import Protocol, combine, evaluate
from agent.evaluation.tables import budget_markdown


def _row(scenario, seed, method, metrics, oracle):
    return {"scenario": scenario, "seed": seed, "method": method, "metrics": metrics, "oracle": oracle,
            "oracle_search": oracle}


def test_scores_by_hand():
    rows = [
        _row("s", 0, "default", [10.0, 10.0, 10.0], 5.0),
        _row("s", 0, "tpe", [10.0, 8.0, 9.0], 5.0),
        _row("s", 0, "policy", [10.0, 7.0, 5.5], 5.0),
    ]
    frame = score(rows, baselines=("default", "tpe")).set_index("method")
    assert frame.attrs["best_baseline"] == "tpe"
    assert frame.loc["tpe", "improvement_pct"] == pytest.approx(20.0)
    assert frame.loc["policy", "improvement_pct"] == pytest.approx(45.0)
    assert frame.loc["policy", "gap_closed"] == pytest.approx(4.5 / 5.0)
    assert frame.loc["policy", "over_best_baseline_pct"] == pytest.approx(100 * (8.0 - 5.5) / 8.0)
    assert frame.loc["tpe", "over_best_baseline_pct"] == 0.0
    assert frame.loc["policy", "steps_to_90"] == 2  # gain 4.5: 90 % = 4.05 > 3 (step 1)
    assert frame.loc["default", "gap_closed"] == 0.0


def test_gap_closed_by_budget_by_hand():
    rows = [
        _row("s", 0, "tpe", [10.0, 8.0, 9.0, 6.0], 5.0),
        _row("s", 1, "tpe", [10.0, 10.0, 7.0, 7.0], 5.0),
        _row("t", 0, "flat", [4.0, 4.0, 4.0, 4.0], 4.0),  # no gap to close: counted as closed
        _row("t", 1, "flat", [4.0, 4.0, 4.0, 4.0], 4.0),
    ]
    frame = score(rows, baselines=("tpe",))
    budget = budget_table(frame, budgets=(1, 2, 5)).set_index(["method", "steps"])
    assert sorted(budget.index.get_level_values("steps").unique()) == [1, 2, 3]  # 5 not reached; T added
    assert budget.loc[("tpe", 1), "gap_closed"] == pytest.approx((2 / 5 + 0 / 5) / 2)
    assert budget.loc[("tpe", 2), "gap_closed"] == pytest.approx((2 / 5 + 3 / 5) / 2)
    assert budget.loc[("tpe", 3), "gap_closed"] == pytest.approx((4 / 5 + 3 / 5) / 2)
    assert budget.loc[("flat", 2), "gap_closed"] == 1.0
    # the last budget is the experiment's T: the summary table's figure
    summary = summary_table(frame).set_index("method")
    assert budget.loc[("tpe", 3), "gap_closed"] == pytest.approx(summary.loc["tpe", "gap_closed"])
    assert budget.loc[("tpe", 3), "gap_closed_low"] == pytest.approx(summary.loc["tpe", "gap_closed_low"])
    text = budget_markdown(budget.reset_index())
    assert text.splitlines()[0] == "| method | T = 1 | T = 2 | T = 3 |"
    assert text.splitlines()[2].startswith("| tpe | 20 [")
    assert text.splitlines()[3] == "| flat | " + " | ".join(["100 [100, 100]"] * 3) + " |"


def test_intervals_are_over_seeds():
    rows = []
    for seed, best in enumerate([8.0, 6.0, 7.0]):
        rows.append(_row("a", seed, "tpe", [10.0, best], 5.0))
        rows.append(_row("b", seed, "tpe", [10.0, best], 5.0))
    table = summary_table(score(rows, baselines=("tpe",))).set_index("method")
    assert table.loc["tpe", "seeds"] == 3 and table.loc["tpe", "scenarios"] == 2
    assert table.loc["tpe", "improvement_pct"] == pytest.approx(30.0)
    assert table.loc["tpe", "improvement_pct_low"] < 30.0 < table.loc["tpe", "improvement_pct_high"]


def test_small_evaluation_writes_table_and_plots(tmp_path):
    def factory(name, seed, metric):
        return AnalyticObjective(seed=hash((name, seed)) % 1000)

    table = evaluate(["x", "y"], seeds=2, out_dir=tmp_path, methods=["default", "random", "hill"],
                     protocol=Protocol(steps=4, oracle_runs=30), objective_factory=factory)
    assert set(table["method"]) == {"default", "random", "hill"}
    for name in ("table.md", "table.csv", "budget.md", "budget.csv", "results.csv", "tuning-curves.png", "final-improvement.png", "evaluation.json"):
        assert (tmp_path / name).stat().st_size > 0
    results = pd.read_csv(tmp_path / "results.csv")
    assert len(results) == 2 * 2 * 3
    assert (results["true_applied"] >= results["oracle"] - 1e-12).all()  # the oracle bounds every method
    assert (results.loc[results["method"] == "default", "improvement_pct"] == 0).all()
    assert (results["platform"] == "knative").all()  # every row says what served the functions


def test_fixed_simulator_seed_searches_one_oracle_per_scenario(tmp_path):
    made = []

    def factory(name, seed, metric):
        made.append((name, seed))
        return AnalyticObjective(seed=hash(name) % 1000)

    evaluate(["x", "y"], seeds=3, out_dir=tmp_path, methods=["random"], protocol=Protocol(steps=3, oracle_runs=12, sim_seed=7),
             objective_factory=factory)
    assert {s for _, s in made} == {7}  # every objective is the scenario at the fixed seed
    cache = json.loads((tmp_path / "oracle.json").read_text())
    assert sorted(cache) == ["x@7:12:mean", "y@7:12:mean"]
    results = pd.read_csv(tmp_path / "results.csv")
    assert sorted(results["seed"].unique()) == [0, 1, 2]  # the tuners' seeds
    assert results.groupby("scenario")["oracle_search"].nunique().eq(1).all()


def _factory(name, seed, metric):
    return AnalyticObjective(seed={"x": 11, "y": 22}[name] + seed)


def test_combining_disjoint_evaluations_equals_evaluating_them_together(tmp_path):
    kw = dict(seeds=2, methods=["default", "random", "hill"], protocol=Protocol(steps=4, oracle_runs=30),
              objective_factory=_factory)
    evaluate(["x"], out_dir=tmp_path / "a", **kw)
    evaluate(["y"], out_dir=tmp_path / "b", **kw)
    together = evaluate(["x", "y"], out_dir=tmp_path / "ab", **kw).set_index("method")
    combined = combine([tmp_path / "a", tmp_path / "b"], tmp_path / "c").set_index("method")
    cols = ["improvement_pct", "gap_closed", "over_best_baseline_pct", "steps_to_90", "scenarios", "seeds"]
    pd.testing.assert_frame_equal(combined.loc[together.index, cols], together[cols], check_dtype=False)
    assert (tmp_path / "c" / "table.md").read_text() == (tmp_path / "ab" / "table.md").read_text()
    # a subset of methods: the same figures for those kept
    some = combine([tmp_path / "a", tmp_path / "b"], tmp_path / "d", methods=["default", "random"]).set_index("method")
    assert list(some.index) == ["default", "random"]
    assert some.loc["random", "improvement_pct"] == pytest.approx(together.loc["random", "improvement_pct"])
    # a subset of scenarios by pattern: the same figures as evaluating that scenario alone
    only_y = combine([tmp_path / "ab"], tmp_path / "e", scenarios=["y*"]).set_index("method")
    alone = combine([tmp_path / "b"], tmp_path / "f").set_index("method")
    pd.testing.assert_frame_equal(only_y[cols], alone.loc[only_y.index, cols], check_dtype=False)
    assert json.loads((tmp_path / "e" / "evaluation.json").read_text())["scenario_patterns"] == ["y*"]
    with pytest.raises(AgentError, match="no scenario .* matches --scenarios z"):
        combine([tmp_path / "ab"], tmp_path / "g", scenarios=["z"])
    # rows written before they named their platform get their evaluation.json's
    old = pd.read_csv(tmp_path / "b" / "results.csv").drop(columns=["platform"])
    old.to_csv(tmp_path / "b" / "results.csv", index=False)
    combine([tmp_path / "a", tmp_path / "b"], tmp_path / "h")
    assert set(pd.read_csv(tmp_path / "h" / "results.csv")["platform"]) == {"knative"}


def test_combine_refuses_overlaps_gaps_and_strangers(tmp_path):
    two = Protocol(steps=2, oracle_runs=10)
    evaluate(["x"], seeds=1, out_dir=tmp_path / "a", methods=["default", "random"], protocol=two, objective_factory=_factory)
    evaluate(["y"], seeds=1, out_dir=tmp_path / "b", methods=["default"], protocol=two, objective_factory=_factory)
    with pytest.raises(AgentError, match="ran twice"):
        combine([tmp_path / "a", tmp_path / "a"], tmp_path / "out")
    with pytest.raises(AgentError, match="'random' lacks 1 of the 2"):
        combine([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    assert len(combine([tmp_path / "a", tmp_path / "b"], tmp_path / "out", methods=["default"])) == 1
    with pytest.raises(AgentError, match="'tpe' is in none"):
        combine([tmp_path / "a"], tmp_path / "out", methods=["tpe"])
    with pytest.raises(AgentError, match="results.csv: missing"):
        combine([tmp_path / "nowhere"], tmp_path / "out")


def test_an_openwhisk_evaluation_runs_openwhisk_caches_its_own_oracle_and_tells_the_tuners():
    """The platform is a known fact of the deployment (SimConfig), apart from the mismatch truth:
    with no mismatch there is no truth, and every run is still OpenWhisk's."""
    from agent.evaluation.study import Protocol, _oracle_key
    from agent.evaluation.worlds import deployment
    from agent.objectives.sim import mismatch_truth, scenario_objective, sim_summary
    from agent.objectives.view import objective_view

    objective = scenario_objective("speed-cpu", 0, "mean")
    q = Protocol(platform="openwhisk")
    q.check()
    config = deployment(q)
    assert config.platform == "openwhisk" and deployment(Protocol()).platform == "knative"
    assert mismatch_truth("none", "speed-cpu", objective.cluster, 0, config=config) is None
    severe = mismatch_truth("severe", "speed-cpu", objective.cluster, 0, config=config)
    assert severe.config.platform == "openwhisk" and severe.config.interference > 0
    assert objective_view(objective, platform=q.platform).platform == "openwhisk"
    assert _oracle_key(Protocol(), "speed-cpu", 0) != _oracle_key(q, "speed-cpu", 0)
    from agent.actions import ActionCodec

    s = sim_summary(objective.cluster, objective.workload, ActionCodec().reference(), 0, config=config)
    assert s["platform"] == "openwhisk"
    assert sim_summary(objective.cluster, objective.workload, ActionCodec().reference(), 0,
                       truth=severe)["platform"] == "openwhisk"


def test_an_unknown_platform_is_refused_by_the_protocol():
    from agent.evaluation.study import Protocol

    with pytest.raises(AgentError, match="unknown platform 'lambda'"):
        Protocol(platform="lambda").check()


def test_combine_refuses_evaluations_of_different_platforms(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, platform in ((a, "knative"), (b, "openwhisk")):
        d.mkdir()
        (d / "evaluation.json").write_text(json.dumps({"platform": platform}))
    with pytest.raises(AgentError, match="different platforms .*a: knative, .*b: openwhisk"):
        combine([a, b], tmp_path / "out")
    assert not (tmp_path / "out").exists()


_BUILT: list[str] = []
_FAIL_ON: set[str] = set()


def _counted(name, seed, metric):
    """``_factory``, recording which scenarios it built, and failing (a killed job) on ``_FAIL_ON``."""
    if name in _FAIL_ON:
        raise RuntimeError(f"killed while evaluating {name}")
    _BUILT.append(name)
    return _factory(name, seed, metric)


def test_a_stopped_evaluation_resumes_from_the_tasks_it_finished(tmp_path, monkeypatch):
    """An evaluation keeps nothing until its end was the rule: 40 tasks x 5 seeds (hours) killed at
    task 11 lost all eleven. Each finished task is now kept in DIR/tasks/; run again with the same
    options, the evaluation reuses those (their objectives are never built) and writes the tables a
    full run writes; a change of the options or of the code's revision runs them again."""
    from agent.evaluation import checkpoints

    kw = dict(seeds=2, methods=["default", "random", "hill"], protocol=Protocol(steps=3, oracle_runs=20),
              objective_factory=_counted)
    evaluate(["x", "y"], out_dir=tmp_path / "full", **kw)
    monkeypatch.setattr(f"{__name__}._FAIL_ON", {"y"})
    with pytest.raises(RuntimeError, match="killed while evaluating y"):
        evaluate(["x", "y"], out_dir=tmp_path / "run", **kw)
    assert len(list((tmp_path / "run" / "tasks").glob("x-*.json"))) == 2 and not (tmp_path / "run" / "table.md").exists()
    monkeypatch.setattr(f"{__name__}._FAIL_ON", set())
    _BUILT.clear()
    evaluate(["x", "y"], out_dir=tmp_path / "run", **kw)
    assert set(_BUILT) == {"y"}, "the finished tasks are reused, not run again"
    for name in ("table.md", "budget.md", "results.csv"):
        assert (tmp_path / "run" / name).read_text() == (tmp_path / "full" / name).read_text(), name
    _BUILT.clear()
    evaluate(["x", "y"], out_dir=tmp_path / "run", **{**kw, "protocol": Protocol(steps=4, oracle_runs=20)})
    assert set(_BUILT) == {"x", "y"}, "other options: nothing is reused"
    _BUILT.clear()
    monkeypatch.setattr(checkpoints, "code_revision", lambda: "another-commit")
    evaluate(["x", "y"], out_dir=tmp_path / "run", **kw)
    assert set(_BUILT) == {"x", "y"}, "other code: nothing is reused"
