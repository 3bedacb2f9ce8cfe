"""The lab table's arithmetic on hand-written experiment summaries (the experiments themselves are
`scoretune tune --backend local` runs, tested in test_agent_tune.py)."""

from __future__ import annotations

import json

import pytest

from agent.errors import AgentError, InputError
from agent.evaluation.lab_table import (
    LabMethod,
    budget_markdown,
    collect,
    experiment_dir,
    lab_markdown,
    write_report,
)


def write_experiment(out, scenario, method, seed, *, applied, refs=(), cands=(), curve=(50.0,)):
    d = experiment_dir(out, scenario, method, seed)
    d.mkdir(parents=True)
    conf = {"reference_samples": list(refs), "samples": list(cands)} if refs else None
    summary = {"cluster": scenario, "reference_metric": 1.0, "best_metric": 0.5, "best_step": 3,
               "improvement_pct": 50.0, "applied_step": 3 if applied else 0, "confirmation": conf,
               "verdict": "improvement" if applied else "no-difference", "applied_label": "x"}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "config.json").write_text(json.dumps({"seed": seed}))
    steps = [{"step": 0, "improvement_pct": 0.0}] + [{"step": i + 1, "improvement_pct": v} for i, v in enumerate(curve)]
    (d / "experiment.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))


def test_applied_improvement_and_the_comparison_by_hand(tmp_path):
    # gp: seed 0 confirmed +20 % and +40 % (mean 30), seed 1 not confirmed (the reference applied: 0)
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=True, refs=(1.0, 1.0), cands=(0.8, 0.6))
    write_experiment(tmp_path, "lab-a", "gp", 1, applied=False, refs=(1.0, 1.0), cands=(1.1, 0.7))
    write_experiment(tmp_path, "lab-a", "policy", 0, applied=True, refs=(2.0, 2.0), cands=(1.0, 1.0))
    write_experiment(tmp_path, "lab-a", "policy", 1, applied=True, refs=(1.0, 1.0), cands=(0.5, 0.5))
    frame = collect(tmp_path, ["lab-a"], ["gp", "policy"], [0, 1]).set_index(["method", "seed"])
    assert frame.loc[("gp", 0), "applied_pct"] == pytest.approx(30.0)
    assert frame.loc[("gp", 1), "applied_pct"] == 0.0 and frame.loc[("gp", 1), "pairs"] == pytest.approx([-10.0, 30.0])
    assert frame.loc[("policy", 0), "applied_pct"] == pytest.approx(50.0)
    table = lab_markdown(frame.reset_index(), "policy")
    # policy vs gp per seed: 1 - 0.5/0.7 = 28.6 %, 1 - 0.5/1.0 = 50 %
    assert "+39.3 (seeds: +28.6, +50.0)" in table
    assert "(seeds: +30.0, +0.0)" in table and "(seeds: +50.0, +50.0)" in table
    path = write_report(tmp_path, frame.reset_index(), "policy", {"command": "test"})
    assert path.read_text() == table


def test_the_table_by_budget_is_the_best_measured_so_far_against_the_confirmed_yardstick(tmp_path):
    # gp: confirmed +40 % and +20 % (yardstick 30); its runs measured -10, 30, 60 and 20, -5, 45
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=True, refs=(1.0,), cands=(0.6,), curve=(-10.0, 30.0, 60.0))
    write_experiment(tmp_path, "lab-a", "gp", 1, applied=True, refs=(1.0,), cands=(0.8,), curve=(20.0, -5.0, 45.0))
    write_experiment(tmp_path, "lab-a", "twin", 0, applied=True, refs=(1.0,), cands=(0.7,), curve=(27.0, 10.0, 5.0))
    write_experiment(tmp_path, "lab-a", "twin", 1, applied=False, refs=(1.0,), cands=(1.0,), curve=(-3.0, -1.0, 9.0))
    table = budget_markdown(collect(tmp_path, ["lab-a"], ["gp", "twin"], [0, 1]))
    # best so far: gp T=1 (0, 20) -> 10, T=2 (30, 20) -> 25, T=3 (60, 45) -> 52.5; twin (27, 0), (27, 0), (27, 9)
    assert "| lab-a | gp | +10.0 | +25.0 | +52.5 |" in table
    assert "| lab-a | twin | +13.5 | +13.5 | +18.0 |" in table
    assert "(+30.0 %, the mean applied" in table
    assert "| twin | 45 % | 45 % | 60 % |" in table and "| gp | 33 % | 83 % | 175 % |" in table
    write_report(tmp_path, collect(tmp_path, ["lab-a"], ["gp", "twin"], [0, 1]), "twin", {})
    assert (tmp_path / "budget.md").read_text() == table
    (experiment_dir(tmp_path, "lab-a", "gp", 1) / "experiment.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(InputError, match="experiment.jsonl.*not a tune experiment log"):
        collect(tmp_path, ["lab-a"], ["gp"], [1])


def test_an_unfinished_experiment_is_named(tmp_path):
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=True, refs=(1.0,), cands=(0.8,))
    with pytest.raises(AgentError, match="seed1: not finished"):
        collect(tmp_path, ["lab-a"], ["gp"], [0, 1])
    bad = experiment_dir(tmp_path, "lab-b", "gp", 0)
    bad.mkdir(parents=True)
    (bad / "summary.json").write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not a finished tune experiment"):
        collect(tmp_path, ["lab-b"], ["gp"], [0])


