"""reset() brings every node's function-image cache to the declared state before each step (one
image-state pod per schedulable node, rendered by render.image_state_pod, run by the fake's
kubelet on its per-node cache), and the next run's summary.json records the state it started
from. The pod itself passes Kubernetes 1.36's schema."""

from __future__ import annotations

import json

import kubernetes_validate
import numpy as np
import pytest
from fakeapi import make_backend

from loadgen.workload import make_workload
from testbed.errors import TestbedError
from testbed.kube.backend import ImageState
from testbed.kube.render import IMAGE_STATE_SCRIPT, image_state_pod
from testbed.kube.versions import KUBERNETES_VERSION

A = "registry.example.com/scoretune/fn-a:0.1.0"
B = "registry.example.com/scoretune/fn-b:0.1.0"
OLD = "ghcr.io/scoretune/fn-float-ops:0.1.0"  # not a function of this lab: never touched


def test_the_image_state_pod_is_a_valid_pod():
    pod = image_state_pod("scoretune-images-1-0", "worker-1", images=[A, B], pull=[A], remove=[B], token="1")
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    spec = pod["spec"]
    assert spec["nodeName"] == "worker-1" and "schedulerName" not in spec  # bound directly: no scheduler runs
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env == {"SCORETUNE_IMAGES": f"{A} {B}", "SCORETUNE_PULL": A, "SCORETUNE_REMOVE": B}
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {"/usr/bin/crictl", "/run/containerd/containerd.sock"}
    # remove first, pull only what is missing (a warm node contacts no registry), then report
    assert IMAGE_STATE_SCRIPT.index("rmi") < IMAGE_STATE_SCRIPT.index("pull") < IMAGE_STATE_SCRIPT.index('"present $i"')


def test_reset_makes_every_node_warm_and_the_run_records_it(fake, tmp_path):
    fake.node_images["node-2"].add(A)
    backend = make_backend(fake)
    backend.reset()
    assert fake.node_images == {"node-1": {OLD, A, B}, "node-2": {OLD, A, B}}
    assert [p["spec"]["nodeName"] for p in fake.image_pods] == ["node-1", "node-2"]
    assert not [p for p in fake.pods if p.startswith("scoretune-images-")]  # deleted before the run
    result = backend.run(make_workload(np.linspace(0.0, 0.4, 4), ["fn-a", "fn-b"] * 2), tmp_path / "run")
    backend.close()
    assert not result.failed, result.summary.get("failure")
    state = json.loads((tmp_path / "run" / "summary.json").read_text())["image_state"]
    assert state["declared"] == {"enforce": True, "warm": "every other schedulable node", "cold_nodes": []}
    assert state["nodes"] == {"node-1": [A, B], "node-2": [A, B]} and state["images"] == [A, B]
    assert state["seconds"] >= 0


def test_reset_purges_the_declared_cold_nodes_on_every_step(fake):
    backend = make_backend(fake, drain_s=5.0)
    backend.image_state = ImageState(cold_nodes=("node-2",))
    backend.reset()
    assert fake.node_images == {"node-1": {OLD, A, B}, "node-2": {OLD}}
    fake.node_images["node-2"].add(B)  # a step's pod pulled fn-b onto the cold node
    backend.reset()
    assert fake.node_images["node-2"] == {OLD}
    assert backend._image_record["nodes"] == {"node-1": [A, B], "node-2": []}
    backend.close()


def test_an_image_that_cannot_be_pulled_back_fails_the_reset_with_what_to_do(fake):
    fake.unpullable.add(B)
    backend = make_backend(fake)
    with pytest.raises(TestbedError) as err:
        backend.reset()
    backend.close()
    msg = str(err.value)
    assert "node-1 could not pull registry.example.com/scoretune/fn-b:0.1.0" in msg
    assert "re-run ansible/functions.yml" in msg and "push/prebuilt images for cold nodes" in msg
    assert not [p for p in fake.pods if p.startswith("scoretune-images-")]


def test_an_unknown_cold_node_is_named(fake):
    backend = make_backend(fake)
    backend.image_state = ImageState(cold_nodes=("node-9",))
    with pytest.raises(TestbedError, match=r"cold node\(s\) \['node-9'\] are not schedulable nodes .*node-1"):
        backend.reset()
    backend.close()
    assert fake.image_pods == []


def test_image_state_off_leaves_the_caches_and_says_so(fake, tmp_path):
    backend = make_backend(fake)
    backend.image_state = ImageState(enforce=False)
    backend.reset()
    assert fake.image_pods == [] and fake.node_images["node-1"] == {OLD}
    assert backend._image_record["nodes"] is None and backend._image_record["declared"]["enforce"] is False
    backend.close()
