"""Resume loses nothing: torn and unterminated log tails, repeated resumes, contradicting options,
paths that survive a change of working directory, and a tune process killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_fixtures import AnalyticBackend, AnalyticObjective, tiny_workload
from typer.testing import CliRunner

import agent.loop.backends
from agent.actions import ActionCodec
from agent.cli import app
from agent.errors import AgentError, ExperimentLogError
from agent.loop.config import LOG_NAME, ExperimentConfig
from agent.loop.experiment import Experiment
from agent.loop.log import read_log, repair_log
from agent.tuners.factory import make_tuner
from testbed.errors import ConfigError

CODEC = ActionCodec()
SCORETUNE = str(Path(sys.executable).with_name("scoretune"))
runner = CliRunner()


def _experiment(out, be, **kw):
    base = dict(method="tpe", backend="sim", cluster="analytic", workload="tiny", steps=5, seed=0)
    base.update(kw)
    cfg = ExperimentConfig(**base)
    return Experiment(cfg, be, tiny_workload(), make_tuner(cfg.method, CODEC, seed=cfg.seed), out)


def _backend(**kw):
    return AnalyticBackend(AnalyticObjective(seed=2), **kw)


def _assert_whole(out: Path, steps: int) -> list:
    """Every step once, in order, and the file parses line by line (no torn bytes left inside)."""
    raw = (out / LOG_NAME).read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(steps + 1))
    return read_log(out)


def test_a_torn_last_line_is_cut_from_the_file_before_the_resume_appends(tmp_path):
    whole = _experiment(tmp_path / "whole", _backend()).run()
    _experiment(tmp_path / "cut", _backend()).run()
    log = tmp_path / "cut" / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]) + lines[3][:25])  # killed while writing step 3
    assert repair_log(tmp_path / "cut") and log.read_bytes() == b"".join(lines[:3])  # cut durably, in place
    log.write_bytes(b"".join(lines[:3]) + lines[3][:25])
    fresh = _backend()
    resumed = _experiment(tmp_path / "cut", fresh).run(resume=True)
    assert fresh.runs == 3  # steps 3, 4, 5: the torn one is measured again, nothing else
    records = _assert_whole(tmp_path / "cut", 5)
    assert [r.action for r in records] == [r.action for r in read_log(tmp_path / "whole")]
    assert resumed["best_metric"] == whole["best_metric"]


def test_a_last_record_without_its_newline_is_kept_and_completed(tmp_path):
    with pytest.raises(Exception, match="killed"):
        _experiment(tmp_path, _backend(crash_on_run=4)).run()
    log = tmp_path / LOG_NAME
    kept = log.read_bytes()
    assert kept.count(b"\n") == 3
    log.write_bytes(kept[:-1])  # the crash came between the record and its newline
    fresh = _backend()
    _experiment(tmp_path, fresh).run(resume=True)
    assert fresh.runs == 3  # step 2 is not measured twice
    _assert_whole(tmp_path, 5)
    assert (tmp_path / LOG_NAME).read_bytes().startswith(kept)


def test_a_corrupt_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    _experiment(tmp_path, _backend()).run()
    log = tmp_path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"step": 2, "broken\n'
    log.write_bytes(b"".join(lines))
    with pytest.raises(ExperimentLogError) as err:
        _experiment(tmp_path, _backend()).run(resume=True)
    assert str(log) in str(err.value) and "row 3" in str(err.value)
    assert log.read_bytes() == b"".join(lines)  # nothing cut, nothing appended


def test_a_duplicated_step_is_an_error(tmp_path):
    _experiment(tmp_path, _backend()).run()
    log = tmp_path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3] + [lines[2]] + lines[3:]))
    with pytest.raises(ExperimentLogError, match="row 4: field step: step 2 is logged twice"):
        read_log(tmp_path)


def test_three_resumes_give_the_same_log_and_summary(tmp_path):
    with pytest.raises(Exception, match="killed"):
        _experiment(tmp_path, _backend(crash_on_run=3)).run()
    first = _experiment(tmp_path, _backend()).run(resume=True)
    log_bytes = (tmp_path / LOG_NAME).read_bytes()
    summary_bytes = (tmp_path / "summary.json").read_bytes()
    for _ in range(3):
        again = _backend()
        assert _experiment(tmp_path, again).run(resume=True) == first
        assert again.runs == 0  # a finished experiment appends nothing
        assert (tmp_path / LOG_NAME).read_bytes() == log_bytes
        assert (tmp_path / "summary.json").read_bytes() == summary_bytes
    _assert_whole(tmp_path, 5)


def test_more_steps_continue_a_finished_experiment_fewer_than_recorded_are_refused(tmp_path):
    _experiment(tmp_path, _backend()).run()
    more = _backend()
    summary = _experiment(tmp_path, more, steps=7).run(resume=True)
    assert more.runs == 2 and summary["steps"] == 7
    assert json.loads((tmp_path / "config.json").read_text())["steps"] == 7
    _assert_whole(tmp_path, 7)
    with pytest.raises(ExperimentLogError, match="steps = 7; it cannot be resumed with 6"):
        _experiment(tmp_path, _backend(), steps=6).run(resume=True)


# --- deterministic failures are fatal, not voided ------------------------------------------------


class _ConfigErrorBackend(AnalyticBackend):
    def run(self, workload, out_dir, *, seed=0):
        self.runs += 1
        raise ConfigError("no node can hold the pod", file="cluster.yaml", field="nodes")


def test_a_backend_config_error_stops_at_once(tmp_path):
    backend = _ConfigErrorBackend(AnalyticObjective(seed=2))
    with pytest.raises(ConfigError, match="cluster.yaml"):
        _experiment(tmp_path, backend, backend="local").run()
    assert backend.runs == 1  # never retried as if the load generator were unhealthy


def test_an_unscoreable_simulator_run_is_not_voided_and_rerun(tmp_path):
    backend = _backend(void_runs=frozenset({1}))
    with pytest.raises(AgentError, match="deterministic"):
        _experiment(tmp_path, backend, backend="sim").run()
    assert backend.runs == 1
    assert not list((tmp_path / "runs").rglob("*.void-*"))


# --- through the command line --------------------------------------------------------------------


def _tune(out, *extra):
    return runner.invoke(app, ["tune", "--backend", "sim", "--workload", "lab", "--method", "hill", "--steps", "3",
                               "--out", str(out), *extra])


@pytest.mark.parametrize(("option", "value", "stored"), [
    ("--method", "random", "'hill'"), ("--backend", "local", "'sim'"), ("--metric", "p99", "'mean'"),
    ("--cluster", "homogeneous-20", "'lab-small'"), ("--workload", "lab-web", "'lab'"), ("--repeats", "2", "1"),
    ("--seed", "7", "0"), ("--max-late-share", "0.5", "0.05"),
])
def test_resume_refuses_an_option_that_contradicts_the_stored_experiment(tmp_path, made_backends, option, value,
                                                                         stored):
    out = tmp_path / "exp"
    assert _tune(out).exit_code == 0
    log_bytes = (out / LOG_NAME).read_bytes()
    result = runner.invoke(app, ["tune", "--resume", str(out), option, value])
    assert result.exit_code == 1, result.output
    said = result.output.replace("\n", "")
    assert said.startswith(f"Error: {option} ") and value in said  # the option and the value given
    assert f"(run with {stored}," in said  # and the stored one
    assert (out / LOG_NAME).read_bytes() == log_bytes


def test_resume_accepts_agreeing_options_and_more_steps(tmp_path, made_backends):
    out = tmp_path / "exp"
    assert _tune(out).exit_code == 0
    result = runner.invoke(app, ["tune", "--resume", str(out), "--method", "hill", "--backend", "sim",
                                 "--cluster", "lab-small", "--metric", "mean", "--steps", "5"])
    assert result.exit_code == 0, result.output
    assert [r.step for r in read_log(out)] == list(range(6))
    result = runner.invoke(app, ["tune", "--resume", str(out), "--steps", "2"])
    assert result.exit_code == 1 and "--steps 2 is fewer than the 5 steps" in result.output.replace("\n", " ")


@pytest.mark.parametrize("content", [b"{oops", b"[1, 2]", b"\xff\xfe\x00", b"", b'{"method": "hill"}',
                                     b'{"method": "hill", "backend": "sim", "cluster": "c", "workload": "w", '
                                     b'"steps": "ten"}'])
def test_resume_of_a_corrupt_config_is_one_line_naming_it(tmp_path, made_backends, content):
    (tmp_path / "config.json").write_bytes(content)
    result = runner.invoke(app, ["tune", "--resume", str(tmp_path)])
    assert result.exit_code == 1
    assert f"{tmp_path / 'config.json'}:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / LOG_NAME).exists()


def test_resume_of_a_directory_without_config(tmp_path, made_backends):
    result = runner.invoke(app, ["tune", "--resume", str(tmp_path)])
    assert result.exit_code == 1 and f"{tmp_path / 'config.json'}: no experiment to resume" in result.output


def test_config_paths_survive_a_change_of_working_directory(tmp_path, monkeypatch, made_backends):
    work = tmp_path / "work"
    (work / "specs").mkdir(parents=True)
    (work / "specs" / "c.yaml").write_text(Path(agent.loop.backends.__file__).parents[2].joinpath(
        "testbed/clusters/lab-small.yaml").read_text())
    from loadgen.workload import write_workload
    from testbed.scenarios import lab_workload

    write_workload(lab_workload(0, duration_s=10.0), work / "wl.parquet")
    monkeypatch.chdir(work)
    assert runner.invoke(app, ["tune", "--backend", "sim", "--workload", "wl.parquet", "--cluster", "specs/c.yaml",
                               "--method", "hill", "--steps", "2", "--out", "exp"]).exit_code == 0
    stored = json.loads((work / "exp" / "config.json").read_text())
    assert stored["cluster"] == str(work / "specs" / "c.yaml")
    assert stored["workload"] == str(work / "wl.parquet")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["tune", "--resume", "work/exp", "--steps", "3"])
    assert result.exit_code == 0, result.output
    assert len(read_log(work / "exp")) == 4


# --- killed with SIGKILL -------------------------------------------------------------------------


SIM_KILL_STEPS = 150


def _tiny_parquet(tmp_path: Path, *, duration_s: float, functions: dict[str, float]) -> Path:
    from loadgen.synth import poisson
    from loadgen.workload import write_workload

    return write_workload(poisson(2.0, duration_s, functions, seed=1), tmp_path / "wl.parquet")


def _kill_mid_step(cmd: list[str], out: Path, env: dict[str, str], timeout_s: float = 240.0) -> None:
    """Start ``cmd``, wait until the log holds a record and a later step's run is under way, kill -9."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the experiment finished before it could be killed"
            done = len(read_log(out)) if (out / LOG_NAME).exists() else 0
            if done >= 1 and (out / "runs" / f"step-{done:03d}").exists():
                break
            time.sleep(0.05)
        else:
            pytest.fail("no step was under way in time")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _check_resumed(out: Path, before: bytes, steps: int) -> None:
    after = (out / LOG_NAME).read_bytes()
    assert after.startswith(before.rsplit(b"\n", 1)[0])  # every record measured before the kill is kept
    records = _assert_whole(out, steps)
    assert len({r.step for r in records}) == len(records) == steps + 1
    assert json.loads((out / "summary.json").read_text())["steps"] == steps


