"""An experiment that stops early never leaves the cluster on a candidate profile: on any
exception, SIGINT or SIGTERM the tuning loop re-applies the reference (or the best it already
applied) on every backend and records it in restore.json."""

from __future__ import annotations

import json
import os
import signal

import pytest
from agent_fixtures import AnalyticBackend, AnalyticObjective, Crash, tiny_workload

from agent.actions import ActionCodec
from agent.loop.config import RESTORE_NAME, ExperimentConfig
from agent.loop.experiment import Experiment
from agent.loop.log import read_log
from agent.tuners.factory import make_tuner

CODEC = ActionCodec()
REFERENCE = CODEC.reference().to_profile()


def _experiment(out, be, **kw):
    cfg = ExperimentConfig(**{"method": "random", "backend": "sim", "cluster": "analytic", "workload": "tiny",
                              "steps": 5, "seed": 0, **kw})
    return Experiment(cfg, be, tiny_workload(), make_tuner(cfg.method, CODEC, seed=cfg.seed), out)


def _restore(out):
    return json.loads((out / RESTORE_NAME).read_text())


def test_an_exception_mid_experiment_re_applies_the_reference_and_records_it(tmp_path):
    be = AnalyticBackend(AnalyticObjective(seed=2), crash_on_run=4)
    with pytest.raises(Crash):
        _experiment(tmp_path, be).run()
    assert be.applied[-2] != REFERENCE  # the crash came while a candidate was applied
    assert be.applied[-1] == REFERENCE
    rec = _restore(tmp_path)
    assert rec["restored"] is True and rec["why"] == "aborted by Crash: killed at run 4"
    assert rec["steps_recorded"] == len(read_log(tmp_path)) == 3


class _Terminated(AnalyticBackend):
    """Sends itself SIGTERM during its ``at``-th run, as a user's ``kill`` would."""

    def __init__(self, *a, at: int, **kw) -> None:
        super().__init__(*a, **kw)
        self.at = at

    def run(self, workload, out_dir, *, seed=0):
        if self.runs + 1 == self.at:
            self.runs += 1
            os.kill(os.getpid(), signal.SIGTERM)
        return super().run(workload, out_dir, seed=seed)


def test_sigterm_restores_the_reference_and_puts_the_handler_back(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    be = _Terminated(AnalyticObjective(seed=2), at=3)
    with pytest.raises(KeyboardInterrupt):
        _experiment(tmp_path, be).run()
    assert be.applied[-1] == REFERENCE
    assert _restore(tmp_path)["why"] == "aborted by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before
    # nothing measured is lost: the steps before the signal are in the log, and a resume finishes
    done = len(read_log(tmp_path))
    assert done == 2
    summary = _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2))).run(resume=True)
    assert [r.step for r in read_log(tmp_path)] == list(range(6)) and summary["steps"] == 5


def test_an_abort_after_the_best_was_applied_keeps_the_best(tmp_path, monkeypatch):
    import agent.loop.experiment

    def broken_plot(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(agent.loop.experiment, "plot_tuning_curve", broken_plot)
    be = AnalyticBackend(AnalyticObjective(seed=2))
    with pytest.raises(OSError, match="No space"):
        _experiment(tmp_path, be).run()
    applied = be.applied[-2]  # what finish applied, then what the restore applied again
    assert be.applied[-1] == applied and applied != REFERENCE
    assert _restore(tmp_path)["restored"] is True


def test_a_finished_experiment_writes_no_restore_record(tmp_path):
    _experiment(tmp_path, AnalyticBackend(AnalyticObjective(seed=2))).run()
    assert not (tmp_path / RESTORE_NAME).exists()


@pytest.mark.lab
@pytest.mark.slow
def test_sigterm_on_the_embedded_lab_restores_the_reference_and_stops_the_lab(tmp_path):
    """The real process tree: ``scoretune tune --backend local`` gets SIGTERM while a candidate's run
    is under way; it re-applies the reference in the lab's scheduler, says so, and tears the lab down."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from loadgen.synth import poisson
    from loadgen.workload import write_workload
    from testbed.local import lab as labmod

    wl = write_workload(poisson(2.0, 3.0, {"float-ops": 1.0}, seed=1), tmp_path / "wl.parquet")
    out, labs = tmp_path / "exp", tmp_path / "labs"
    labs.mkdir()
    env = {**os.environ, "TMPDIR": str(labs)}
    cmd = [str(Path(sys.executable).with_name("scoretune")), "tune", "--backend", "local", "--workload", str(wl),
           "--cluster", "lab-small", "--method", "random", "--steps", "3", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            done = len(read_log(out)) if (out / "experiment.jsonl").exists() else 0
            if done >= 1 and (out / "runs" / f"step-{done:03d}").exists():
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the experiment ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode != 0
        rec = _restore(out)
        assert rec["restored"] is True and rec["why"] == "aborted by SIGTERM", err[-2000:]
        assert "Traceback" not in err
        assert not [s for s in labs.glob("scoretune-local-*") if labmod.running_lab(s) is not None], \
            "the lab was left running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        for state in labs.glob("scoretune-local-*"):
            labmod.down(state)
