"""The model-based tuner ``twin`` (agent/tuners/twin.py), the user's view it starts from
(agent/objectives/view.py) and the evaluation's mismatch (``evaluate --mismatch``)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agent.actions import ActionCodec
from agent.cli import app
from agent.errors import AgentError
from agent.evaluation.runner import run_experiment
from agent.evaluation.study import Protocol, Task
from agent.evaluation.worlds import _exact_world, _noisy_world
from agent.objectives.sim import SimObjective
from agent.tuners.factory import is_method, make_tuner
from agent.tuners.twin import TwinTuner
from loadgen.workload import write_workload
from testbed.cluster import CLUSTERS_DIR, load_cluster
from testbed.noise_model import NoiseModel
from testbed.scenarios import lab_workload

CODEC = ActionCodec()
runner = CliRunner()


def _hidden_changed(cluster):
    """The same cluster as the API shows it, with every hidden parameter changed."""
    nodes = tuple(dataclasses.replace(n, speed=n.speed * (0.3 + 0.4 * i), image_pull_bytes_per_s=n.image_pull_bytes_per_s / (i + 2))
                  for i, n in enumerate(cluster.nodes))
    return dataclasses.replace(cluster, nodes=nodes)


@pytest.fixture(scope="module")
def lab():
    return load_cluster("lab-small"), lab_workload(3, duration_s=15.0)


@pytest.mark.parametrize("mismatch", ["none", "default"])
def test_hidden_parameters_never_reach_a_tuner(lab, mismatch) -> None:
    """Two scenarios that differ only in what no API shows give every method the same input
    before its first run: the same view (cluster, workload, metric) and the same context."""
    cluster, workload = lab
    other = _hidden_changed(cluster)
    assert other != cluster
    p = Protocol(steps=1, oracle_runs=0, mismatch=mismatch)
    worlds = []
    for c in (cluster, other):
        task = Task("lab", (0,), ("twin",), {}, p)
        worlds.append(_exact_world(task, 0, lambda s, seed, m, c=c: SimObjective(c, workload, seed, m), CODEC))
    a, b = worlds
    assert a.view.fingerprint() == b.view.fingerprint()
    assert dict(a.context) == dict(b.context)
    assert a.truth(CODEC.reference()) != b.truth(CODEC.reference())  # the truths do differ
    noisy = Protocol(steps=1, oracle_runs=0, noise=NoiseModel(0.05, 0.3).to_dict(), truth_seeds=2, mismatch=mismatch)
    views = [_noisy_world(Task("lab", (0,), ("twin",), {}, noisy), lambda s, seed, m, c=c: SimObjective(c, workload, seed, m),
                          CODEC).view.fingerprint() for c in (cluster, other)]
    assert views[0] == views[1] == a.view.fingerprint()


def test_the_twin_tuner_refits_after_every_run_and_never_repeats_a_profile(lab) -> None:
    cluster, workload = lab
    from agent.objectives.view import user_view

    objective = SimObjective(cluster, workload, 0)
    tuner = make_tuner("twin", CODEC, seed=1, view=user_view(cluster, workload))
    settings, values = run_experiment(tuner, objective, 3, CODEC)
    assert len(tuner.fits) == 4  # the reference and three runs, each refitted
    assert len({s.label() for s in settings}) == 4
    assert all(f["metric_error"] is not None for f in tuner.fits)
    assert tuner.last_search["simulated"] > 50  # it searched the twin, not the cluster
    assert min(values) <= values[0]


def test_the_twin_weight_follows_what_it_predicted_before_each_run() -> None:
    """Changes measured as the twin predicted them (out of sample) keep its weight near 1; changes
    against its predictions take the weight to 0, and the tuner falls back to GP-BO over its pool."""
    pred = np.log(np.array([0.5, 0.7, 1.5, 2.0]))
    assert TwinTuner._twin_weight([(k, p, p) for k, p in enumerate(pred, 1)]) == pytest.approx(1.0, abs=0.05)
    assert TwinTuner._twin_weight([(k, p, -p) for k, p in enumerate(pred, 1)]) == 0.0
    assert TwinTuner._twin_weight([]) == 1.0  # the reference alone: nothing says otherwise


class _Contrary:
    """A cluster that answers every profile the opposite way from the twin: a run's latency is the
    reference's divided by how much faster the twin said it would be (a twin of the wrong cluster)."""

    def __init__(self, tuner, base: float = 1.0) -> None:
        self.tuner, self.base = tuner, base

    def __call__(self, setting) -> float:
        twin = self.tuner.twin
        ref = twin.predict(CODEC.reference().to_profile())
        return self.base * ref / twin.predict(setting.to_profile())


