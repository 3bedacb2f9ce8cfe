"""``scoretune tune --backend kube`` end to end against the fake API server (a stand-in for a real
cluster): the agent's loop drives KubeBackend through reset -> apply -> run for every step, and
exports the best configuration. Slow (a Locust replay per step): ``make test-all``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fakeapi import squeeze, write_kubeconfig
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import make_workload, write_workload

CMS = "/api/v1/namespaces/kube-system/configmaps"
DEP = "/apis/apps/v1/namespaces/kube-system/deployments/scoretune-scheduler"


def _tune(fake, tmp_path, functions: list[str], method: str, out):
    """`tune --backend kube` on the fake for two steps, a 10-request workload over ``functions``."""
    fake.drain_after = 1  # the functions are back at zero whenever reset() looks
    kubeconfig = write_kubeconfig(fake, tmp_path)
    write_workload(make_workload(np.linspace(0.0, 1.0, 10), functions * 5, metadata={"name": "e2e"}),
                   tmp_path / "w.parquet")
    return CliRunner().invoke(app, [
        "tune", "--backend", "kube", "--kubeconfig", str(kubeconfig), "--ingress-url", fake.url,
        "--workload", str(tmp_path / "w.parquet"), "--method", method, "--steps", "2", "--out", str(out)])


@pytest.mark.slow
def test_tune_backend_kube_runs_the_loop(fake, tmp_path):
    out = tmp_path / "out"
    result = _tune(fake, tmp_path, ["fn-a", "fn-b"], "random", out)
    assert result.exit_code == 0, result.output + str(result.exception)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "kube"
    assert (out / "best-scheduler-config.yaml").exists()
    runs = sorted(p for p in (out / "runs").rglob("summary.json"))
    assert len(runs) >= 3  # the reference and two steps
    assert all(not json.loads(p.read_text())["failed"] for p in runs)
    # two new configurations were rolled out (the reference is the one already running), each
    # from its own immutable ConfigMap
    calls = squeeze(fake.calls)
    assert calls.count(f"PATCH {DEP}") >= 2 and calls.count(f"POST {CMS}") >= 2
    assert all(cm["immutable"] is True for cm in fake.configmaps.values())


def test_cold_nodes_of_tune_reach_the_kube_backends_reset(fake, tmp_path):
    """``tune --cold-nodes``'s stored options build the backend whose reset() empties exactly those
    nodes' function-image caches (the fake kubelet's), and fills every other node's."""
    from agent.loop.backends import KubeOptions, make_backend

    fake.drain_after = 1
    options = KubeOptions(kubeconfig=str(write_kubeconfig(fake, tmp_path)), ingress_url=fake.url, cold_nodes=["node-2"])
    backend = make_backend("kube", None, kube=options)
    try:
        images = {fake.pod_image(fn) for fn in ("fn-a", "fn-b")}  # what the fake lab's pods run
        for image in images:
            fake.cri["node-2"].pull(image)  # a previous step left them cached on the cold node
        backend.reset()
        assert not fake.held("node-2") & images
        assert fake.held("node-1") >= images
    finally:
        backend.close()


def test_the_load_generator_options_of_tune_reach_the_kube_backend(fake, tmp_path):
    """``tune --remote-workers/--master-bind-host/--master-port/--workers-wait-s`` are stored with
    the experiment and build the backend that hands them to the replay."""
    from agent.cli.tune import TuneArgs, tune_config
    from agent.loop.backends import KubeOptions, make_backend

    args = TuneArgs(backend="kube", workload="w.parquet", method="random", kubeconfig=str(write_kubeconfig(fake, tmp_path)),
                    ingress_url=fake.url, remote_workers=2, master_bind_host="10.0.0.20", master_port=5600,
                    workers_wait_s=45.0, fault_wait_s=5.0)
    config = tune_config(args, set())
    assert config.fault_wait_s == 5.0
    backend = make_backend("kube", None, kube=KubeOptions(**config.backend_options))
    try:
        assert (backend.remote_workers, backend.master_bind_host, backend.master_port, backend.workers_wait_s) == (
            2, "10.0.0.20", 5600, 45.0)
    finally:
        backend.close()


def test_a_bad_master_address_is_one_line(tmp_path):
    result = CliRunner().invoke(app, ["tune", "--backend", "kube", "--workload", "lab", "--method", "random",
                                      "--master-bind-host", "not an address", "--out", str(tmp_path / "o")])
    assert result.exit_code != 0 and "--master-bind-host: 'not an address' is not an IP address or a host name" \
        in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_tune_backend_kube_with_the_twin(tmp_path):
    """``--method twin`` on the kube backend: the twin starts from the live Node objects (through the
    importer), refits on each run's per-node breakdown (the served-by header) and logs its fits."""
    from fakeapi import FakeKube

    from testbed.kube.render import scheduler_objects
    from testbed.scheduler.config import default_profile

    fake = FakeKube(functions=("aes", "float-ops")).start()  # the twin simulates the suite's functions
    fake.install_scheduler(scheduler_objects(default_profile("scoretune-scheduler"))[-2:])
    try:
        _tune_twin(fake, tmp_path)
    finally:
        fake.stop()


def _tune_twin(fake, tmp_path):
    out = tmp_path / "out"
    result = _tune(fake, tmp_path, ["aes", "float-ops"], "twin", out)
    assert result.exit_code == 0, result.output + str(result.exception)
    assert (out / "cluster-view" / "nodes.json").exists()
    fits = json.loads((out / "twin-fits.json").read_text())
    assert len(fits) == 3 and all(set(f["speed"]) == set(fits[0]["speed"]) for f in fits)
    ref = json.loads((out / "runs" / "step-000" / "cand-0" / "summary.json").read_text())
    assert sum(c["requests"] for c in ref["where"]["nodes"].values()) + ref["where"]["unserved"] == ref["count"]
    placed = pd.read_parquet(out / "runs" / "step-000" / "cand-0" / "placements.parquet")["node"].notna().sum()
    assert sum(c["pods"] for c in ref["where"]["nodes"].values()) == placed > 0  # not the load generator's section
