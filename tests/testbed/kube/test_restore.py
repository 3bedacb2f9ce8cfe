"""Never leave the cluster on a candidate profile: KubeBackend.restore and the restoring() guard
the tuning loop wraps its steps in (on an exception, SIGINT or SIGTERM the fallback profile is
applied again and the record says what the cluster runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.kube.render import CONFIG_KEY, config_text, mounted_config_map, scheduler_config
from testbed.scheduler.config import default_profile, profile_from_weights

REFERENCE = default_profile("scoretune-scheduler")
CANDIDATE = profile_from_weights({"NodeResourcesFit": 9}, strategy="MostAllocated")


def _running(fake) -> str:
    """The configuration the Deployment's config volume mounts (its own immutable ConfigMap)."""
    name = mounted_config_map(fake.deployments["scoretune-scheduler"]["spec"]["template"]["spec"])
    return fake.configmaps[name]["data"][CONFIG_KEY]


def test_an_exception_in_the_loop_restores_the_fallback(fake, backend):
    with pytest.raises(RuntimeError, match="tuner blew up"), backend.restoring(lambda: REFERENCE):
        backend.apply(CANDIDATE)
        assert _running(fake) == config_text(scheduler_config(CANDIDATE))
        raise RuntimeError("tuner blew up")
    assert _running(fake) == config_text(scheduler_config(REFERENCE))
    rec = backend.last_restore
    assert rec["restored"] is True and rec["why"] == "aborted by RuntimeError: tuner blew up"
    assert rec["state"].startswith("the scheduler runs configuration ")


def test_sigterm_restores_and_puts_the_old_handler_back(fake, backend):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), backend.restoring(lambda: REFERENCE):
        backend.apply(CANDIDATE)
        os.kill(os.getpid(), signal.SIGTERM)
    assert _running(fake) == config_text(scheduler_config(REFERENCE))
    assert backend.last_restore["why"] == "aborted by SIGTERM" and backend.last_restore["restored"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_restore_that_fails_says_what_the_cluster_runs(fake, backend):
    backend.apply(CANDIDATE)
    fake.fail_paths["PATCH /apis/apps/v1/namespaces/kube-system/deployments/scoretune-scheduler"] = (500, "etcd down")
    rec = backend.restore(REFERENCE, why="test")
    assert rec["restored"] is False and "etcd down" in rec["error"]
    assert rec["state"].startswith("the scheduler may still run configuration ")


def test_a_second_signal_while_restoring_aborts_at_once_naming_the_state(fake, tmp_path):
    """In a child process: SIGINT, then SIGINT again while the restore waits for a rollout that
    never completes; the child exits 130 at once and says what the cluster may still run."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, threading, time
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fakeapi import FakeKube, make_backend
        from testbed.kube.render import scheduler_objects
        from testbed.scheduler.config import default_profile, profile_from_weights
        fake = FakeKube().start()
        fake.install_scheduler(scheduler_objects(default_profile("scoretune-scheduler"))[-2:])
        b = make_backend(fake, rollout_s=60.0, rollback_s=60.0)
        b.apply(profile_from_weights({{"NodeResourcesFit": 9}}))
        fake.outcome = lambda text: "pending"  # the restore's rollout never gets ready
        def twice():
            time.sleep(0.3); os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0); os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=twice, daemon=True).start()
        with b.restoring(lambda: default_profile("scoretune-scheduler")):
            time.sleep(30)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, proc.stderr[-2000:]
    assert "SIGINT again: aborting the restore; the scheduler may still run configuration " in proc.stderr
