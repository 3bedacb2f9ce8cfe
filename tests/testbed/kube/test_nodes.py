"""Node health before and after every run: a node that is not Ready, under pressure, cordoned,
gone or new changes the cluster the profile is scored on, so reset() refuses to prepare the step
(LabFault: the loop voids it and retries) and a change during the run voids the run."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import make_backend

from loadgen.workload import make_workload
from testbed.errors import LabFault
from testbed.kube.nodes import NodeState, health_problems, node_state

HEALTHY = {"node-1": True, "node-2": True}


def _state(name: str, **kw) -> NodeState:
    return NodeState(**{"name": name, "ready": True, "schedulable": True, "pressure": (), **kw})


def test_every_difference_from_the_baseline_is_named():
    now = [_state("node-1", ready=False, not_ready_why="Ready is Unknown (NodeStatusUnknown)"),
           _state("node-3"), _state("node-4", pressure=("DiskPressure",))]
    problems = health_problems({"node-1": True, "node-2": True, "node-4": True}, now)
    assert problems == [("node-2", "left the cluster"), ("node-3", "joined the cluster during the experiment"),
                        ("node-1", "is not Ready: Ready is Unknown (NodeStatusUnknown)"),
                        ("node-4", "reports DiskPressure")]
    assert health_problems(HEALTHY, [_state("node-1"), _state("node-2", schedulable=False)]) == [
        ("node-2", "was cordoned or tainted NoSchedule/NoExecute")]
    assert health_problems({"cp": False}, [_state("cp", schedulable=False)]) == []  # a tainted control plane stays so


def test_node_state_reads_the_kubelets_conditions():
    node = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                                       "message": "container runtime is down"},
                                      {"type": "MemoryPressure", "status": "True"},
                                      {"type": "DiskPressure", "status": "False"}]}}
    st = node_state(node)
    assert st == NodeState("n", False, False, ("MemoryPressure",),
                           "Ready is False (KubeletNotReady: container runtime is down)")
    assert node_state({"metadata": {"name": "m"}, "status": {}}).not_ready_why == "Ready is missing"


@pytest.mark.integration
def test_reset_refuses_a_node_that_went_not_ready_naming_it(fake):
    backend = make_backend(fake)
    backend.reset()  # the baseline: both nodes Ready and schedulable
    assert backend.node_baseline == HEALTHY
    fake.set_condition("node-2", "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    with pytest.raises(LabFault, match=r"^node health: node node-2 is not Ready: Ready is Unknown \(NodeStatusUnknown: "
                                       r"Kubelet stopped posting node status.\)$"):
        backend.reset()
    fake.heal("node-2")
    backend.reset()  # the lab came back: the step can be prepared
    backend.close()


def test_reset_refuses_a_cordoned_node_a_full_disk_and_a_missing_node(fake):
    backend = make_backend(fake)
    backend.reset()
    fake.cordoned.add("node-1")
    fake.set_condition("node-2", "DiskPressure", "True", "KubeletHasDiskPressure")
    with pytest.raises(LabFault) as err:
        backend.reset()
    assert str(err.value) == ("node health: node node-1 was cordoned or tainted NoSchedule/NoExecute; "
                              "node node-2 reports DiskPressure")
    fake.heal("node-1")
    fake.heal("node-2")
    fake.nodes = ("node-1",)  # node-2 was deleted (kubectl delete node, or a scale-in)
    with pytest.raises(LabFault, match=r"node node-2 left the cluster"):
        backend.reset()
    backend.close()


@pytest.mark.integration
def test_a_node_lost_during_the_run_voids_the_run(fake, tmp_path):
    backend = make_backend(fake)
    backend.reset()
    fake.on_first_request = lambda: fake.set_condition("node-2", "Ready", "Unknown", "NodeStatusUnknown")
    wl = make_workload(np.linspace(0.0, 0.4, 4), ["fn-a", "fn-b"] * 2)
    result = backend.run(wl, tmp_path / "run")
    backend.close()
    assert result.failed
    assert result.summary["failure"].startswith("void: 1 infrastructure fault(s) during the run: node node-2: "
                                                "is not Ready: Ready is Unknown (NodeStatusUnknown)")
