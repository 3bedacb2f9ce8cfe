"""``scoretune tune`` / ``train`` through typer's CliRunner (backend resolution patched to the fixture)."""

from __future__ import annotations

import json

import pytest
from agent_fixtures import Crash
from typer.testing import CliRunner

from agent.cli import app
from agent.loop.log import read_log

runner = CliRunner()


def _said(result) -> str:
    return result.output + str(result.exception or "")


def test_tune_with_a_baseline_writes_the_experiment(tmp_path, made_backends):
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "hill", "--steps", "4",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Improvement over the default weights" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "hill" and summary["backend"] == "sim" and summary["steps"] == 4
    assert summary["cluster"] == "lab-small"
    from testbed.sim import SimBackend

    assert [type(b) for b in made_backends] == [SimBackend]  # --backend sim ran the simulator itself
    assert (out / "runs" / "step-001" / "cand-0" / "requests.parquet").exists()
    assert len(read_log(out)) == 5
    assert (out / "best-scheduler-config.yaml").exists()


def test_tune_on_openwhisk_runs_the_simulators_openwhisk_and_the_twin_knows_it(tmp_path, made_backends):
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--backend", "sim", "--platform", "openwhisk", "--workload", "lab",
                                 "--method", "twin", "--steps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["platform"] == "openwhisk"
    run = json.loads((out / "runs" / "step-001" / "cand-0" / "summary.json").read_text())
    assert run["platform"] == "openwhisk"
    assert made_backends[0].config.platform == "openwhisk"
    # a resume may not change what served the functions
    result = runner.invoke(app, ["tune", "--resume", str(out), "--platform", "knative", "--steps", "3"])
    assert result.exit_code == 1 and "--platform" in _said(result)