def test_a_twin_whose_predictions_runs_contradict_is_not_followed_and_says_why(lab, caplog) -> None:
    """The trust rule: after a run whose change against the reference the twin mispredicted beyond
    CHANGE_BOUND, the tuner says what it cannot explain in one line, its weight is 0 (GP-BO over its
    pool), and it proposes what the model-free GP picks, not the twin's argmin. With the rule off
    (``twin-notrust``) the same runs leave the twin in charge."""
    import logging

    from agent.objectives.view import user_view
    from agent.tuners import twin as twin_module

    cluster, workload = lab
    view = user_view(cluster, workload)
    tuners = {m: make_tuner(m, CODEC, seed=1, view=view) for m in ("twin", "twin-notrust")}
    with caplog.at_level(logging.WARNING, logger=twin_module.__name__):
        for tuner in tuners.values():
            tuner.fit_enabled = False  # the twin stays the view: its predictions are known in advance
            contrary = _Contrary(tuner)
            tuner.tell(CODEC.reference_action(), contrary(CODEC.reference()))
            for _ in range(2):
                a = np.clip(tuner.suggest(), -1, 1)
                tuner.tell(a, contrary(CODEC.decode(a)))
    ruled, free = tuners["twin"], tuners["twin-notrust"]
    (_, pred, meas), = ruled.change_errors()[:1]
    assert pred < -0.1 and meas > 0.1  # it promised a faster run; the run was slower
    assert ruled.trust_log[1]["trusted"] is False and ruled.trust_log[1]["reasons"][0].startswith("metric: it predicted")
    assert ruled.trust_log[2]["trusted"] is False  # a model-free run it guessed closer does not undo the miss
    assert not ruled.trusted and ruled.last_search["twin_weight"] == 0.0 and not ruled.last_search["trusted"]
    assert free.trusted and free.last_search["twin_weight"] > 0.0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("twin: the twin cannot explain metric")]
    assert len(lines) == 1 and "proposing model-free" in lines[0]


def test_twin_needs_the_view() -> None:
    assert is_method("twin")
    with pytest.raises(AgentError, match="method 'twin' needs the cluster and the workload"):
        make_tuner("twin", CODEC)