@pytest.mark.slow
def test_sigkill_mid_step_on_the_simulator_then_resume(tmp_path):
    # a simulated step takes milliseconds once numba's cache is warm: enough steps that the
    # experiment cannot finish between two looks at its log (six did, on a fast machine)
    wl = _tiny_parquet(tmp_path, duration_s=20.0, functions={"float-ops": 1.0, "aes": 1.0})
    out = tmp_path / "exp"
    env = dict(os.environ)
    _kill_mid_step([SCORETUNE, "tune", "--backend", "sim", "--workload", str(wl), "--cluster", "lab-small",
                    "--method", "random", "--steps", str(SIM_KILL_STEPS), "--out", str(out)], out, env)
    before = (out / LOG_NAME).read_bytes()
    resumed = subprocess.run([SCORETUNE, "tune", "--resume", str(out)], capture_output=True, text=True, env=env,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    _check_resumed(out, before, SIM_KILL_STEPS)


@pytest.mark.lab
@pytest.mark.slow
def test_sigkill_mid_step_on_the_embedded_lab_then_resume(tmp_path):
    from testbed.local import lab as labmod

    wl = _tiny_parquet(tmp_path, duration_s=3.0, functions={"float-ops": 1.0})
    out = tmp_path / "exp"
    labs = tmp_path / "labs"
    labs.mkdir()
    env = {**os.environ, "TMPDIR": str(labs)}  # the lab's state directory lands here, to be torn down
    cmd = [SCORETUNE, "tune", "--backend", "local", "--workload", str(wl), "--cluster", "lab-small",
           "--method", "random", "--steps", "3", "--out", str(out)]
    try:
        _kill_mid_step(cmd, out, env, timeout_s=600)
        for state in labs.glob("scoretune-local-*"):
            labmod.down(state)  # the killed process could not stop its lab
        before = (out / LOG_NAME).read_bytes()
        resumed = subprocess.run([SCORETUNE, "tune", "--resume", str(out)], capture_output=True, text=True, env=env,
                                 timeout=900)
        assert resumed.returncode == 0, resumed.stderr
        _check_resumed(out, before, 3)
    finally:
        for state in labs.glob("scoretune-local-*"):
            labmod.down(state)