def test_tune_resume_continues_from_the_log(tmp_path, made_backends):
    out = tmp_path / "exp"
    made_backends.crash_on_run = 3  # the first backend crashes on its third run
    result = runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "random",
                                 "--steps", "4", "--out", str(out)])
    # the CLI's last-resort handler turns the fixture's crash into one line and exit 2
    assert isinstance(result.exception, Crash) or (result.exit_code == 2 and "Crash" in result.output)
    assert len(read_log(out)) == 2
    made_backends.clear()
    result = runner.invoke(app, ["tune", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert [r.step for r in read_log(out)] == [0, 1, 2, 3, 4]


def test_tune_argument_errors_are_one_line(tmp_path, made_backends):
    result = runner.invoke(app, ["tune", "--workload", "lab", "--steps", "2", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "exactly one of --policy FILE or --method NAME" in _said(result)
    result = runner.invoke(app, ["tune", "--resume", str(tmp_path / "nowhere")])
    assert result.exit_code == 1 and "no experiment to resume" in _said(result)


def test_train_help_lists_the_dataclass_fields():
    result = runner.invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    for flag in ("--total-timesteps", "--frame-stack", "--reward", "--n-steps", "--ship", "--no-progress-bar"):
        assert flag in result.output


@pytest.mark.parametrize(("act", "method", "expected"), [("sample", None, "policy-sample"), ("mean", None, "policy"),
                                                         ("sample", "policy", "policy")])
def test_tune_with_a_policy_acts_as_its_config_says(tmp_path, made_backends, act, method, expected):
    import shutil

    from agent.rl.artefacts import SHIPPED_POLICY

    policy = tmp_path / "p.zip"
    shutil.copy(SHIPPED_POLICY, policy)
    config = json.loads(SHIPPED_POLICY.with_suffix(".json").read_text())
    policy.with_suffix(".json").write_text(json.dumps({**config, "act": act}))
    out = tmp_path / "exp"
    args = ["tune", "--backend", "sim", "--workload", "lab", "--policy", str(policy), "--steps", "3", "--out", str(out)]
    result = runner.invoke(app, args + (["--method", method] if method else []))
    assert result.exit_code == 0, _said(result)
    assert json.loads((out / "summary.json").read_text())["method"] == expected


def test_tune_rejects_an_unknown_act_naming_the_file(tmp_path, made_backends):
    import shutil

    from agent.rl.artefacts import SHIPPED_POLICY

    policy = tmp_path / "p.zip"
    shutil.copy(SHIPPED_POLICY, policy)
    config = json.loads(SHIPPED_POLICY.with_suffix(".json").read_text())
    policy.with_suffix(".json").write_text(json.dumps({**config, "act": "dance"}))
    result = runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--policy", str(policy),
                                 "--steps", "3", "--out", str(tmp_path / "exp")])
    assert result.exit_code == 1
    assert "p.json" in _said(result) and "act" in _said(result)


def test_bench_agent_reports_positive_rates_for_every_tuner_and_the_policy():
    result = runner.invoke(app, ["bench", "agent", "--env-steps", "2"])
    assert result.exit_code == 0, _said(result)
    report = json.loads(result.output.strip().splitlines()[-1])
    assert report["env_steps_per_s"] > 0 and report["scenario"] == "lab-web"
    assert set(report["tuner_ms_per_step"]) == {"random", "tpe", "gp", "cmaes", "hill"}
    assert all(ms > 0 for ms in report["tuner_ms_per_step"].values())
    assert report["policy_predict_ms"] > 0  # the shipped policy loads and answers


def test_make_tunes_preset_runs_the_twin_tuner_and_a_typed_tuner_wins(tmp_path):
    """`make tune` is `tune --embedded-default`: the model-based twin tuner since it met issue 34's
    lab targets; a --method or --policy typed with it is the one used."""
    out = tmp_path / "exp"
    result = runner.invoke(app, ["tune", "--embedded-default", "--backend", "sim", "--steps", "1", "--confirm", "1",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["method"] == "twin" and config["policy"] is None and config["workload"] == "lab"
    assert (out / "twin-fits.json").exists()
    other = runner.invoke(app, ["tune", "--embedded-default", "--backend", "sim", "--method", "random", "--steps", "1",
                                "--confirm", "0", "--out", str(tmp_path / "other")])
    assert other.exit_code == 0, other.output
    assert json.loads((tmp_path / "other" / "config.json").read_text())["method"] == "random"


def test_a_killed_command_unwinds_as_on_ctrl_c(tmp_path):
    """SIGTERM to ``scoretune fidelity`` (a job manager's kill) killed the Python process at once:
    its Locust ran on to its end and its lab waited for the controller's owner check. ``main``
    turns SIGTERM into the KeyboardInterrupt Ctrl-C raises, so every ``finally`` runs."""
    import signal
    import subprocess
    import sys

    import psutil

    code = ("import subprocess\n"
            "from agent.cli.app import terminate_as_interrupt\n"
            "terminate_as_interrupt()\n"
            "child = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "try:\n"
            "    print(child.pid, flush=True)\n"  # inside: the signal may land before print returns
            "    child.wait()\n"
            "finally:\n"
            "    child.kill()\n"
            "    child.wait()\n"
            "    print('cleaned up', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert "cleaned up" in out, (proc.returncode, err[-500:])
        assert "KeyboardInterrupt: SIGTERM" in err
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    finally:
        if psutil.pid_exists(child):
            psutil.Process(child).kill()


def test_confirm_rejudges_a_saved_profile_in_new_pairs_and_refuses_what_it_cannot(tmp_path, made_backends):
    out = tmp_path / "exp"
    assert runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "random", "--steps", "4",
                               "--seed", "2", "--out", str(out)]).exit_code == 0
    summary = json.loads((out / "summary.json").read_text())
    for mde in ("-5", "nan"):
        bad = runner.invoke(app, ["confirm", str(out), "--mde", mde])
        assert bad.exit_code == 1 and "--mde must be a percentage" in bad.output, _said(bad)
        assert len(bad.output.strip().splitlines()) == 1 and not (out / "reconfirmations").exists()
    result = runner.invoke(app, ["confirm", str(out), "--pairs", "3"])
    if summary["best_step"] == 0:
        assert result.exit_code == 1 and "nothing to confirm" in result.output
        return
    assert result.exit_code == 0, _said(result)
    assert "minimum detectable effect" in result.output
    (found,) = list((out / "reconfirmations").glob("*/reconfirmation.json"))
    r = json.loads(found.read_text())
    assert r["pairs"] <= 3 and r["label"] == summary["best_label"] and r["seeds"][0] == 5002
    assert len({tuple(o) for o in r["orders"]}) >= 1 and r["voids_by_arm"] == {"ref": 0, "cand": 0}
    bad = runner.invoke(app, ["confirm", str(tmp_path / "nothing")])
    assert bad.exit_code == 1 and "not an experiment directory" in bad.output
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text((out / "config.json").read_text())
    bad = runner.invoke(app, ["confirm", str(tmp_path / "half")])
    assert bad.exit_code == 1 and "has not finished" in bad.output and len(bad.output.strip().splitlines()) == 1


def test_a_config_error_names_the_option_the_user_typed(tmp_path, made_backends):
    """The experiment's config checks its fields; the user typed options, so the line names the
    option (planted: without ``as_option`` it says "host_drift must be ...")."""
    for args, said in ((["--host-drift", "0.5"], "--host-drift must be 0 (no check) or a ratio above 1"),
                       (["--confirm-mde", "2000"], "--confirm-mde")):
        bad = runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "random", "--steps", "1",
                                  "--out", str(tmp_path / "x"), *args])
        assert bad.exit_code in (1, 2) and said in bad.output, _said(bad)
        assert not (tmp_path / "x").exists()
    done = tmp_path / "done"
    assert runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "random", "--steps", "1",
                               "--out", str(done)]).exit_code == 0
    bad = runner.invoke(app, ["tune", "--resume", str(done), "--host-drift", "0.9"])
    assert bad.exit_code == 1 and "--host-drift must be" in bad.output and len(bad.output.strip().splitlines()) == 1