def test_unknown_mismatch_is_one_line_and_writes_nothing(tmp_path) -> None:
    result = runner.invoke(app, ["evaluate", "--scenarios", "lab-web", "--methods", "gp", "--mismatch", "bogus",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "unknown mismatch level 'bogus'" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def _own(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A user's cluster and workload files, and the `tune --method twin` arguments on them."""
    cluster = tmp_path / "c.yaml"
    shutil.copy(CLUSTERS_DIR / "lab-small.yaml", cluster)
    wl = tmp_path / "w.parquet"
    write_workload(lab_workload(3, duration_s=15.0), wl)
    return cluster, wl, ["tune", "--backend", "sim", "--cluster", str(cluster), "--workload", str(wl), "--method", "twin"]


def test_tune_with_twin_on_sim_then_report_and_fit(tmp_path) -> None:
    cluster, wl, args = _own(tmp_path)
    out = tmp_path / "exp"
    result = runner.invoke(app, [*args, "--steps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "where the time went, reference (step 0):" in result.output
    summary = json.loads((out / "runs" / "step-000" / "cand-0" / "summary.json").read_text())
    assert set(summary["where"]["nodes"]) <= {"fast-0", "fast-1", "slow-0", "slow-1"}
    report = runner.invoke(app, ["report", str(out / "runs" / "step-000" / "cand-0")])
    assert report.exit_code == 0 and "reqs" in report.output and "fail" in report.output
    fitted = tmp_path / "twin.yaml"
    fit = runner.invoke(app, ["twin", "fit", str(out / "runs" / "step-000" / "cand-0"),
                              str(out / "runs" / "step-001" / "cand-0"), "--cluster", str(cluster),
                              "--workload", str(wl), "-o", str(fitted)])
    assert fit.exit_code == 0, fit.output
    twin = load_cluster(fitted)  # a cluster spec `sim run` loads
    assert [n.name for n in twin.nodes] == [n.name for n in load_cluster(cluster).nodes]
    assert "runs at" in fit.output
    bad = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert bad.exit_code == 1 and "not a run directory" in bad.output


def test_a_lab_summary_of_where_version_1_is_read_with_the_pulls_of_its_tables(tmp_path) -> None:
    """Runs written before where version 2 by the lab (or kube) carry a ``where`` with no pulls (the
    load generator's, computed without placements). The bug this names: the readers -- the resumed
    twin's step_where, ``report``/``twin fit``'s read_where, ``twin fidelity`` -- took that section
    as it was, and the twin never fitted a pull from a lab run."""
    from agent.cli.report import read_where
    from agent.loop.log import read_log, step_where

    _, _, args = _own(tmp_path)
    out = tmp_path / "exp"
    assert runner.invoke(app, [*args, "--steps", "1", "--out", str(out)]).exit_code == 0
    run = out / "runs" / "step-000" / "cand-0"
    summary = json.loads((run / "summary.json").read_text())
    fresh = summary["where"]
    assert sum(c["pulls"] for c in fresh["nodes"].values()) > 0  # the reference run pulled images
    stale = {**fresh, "version": 1,
             "nodes": {n: {**c, "pods": 0, "pulls": 0, "pull_s": None} for n, c in fresh["nodes"].items()}}
    (run / "summary.json").write_text(json.dumps({**summary, "where": stale}))
    assert read_where(run)[1] == fresh
    record = read_log(out)[0]
    assert step_where(out, record) == fresh
    (run / "placements.parquet").unlink()  # a copied experiment keeps only summaries: the old section
    assert step_where(out, record) == stale


def test_verdicts_replay_a_finished_twin_experiment(tmp_path) -> None:
    """``twin verdicts`` drives the twin through a finished experiment's logged runs as a resume does:
    on the simulator with no mismatch it predicted every run it proposed, and the rule never refused."""
    _, _, args = _own(tmp_path)
    out = tmp_path / "exp"
    assert runner.invoke(app, [*args, "--steps", "3", "--out", str(out)]).exit_code == 0
    table = tmp_path / "verdicts.md"
    result = runner.invoke(app, ["twin", "verdicts", str(out), "-o", str(table)])
    assert result.exit_code == 0, result.output
    assert "| exp | 3 | - | - | trusted throughout the judged runs |" in table.read_text()


def test_resume_replays_the_fits(tmp_path) -> None:
    """A resumed twin experiment refits on the logged runs' breakdowns before its next proposal."""
    _, _, args = _own(tmp_path)
    out = tmp_path / "exp"
    assert runner.invoke(app, [*args, "--steps", "3", "--out", str(out)]).exit_code == 0
    full = [json.loads(line)["label"] for line in (out / "experiment.jsonl").read_text().splitlines()]
    lines = (out / "experiment.jsonl").read_text().splitlines()
    (out / "experiment.jsonl").write_text("\n".join(lines[:2]) + "\n")  # as if stopped after step 1
    shutil.rmtree(out / "runs" / "step-002", ignore_errors=True)
    result = runner.invoke(app, ["tune", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    resumed = [json.loads(line)["label"] for line in (out / "experiment.jsonl").read_text().splitlines()]
    assert resumed[:len(full)] == full  # the same proposals: the fits were replayed
    assert Path(out / "runs" / "step-002").exists()


def test_wrappers_pass_the_breakdown_on_to_the_twin(lab) -> None:
    """``twin+gp3`` and ``twin+reeval``: the wrapped twin still refits after every run it is told."""
    from agent.objectives.view import user_view

    cluster, workload = lab
    for method in ("twin+gp2", "twin+reeval1"):
        tuner = make_tuner(method, CODEC, seed=1, steps=3, view=user_view(cluster, workload))
        run_experiment(tuner, SimObjective(cluster, workload, 0), 3, CODEC)
        inner = getattr(tuner, "first", None) or tuner.inner
        assert len(inner.fits) >= 3, method
    assert not hasattr(make_tuner("gp+gp2", CODEC, seed=1), "observe_where")  # only a reader asks for it


@pytest.mark.parametrize("args, message", [
    (["twin", "tasks", "--family", "bogus", "--start", "3000000"], "--family 'bogus': valid: gen, gensmall, gentrace"),
    (["twin", "mismatch", "--scenarios", "lab-web", "--levels", "mild,bogus"], "unknown mismatch level 'bogus'"),
    (["twin", "fit", "{tmp}/nope", "--cluster", "lab-small", "--workload", "{tmp}/w.parquet"], "not a run directory"),
    (["twin", "verdicts", "{tmp}"], "not a tune experiment (no experiment.jsonl)"),
    (["twin", "trust", "--scenarios", "gensmall-4000001", "--levels", "structural"], "the bounds are chosen at 'default'"),
])
def test_twin_commands_refuse_bad_input_in_one_line(tmp_path, args, message) -> None:
    out = tmp_path / "out"
    write_workload(lab_workload(3, duration_s=5.0), tmp_path / "w.parquet")
    result = runner.invoke(app, [*(a.replace("{tmp}", str(tmp_path)) for a in args), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_compare_pairs_by_task() -> None:
    """The paired difference by hand: two tasks, two seeds, noise-free curves."""
    from agent.evaluation.compare import compare

    rows = []
    for scenario, ref, orc in (("a", 10.0, 5.0), ("b", 4.0, 2.0)):
        for seed in (0, 1):
            rows.append({"method": "x", "scenario": scenario, "seed": seed, "metrics": [ref, ref - 0.5 * (ref - orc)],
                         "true_reference": ref, "oracle": orc, "truth_seeds": 1})
            rows.append({"method": "y", "scenario": scenario, "seed": seed, "metrics": [ref, ref],
                         "true_reference": ref, "oracle": orc, "truth_seeds": 1})
    frame = pd.DataFrame(rows)
    frame.attrs["exact"] = True
    table = compare(frame, "x", budgets=(1,))
    row = table.iloc[0]
    assert (row["other"], row["T"], row["tasks"]) == ("y", 1, 2)
    assert row["gap"] == pytest.approx(0.5) and row["other_gap"] == 0.0 and row["difference"] == pytest.approx(0.5)
    assert row["regret_cut"] == pytest.approx(0.5)  # half the regret of a method that closes nothing


def test_view_next_gives_the_tuners_another_clusters_view_and_the_same_truth() -> None:
    """``evaluate --view next``: the world's truth, oracle and workload stay the task's own; the view
    is the next family member's cluster with the task's workload. A scenario outside a generated
    family, or an unknown view, is one line."""
    from agent.objectives.sim import scenario_objective

    worlds = {}
    for view in ("own", "next"):
        p = Protocol(steps=1, oracle_runs=0, mismatch="default", sim_seed=0, view=view)
        worlds[view] = _exact_world(Task("gensmall-4000001", (0,), ("gp",), {}, p), 0, scenario_objective, CODEC)
    own, wrong = worlds["own"], worlds["next"]
    assert own.truth(CODEC.reference()) == wrong.truth(CODEC.reference())
    assert wrong.view.fingerprint() != own.view.fingerprint()
    assert wrong.view.workload is own.view.workload or wrong.view.workload.frame.equals(own.view.workload.frame)
    from testbed.sim.twin import cluster_view

    assert wrong.view.cluster.nodes == cluster_view(scenario_objective("gensmall-4000002", 0).cluster).nodes
    with pytest.raises(AgentError, match="--view next: 'lab-web' is not a member of a generated family"):
        _exact_world(Task("lab-web", (0,), ("gp",), {}, Protocol(steps=1, oracle_runs=0, view="next")), 0,
                     scenario_objective, CODEC)
    with pytest.raises(AgentError, match="--view 'mine': valid: own, next"):
        Protocol(steps=1, view="mine").check()


def test_the_trust_bounds_are_the_committed_validation_study() -> None:
    """The tuner's bounds are the ones `scoretune twin trust` chose on the validation tasks (a rerun
    of the study that moves them must move the constants, and the other way round)."""
    from agent.tuners import twin as twin_module

    study = json.loads((Path(__file__).resolve().parents[2] / "docs/results/twin/trust/bounds.json").read_text())
    assert twin_module.CHANGE_BOUND == pytest.approx(study["change"], abs=5e-4)
    assert twin_module.CELL_BOUND == pytest.approx(study["cell"], abs=5e-4)


def test_against_pairs_one_method_across_two_evaluations_with_one_oracle() -> None:
    """``twin compare NEW --against OLD``: the same method before and after a change, on the (task,
    seed) pairs both ran, scored against the better of the two oracles (an evaluation that ran
    more methods found a lower one): here the new twin closes 0.5 of the common gap, the old 0.25."""
    from agent.evaluation.compare import against

    def frame(metrics_by_task, oracle):
        rows = [{"method": "twin", "scenario": t, "seed": 0, "metrics": m, "true_reference": m[0], "oracle": oracle[t],
                 "truth_seeds": 1} for t, m in metrics_by_task.items()]
        f = pd.DataFrame(rows)
        f.attrs["exact"] = True
        return f

    new = frame({"a": [10.0, 7.5], "b": [4.0, 3.0]}, {"a": 6.0, "b": 2.0})
    old = frame({"a": [10.0, 8.75], "b": [4.0, 3.5], "c": [1.0, 1.0]}, {"a": 5.0, "b": 2.0, "c": 1.0})
    table = against(new, old, "twin", budgets=(1,))
    row = table.iloc[0]
    assert row["tasks"] == 2 and row["gap"] == pytest.approx(0.5) and row["other_gap"] == pytest.approx(0.25)
    assert row["difference"] == pytest.approx(0.25)


def test_structural_levels_on_openwhisk_are_refused_before_anything_runs() -> None:
    with pytest.raises(AgentError, match="--mismatch structural: the structural levels are modelled in the Knative"):
        Protocol(steps=1, mismatch="structural", platform="openwhisk").check()
    Protocol(steps=1, mismatch="structural").check()  # Knative: fine