def test_first_seed_reports_the_seeds_from_it_and_names_a_missing_one(tmp_path):
    """``--first-seed 1 --seeds 1``: a row of seed 1 alone (a tuner changed after seed 0 ran)."""
    from typer.testing import CliRunner

    from agent.cli import app

    write_experiment(tmp_path, "lab-a", "gp", 1, applied=True, refs=(1.0,), cands=(0.8,))
    base = ["lab-table", "--report-only", "--scenarios", "lab-a", "--methods", "gp", "--shipped", "gp", "-o", str(tmp_path)]
    ok = CliRunner().invoke(app, [*base, "--first-seed", "1", "--seeds", "1"])
    assert ok.exit_code == 0, ok.output
    assert "(seeds: +20.0)" in (tmp_path / "table.md").read_text()
    assert json.loads((tmp_path / "lab-table.json").read_text())["seeds"] == [1]
    missing = CliRunner().invoke(app, [*base, "--seeds", "1"])  # seed 0 by default
    assert missing.exit_code == 1 and "seed0: not finished" in missing.output


def test_methods_are_checked(tmp_path):
    assert LabMethod.parse("gp", tmp_path / "p.zip").config_fields() == {"method": "gp", "policy": None}
    assert LabMethod.parse("policy", tmp_path / "p.zip") == LabMethod("policy", str(tmp_path / "p.zip"))
    from agent.rl.artefacts import SHIPPED_POLICY, policy_method

    fields = LabMethod.parse("policy", SHIPPED_POLICY).config_fields()  # the policy acts as its config says
    assert fields == {"method": policy_method(SHIPPED_POLICY), "policy": str(SHIPPED_POLICY)}
    assert fields["method"] in ("policy", "policy-sample")
    with pytest.raises(AgentError, match="not a baseline"):
        LabMethod.parse("gpp", tmp_path / "p.zip")
    with pytest.raises(InputError, match="does not exist"):
        LabMethod.parse(f"mine={tmp_path / 'none.zip'}", tmp_path / "p.zip")


def test_run_experiments_runs_each_missing_experiment_and_resumes_an_interrupted_one(tmp_path):
    """Experiments built as ``scoretune tune`` builds them (on the simulator, to be quick), in this
    process: a missing cell gets its experiment, a finished one is kept, an interrupted one is
    resumed, and the table is built."""
    from agent.evaluation.lab_table import run_experiments

    write_experiment(tmp_path, "lab-small", "random", 0, applied=False)  # finished earlier
    kept = (experiment_dir(tmp_path, "lab-small", "random", 0) / "summary.json").read_text()
    methods = [LabMethod("hill"), LabMethod("random")]
    kw = dict(steps=2, confirm=1, duration_s=5.0, backend="sim")
    run_experiments(tmp_path, ["lab-small"], methods, [0], **kw)
    hill = experiment_dir(tmp_path, "lab-small", "hill", 0)
    assert (hill / "summary.json").exists() and len((hill / "experiment.jsonl").read_text().splitlines()) == 3
    assert (experiment_dir(tmp_path, "lab-small", "random", 0) / "summary.json").read_text() == kept
    (hill / "summary.json").unlink()  # interrupted after its last step: resumed, not rerun
    steps_before = (hill / "experiment.jsonl").read_text()
    run_experiments(tmp_path, ["lab-small"], methods, [0], **kw)
    assert (hill / "summary.json").exists() and (hill / "experiment.jsonl").read_text() == steps_before
    frame = collect(tmp_path, ["lab-small"], ["hill", "random"], [0])
    assert list(frame["method"]) == ["hill", "random"] and frame["reference_s"].gt(0).all()
    sized = tmp_path / "sized"
    run_experiments(sized, ["lab-small"], [LabMethod("hill")], [0], **{**kw, "confirm": 24}, confirm_mde=15.0)
    cfg = json.loads((experiment_dir(sized, "lab-small", "hill", 0) / "config.json").read_text())
    assert cfg["confirm"] == 24 and cfg["confirm_mde"] == 15.0


def test_a_failed_experiment_stops_the_table_saying_how_to_resume(tmp_path):
    from agent.evaluation.lab_table import run_experiments

    with pytest.raises(AgentError, match=r"no-such-cluster.*the experiment stopped .*no-such-cluster.*; rerun the "
                                         "same command to resume it"):
        run_experiments(tmp_path, ["no-such-cluster"], [LabMethod("hill")], [0], steps=1, confirm=1, duration_s=5.0,
                        backend="sim")


