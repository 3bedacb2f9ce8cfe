"""Infrastructure faults during a kube run void it instead of being scored: each fault the fake
API models (fakeapi.py) is driven through KubeBackend.run, the run is written as failed with a
``void: ...`` reason and a ``faults`` list in summary.json, and agent.stats.run_health (what the
tuning loop reads) names the fault; the loop reruns the void run and logs why."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakeapi import make_backend, squeeze

from agent.actions import ActionCodec
from agent.loop.config import ExperimentConfig
from agent.loop.experiment import Experiment
from agent.stats import run_health
from agent.tuners.factory import make_tuner
from loadgen.workload import make_workload
from testbed.errors import TestbedError
from testbed.scheduler.config import profile_from_weights

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/scoretune-scheduler"
BINPACK = profile_from_weights({"NodeResourcesFit": 5}, strategy="MostAllocated")


def _workload():
    return make_workload(np.linspace(0.0, 0.6, 6), ["fn-a", "fn-b"] * 3, metadata={"name": "faults"})


def _other_holder(fake):
    fake.lease_holder = "scoretune-scheduler-999999-zzzzz_other"


FAULTS = {
    "scheduler restart": (lambda f: setattr(f, "on_first_request", f.restart_scheduler), {},
                          "scheduler", "the scheduler restarted: restartCount 0 -> 1 (last exit 1: leaderelection lost)"),
    "lease released": (lambda f: setattr(f, "on_first_request", f.release_lease), {},
                       "lease", "the lease has no holder (released; was scoretune-scheduler-"),
    "lease moved": (lambda f: setattr(f, "on_first_request", lambda: _other_holder(f)), {},
                    "lease", "the lease changed holder: scoretune-scheduler-"),
    "pod pending": (lambda f: f.pod_state.update({"fn-a": "pending"}), {"pending_s": 0.2},
                    "pod", "Pending with no node for 0 s: no scheduler answered: scoretune-scheduler is not running"),
    "image pull": (lambda f: f.pod_state.update({"fn-b": "image-pull"}), {},
                   "pod", 'container user-container is ImagePullBackOff: Back-off pulling image "x"'),
    "crash loop": (lambda f: f.pod_state.update({"fn-a": "crash"}), {},
                   "pod", "container user-container is CrashLoopBackOff: back-off 20s restarting failed container"),
    "terminating": (lambda f: f.pod_state.update({"fn-b": "terminating"}), {"terminating_s": 0.2},
                    "pod", "stuck Terminating"),
    "revision": (lambda f: setattr(f, "on_first_request", lambda: f.fail_revision("fn-b")), {},
                 "revision", "the revision is not Ready: ContainerMissing: Unable to fetch image"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_during_the_run_voids_it(fake, tmp_path, name):
    inject, timeouts, kind, words = FAULTS[name]
    backend = make_backend(fake, fault_poll_s=0.1, **timeouts)
    backend.apply(BINPACK)
    inject(fake)
    result = backend.run(_workload(), tmp_path / "run")
    backend.close()
    assert result.failed
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failed"] is True and summary["failure"].startswith("void: ")
    faults = summary["faults"]
    assert [f["kind"] for f in faults][:1] == [kind], faults
    assert words in faults[0]["reason"], faults
    reason = run_health(summary)
    assert reason is not None and words.split(":")[0] in reason
    assert (result.requests["status"] == "ok").all()  # the measurement is kept for inspection, not scored


def test_a_clean_run_records_no_fault(fake, tmp_path):
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.apply(BINPACK)
    result = backend.run(_workload(), tmp_path / "run")
    backend.close()
    assert not result.failed, result.summary.get("failure")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["faults"] == []


def test_apply_waits_while_the_new_pod_is_ready_but_not_yet_leader(fake, backend):
    fake.lease_delay = 3  # the old scheduler still holds the lease for three more reads
    backend.apply(BINPACK)
    assert squeeze(fake.calls).count(f"GET {LEASE}") >= 3
    assert fake.lease_holder.startswith("scoretune-scheduler-") and fake._lease_target is None


def test_a_lease_nobody_takes_after_its_release_fails_the_rollout(fake):
    backend = make_backend(fake, rollout_s=0.3, rollback_s=0.3)
    fake.lease_delay, fake.lease_released = 10_000, True
    with pytest.raises(TestbedError, match=r"to take the lease kube-system/scoretune-scheduler \(held by nobody\)"):
        backend.apply(BINPACK)
    backend.close()


def test_the_tuning_loop_reruns_a_void_run_and_logs_why(fake, tmp_path):
    """Experiment._measure, the loop's one measured run: the first attempt sees the scheduler
    restart and is void (kept as *.void-1 with the reason), the rerun is clean and scored."""
    backend = make_backend(fake, fault_poll_s=0.1)
    fake.on_first_request = fake.restart_scheduler
    fake.drain_after = 1
    cfg = ExperimentConfig(method="random", backend="kube", cluster="", workload="faults", steps=1, max_reruns=2)
    codec = ActionCodec()
    exp = Experiment(cfg, backend, _workload(), make_tuner("random", codec, seed=0), tmp_path)
    metric, facts, voided = exp._measure(codec.reference(), tmp_path / "runs" / "ref-0", seed=0)
    backend.close()
    assert np.isfinite(metric)
    assert set(facts) == {"cold_share", "failure_share", "tail_p99_p50", "tail_mean_p50"}  # the scored run's facts
    assert [v["run_dir"] for v in voided] == ["runs/ref-0.void-1"]
    assert voided[0]["reason"].startswith("the run failed: void: 1 infrastructure fault(s) during the run: scheduler ")
    assert "the scheduler restarted" in voided[0]["reason"]
    assert json.loads((tmp_path / "runs" / "ref-0.void-1" / "summary.json").read_text())["faults"]
    assert json.loads((tmp_path / "runs" / "ref-0" / "summary.json").read_text())["faults"] == []
