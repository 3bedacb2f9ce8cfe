"""OpenWhisk's preflight (testbed/kube/openwhisk_preflight.py, issue 45 item 6): a core node
too small for the core components beside the scheduler under test, and invokers whose pools admit
more action memory than their nodes hold, are each one line naming the node and the numbers,
read from the cluster's own Node objects (the fake API server's here) before the chart goes on."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, write_kubeconfig
from typer.testing import CliRunner

from agent.cli import app
from testbed.kube.openwhisk_preflight import preflight_problems


def _node(name: str, memory: str) -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": memory}}}


def test_five_machines_that_fit_pass():
    nodes = [_node("cp", "15Gi"), *(_node(f"w{i}", "8Gi") for i in range(3))]
    assert preflight_problems(nodes, core_nodes=["cp"], invoker_nodes=["w0", "w1", "w2"], user_memory_mib=4096) == []


def test_a_small_core_node_and_overcommitted_invokers_are_named_with_their_numbers():
    nodes = [_node("cp", "3996Mi"), *(_node(f"w{i}", "4Gi") for i in range(3))]
    problems = preflight_problems(nodes, core_nodes=["cp"], invoker_nodes=["w0", "w1", "w2"], user_memory_mib=4096)
    assert len(problems) == 2
    assert problems[0].startswith("node cp (OpenWhisk core): 3996 MiB allocatable < 8192 MiB")
    # 3 x (4096 - 768) = 9984 MiB hold; 3 x 4096 = 12288 MiB admitted
    assert problems[1].startswith("invoker nodes: 3 x 4096 MiB user memory = 12288 MiB > 9984 MiB they hold")
    assert problems[1].endswith("set openwhisk_user_memory to at most 3328m")
    assert preflight_problems(nodes, core_nodes=["cp"], invoker_nodes=["w0", "w1", "w2"],
                              user_memory_mib=3328)[1:] == []


def test_a_node_the_cluster_does_not_have_is_named():
    problems = preflight_problems([_node("cp", "16Gi")], core_nodes=["cp"], invoker_nodes=["w9"], user_memory_mib=512)
    assert problems == ["node w9: not a node of the cluster (nodes: cp)"]


@pytest.mark.integration
def test_the_preflight_reads_the_clusters_nodes(tmp_path):
    fake = FakeKube().start()
    try:
        kubeconfig = write_kubeconfig(fake, tmp_path)
        core, *workers = fake.nodes
        args = ["kube", "openwhisk-preflight", "--kubeconfig", str(kubeconfig), "--core-nodes", core,
                "--invoker-nodes", ",".join(workers)]
        ok = CliRunner().invoke(app, [*args, "--user-memory", "2048m"])
        assert ok.exit_code == 0, ok.output
        fake.node_memory[core] = "4Gi"
        bad = CliRunner().invoke(app, [*args, "--user-memory", "8g"])
        assert bad.exit_code == 1
        lines = [x for x in bad.output.splitlines() if x.startswith("scoretune:")]
        assert lines[0].startswith(f"scoretune: node {core} (OpenWhisk core): 4096 MiB allocatable")
        assert lines[1].startswith(f"scoretune: invoker nodes: {len(workers)} x 8192 MiB user memory")
        wrong = CliRunner().invoke(app, [*args, "--user-memory", "lots"])
        assert wrong.exit_code == 2 and "not a memory size: 'lots'" in wrong.output
    finally:
        fake.stop()
