"""Infrastructure faults during a kube run void it instead of being scored: each fault the fake
API models (fakeapi.py) is driven through KubeBackend.run, the run is written as failed with a
``void: ...`` reason and a ``faults`` list in summary.json, and agent.stats.run_health (what the
tuning loop reads) names the fault; the loop reruns the void run and logs why."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fakeapi import make_backend, squeeze
from kubernetes import client

from agent.actions import ActionCodec
from agent.loop.config import ExperimentConfig
from agent.loop.experiment import Experiment
from agent.stats import HealthBounds, run_health
from agent.tuners.factory import make_tuner
from loadgen.workload import make_workload
from testbed.errors import TestbedError
from testbed.kube.backend import KubeBackend
from testbed.scheduler.config import profile_from_weights

pytestmark = pytest.mark.integration

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
                    "pod", "Pending with no node for * s: no scheduler answered: scoretune-scheduler is not running"),
    "image pull": (lambda f: f.pod_state.update({"fn-b": "image-pull"}), {},
                   "pod", 'container user-container is ImagePullBackOff: Back-off pulling image "x"'),
    "crash loop": (lambda f: f.pod_state.update({"fn-a": "crash"}), {},
                   "pod", "container user-container is CrashLoopBackOff: back-off 20s restarting failed container"),
    "terminating": (lambda f: f.pod_state.update({"fn-b": "terminating"}), {"terminating_s": 0.2},
                    "pod", "stuck Terminating"),
    "revision": (lambda f: setattr(f, "on_first_request", lambda: f.fail_revision("fn-b")), {},
                 "revision", "the revision is not Ready: ContainerMissing: Unable to fetch image"),
    "function OOMKilled": (lambda f: f.pod_state.update({"fn-a": "oom"}), {},
                           "pod", "a container restarted during the run: restartCount 0 -> 1 (last exit 137: OOMKilled)"),
    "function evicted": (lambda f: f.pod_state.update({"fn-b": "evicted"}), {},
                         "pod", "the pod failed: Evicted: The node was low on resource: memory."),
    "function rejected": (lambda f: f.pod_state.update({"fn-a": "outofcpu"}), {},
                          "pod", "the pod failed: OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu"),
    "activator OOMKilled": (lambda f: setattr(f, "on_first_request", lambda: f.restart_infra(ACTIVATOR)), {},
                            "infra", "the data-plane pod restarted: restartCount 0 -> 1 (last exit 137: OOMKilled)"),
    "activator moved": (lambda f: setattr(f, "on_first_request", lambda: f.move_infra(ACTIVATOR, "node-2")), {},
                        "infra", "the data-plane pod went away during the run (it ran on node-1)"),
    "gateway not ready": (lambda f: setattr(f, "on_first_request", lambda: f.unready_infra(GATEWAY)), {},
                          "infra", "the data-plane pod is no longer Ready"),
    "knative config edited": (lambda f: setattr(f, "on_first_request", lambda: f.knative_config["config-autoscaler"]
                                                .update({"stable-window": "6s"})), {},
                              "knative-config", "changed during the run ("),
    "coredns restart": (lambda f: setattr(f, "on_first_request", lambda: f.restart_infra(COREDNS, "Error", 1)), {},
                        "infra", "the data-plane pod restarted: restartCount 0 -> 1 (last exit 1: Error)"),
}
ACTIVATOR = "activator-6d9b8f7c4-x2x7k"
GATEWAY = "3scale-kourier-gateway-5b8d7f-qq2lm"
COREDNS = "coredns-7db6d8ff4d-9kz2p"


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
    # "*": however long the pod waited before the watch saw it (a slow machine is not a failure)
    assert re.search(re.escape(words).replace(r"\*", r"\d+"), faults[0]["reason"]), faults
    reason = run_health(summary)
    assert reason is not None and re.search(re.escape(words.split(":")[0]).replace(r"\*", r"\d+"), reason)
    assert (result.requests["status"] == "ok").all()  # the measurement is kept for inspection, not scored


def test_a_clean_run_records_no_fault(fake, tmp_path):
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.apply(BINPACK)
    result = backend.run(_workload(), tmp_path / "run")
    backend.close()
    assert not result.failed, result.summary.get("failure")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["faults"] == [] and summary["oom_kills"] == []
    # where the data plane ran is recorded with every run
    assert summary["data_plane"][f"knative-serving/{ACTIVATOR}"] == "node-1"
    assert summary["data_plane"]["kube-flannel/kube-flannel-ds-node-2"] == "node-2"
    assert len(summary["data_plane"]) == 7 + 2 * len(fake.nodes)
    config = summary["knative_config"]
    assert sorted(config) == ["config-autoscaler", "config-deployment", "config-features", "config-network"]
    assert "absent" not in config.values() and len(set(config.values())) == 4


def test_knative_config_changed_between_runs_voids_every_later_run(fake, tmp_path):
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.apply(BINPACK)
    assert not backend.run(_workload(), tmp_path / "first").failed
    del fake.knative_config["config-network"]  # someone deleted (or edited) it between two runs
    result = backend.run(_workload(), tmp_path / "second")
    backend.close()
    assert result.failed
    assert ("knative-config knative-serving/config-network: changed since the experiment's first run ("
            in result.summary["failure"])
    assert "-> absent): the runs are not comparable" in result.summary["failure"]


def test_an_oomkill_is_recorded_by_pod(fake, tmp_path):
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.apply(BINPACK)
    fake.on_first_request = lambda: fake.restart_infra(ACTIVATOR)
    backend.run(_workload(), tmp_path / "run")
    backend.close()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["oom_kills"] == [f"knative-serving/{ACTIVATOR}"]


def test_a_scaled_data_plane_names_the_new_pod_and_no_watch_is_an_empty_list(fake, tmp_path):
    backend = make_backend(fake, fault_poll_s=0.1)
    backend.apply(BINPACK)
    fake.on_first_request = lambda: fake.add_infra_pod("knative-serving", "activator-6d9b8f7c4-new", {"app": "activator"},
                                                       "node-2")
    result = backend.run(_workload(), tmp_path / "run")
    assert result.failed and "a new data-plane pod appeared during the run (on node-2)" in result.summary["failure"]
    unwatched = make_backend(fake, fault_poll_s=0.1)
    unwatched.infra_pods = ()  # a lab whose data plane is not watched: the same change is not a fault
    fake.add_infra_pod("knative-serving", "activator-6d9b8f7c4-third", {"app": "activator"}, "node-2")
    result = unwatched.run(_workload(), tmp_path / "run2")
    backend.close()
    unwatched.close()
    assert not result.failed, result.summary.get("failure")
    with pytest.raises(TestbedError, match="infra_pods: 'Kube_System': expected NAMESPACE"):
        KubeBackend(api_client=client.ApiClient(client.Configuration(host=fake.url)), infra_pods=("Kube_System",))


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
    # the load generator's own health is not under test: a slow machine must not void the rerun
    cfg = ExperimentConfig(method="random", backend="kube", cluster="", workload="faults", steps=1, max_reruns=2,
                           health=HealthBounds(max_dispatch_lag_p99_s=1e9, max_late_share=1.0))
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