def test_the_transfer_baselines_are_lab_table_methods(tmp_path):
    for name in ("learned-default", "ws-cmaes", "gp-warm", "task-mixture"):
        assert LabMethod.parse(name, tmp_path / "p.zip").config_fields() == {"method": name, "policy": None}
    with pytest.raises(AgentError, match="gp-warm"):  # the message lists them
        LabMethod.parse("nope", tmp_path / "p.zip")


def test_every_experiment_weighs_the_same_whatever_its_pairs(tmp_path):
    # GP-BO's lab-taints case of the audit: two seeds confirmed (+90 %, +84 % over three pairs each),
    # one not confirmed after three pairs. Pooling pairs reads (3*90 + 3*84 + 1*0) / 7 = 74.6; each
    # experiment once, (90 + 84 + 0) / 3 = 58.0.
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=True, refs=(1.0,) * 3, cands=(0.1,) * 3)
    write_experiment(tmp_path, "lab-a", "gp", 1, applied=True, refs=(1.0,) * 3, cands=(0.16,) * 3)
    write_experiment(tmp_path, "lab-a", "gp", 2, applied=False, refs=(1.0,) * 3, cands=(1.1, 0.9, 1.2))
    frame = collect(tmp_path, ["lab-a"], ["gp"], [0, 1, 2])
    table = lab_markdown(frame, "gp")
    assert "| lab-a | +0.0 | +58.0 [" in table and "(seeds: +90.0, +84.0, +0.0)" in table
    assert "| **all scenarios** | +0.0 | +58.0 [" in table and "(n = 3)" in table
    assert "not confirmed (the default weights stay)" in table
    one = lab_markdown(collect(tmp_path, ["lab-a"], ["gp"], [0]), "gp")
    assert "| lab-a | +0.0 | +90.0 [90.0, 90.0] pairs (seeds: +90.0)" in one


def test_a_baseline_that_applied_nothing_is_said_not_divided_by(tmp_path):
    """GP-BO confirmed nothing on seeds 0-1 of the container lab: the share table was a column of nan."""
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=False, refs=(1.0,), cands=(1.1,), curve=(30.0,))
    write_experiment(tmp_path, "lab-a", "twin", 0, applied=True, refs=(1.0,), cands=(0.5,), curve=(50.0,))
    table = budget_markdown(collect(tmp_path, ["lab-a"], ["gp", "twin"], [0]))
    assert "nan" not in table and "gp applied no gain over its experiments (+0.0 %)" in table
    assert "| lab-a | twin | +50.0 |" in table


def _run_summary(path, cold: int, warm: int, cold_p50: float, warm_p50: float) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"by_start": {
        "cold": {"count": cold, "mean_s": cold_p50, "p50_s": cold_p50, "p95_s": cold_p50},
        "warm": {"count": warm, "mean_s": warm_p50, "p50_s": warm_p50, "p95_s": warm_p50}}}))


def test_the_starts_table_says_whether_a_gain_came_from_fewer_cold_starts(tmp_path):
    """SeBS's figures beside the gain: the reference's and the best profile's cold share and cold
    and warm medians, from the confirmation's runs (a void run kept aside is not one of them:
    planted, globbing ``ref-[0-9]*`` took ``ref-0.void-1`` in and moved the reference's share to
    30 %), or from the step's runs where nothing was confirmed; a run without the figures is "–"."""
    write_experiment(tmp_path, "lab-a", "twin", 0, applied=True, refs=(1.0, 1.0), cands=(0.6, 0.7))
    conf = experiment_dir(tmp_path, "lab-a", "twin", 0) / "runs" / "confirm"
    _run_summary(conf / "ref-0", 4, 16, 3.0, 0.2)
    _run_summary(conf / "ref-1", 6, 14, 3.4, 0.3)
    _run_summary(conf / "ref-0.void-1", 19, 1, 9.0, 9.0)
    _run_summary(conf / "cand-0", 1, 19, 2.0, 0.2)
    _run_summary(conf / "cand-1", 3, 17, 2.2, 0.2)
    write_experiment(tmp_path, "lab-a", "twin", 1, applied=False)
    steps = experiment_dir(tmp_path, "lab-a", "twin", 1) / "runs"
    _run_summary(steps / "step-000" / "cand-0", 10, 10, 5.0, 0.5)
    _run_summary(steps / "step-003" / "cand-0", 5, 15, 4.0, 0.4)
    write_experiment(tmp_path, "lab-a", "gp", 0, applied=False)
    frame = collect(tmp_path, ["lab-a"], ["twin", "gp"], [0])
    table = write_report(tmp_path, frame, "twin", {}).with_name("starts.md").read_text()
    assert "| lab-a | twin | 25 % | 10 % | 3.20 | 2.10 | 0.25 | 0.20 |" in table
    assert "| lab-a | gp | – | – | – | – | – | – |" in table
    both = collect(tmp_path, ["lab-a"], ["twin"], [0, 1]).set_index("seed")
    assert both.loc[1, "ref_cold_share"] == pytest.approx(0.5) and both.loc[1, "cand_warm_p50_s"] == pytest.approx(0.4)
