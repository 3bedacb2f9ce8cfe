"""reset() brings every node's function-image cache to the declared state before each step (one
image-state pod per schedulable node, rendered by render.image_state_pod, whose script the fake's
kubelet runs in sh against a containerd-like store: fakecri), and the next run's summary.json
records the state it started from. Knative resolves tags to digests, so nodes hold what the pods
ran as ``repo@sha256:...`` and no tag: purges go by repository, and warm means the reference the
pods run. The pod itself passes Kubernetes 1.36's schema."""

from __future__ import annotations

import json

import kubernetes_validate
import numpy as np
import pytest
from fakeapi import OLD_IMAGE, image_of, make_backend
from fakecri import resolved

from loadgen.workload import make_workload
from testbed.errors import LabFault, TestbedError
from testbed.kube.backend import ImageState
from testbed.kube.images import normalize, parse_report, repository, split_reference
from testbed.kube.render import IMAGE_STATE_SCRIPT, image_state_pod
from testbed.kube.versions import KUBERNETES_VERSION

A, B = image_of("fn-a"), image_of("fn-b")
REPO_A, REPO_B = repository(A), repository(B)
A_RUNS, B_RUNS = resolved(A), resolved(B)  # what Knative's Revisions (and so the pods) run


def test_references_normalize_as_containerd_stores_them():
    # github.com/distribution/reference normalize.go: docker.io, library/, latest
    assert normalize("busybox") == "docker.io/library/busybox:latest"
    assert normalize("index.docker.io/me/fn:1") == "docker.io/me/fn:1"
    assert normalize("localhost/fn") == "localhost/fn:latest"
    assert split_reference("registry:5000/a/b:1@sha256:ab") == ("registry:5000/a/b", "1", "sha256:ab")
    assert split_reference("registry:5000/a/b@sha256:ab") == ("registry:5000/a/b", None, "sha256:ab")
    assert repository("registry:5000/a/b") == "registry:5000/a/b"
    assert repository(A_RUNS) == repository(A) == "registry.example.com/scoretune/fn-a"


def test_the_image_state_pod_is_a_valid_pod():
    pod = image_state_pod("scoretune-images-1-0", "worker-1", repositories=[REPO_A, REPO_B], pull=[A_RUNS],
                          purge=[REPO_B], token="1")
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    spec = pod["spec"]
    assert spec["nodeName"] == "worker-1" and "schedulerName" not in spec  # bound directly: no scheduler runs
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env == {"SCORETUNE_REPOS": f"{REPO_A} {REPO_B}", "SCORETUNE_PULL": A_RUNS, "SCORETUNE_PURGE": REPO_B}
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {"/usr/local/bin/crictl", "/run/containerd/containerd.sock"}
    # purge by image ID first, pull only what is missing (a warm node contacts no registry), then report
    assert IMAGE_STATE_SCRIPT.index("rmi") < IMAGE_STATE_SCRIPT.index("pull") < IMAGE_STATE_SCRIPT.index('"present $i"')


@pytest.mark.integration
def test_reset_makes_every_node_warm_with_what_the_pods_run_and_the_run_records_it(fake, tmp_path):
    fake.cri["node-2"].pull(A)  # by tag: the tag is not what the pods run
    backend = make_backend(fake)
    backend.reset()
    for node in ("node-1", "node-2"):
        assert {A_RUNS, B_RUNS} <= fake.held(node)  # the digests the kubelet will look for
        assert normalize(OLD_IMAGE) in fake.held(node)  # not a function image: never touched
    assert [p["spec"]["nodeName"] for p in fake.image_pods] == ["node-1", "node-2"]
    assert not [p for p in fake.pods if p.startswith("scoretune-images-")]  # deleted before the run
    result = backend.run(make_workload(np.linspace(0.0, 0.4, 4), ["fn-a", "fn-b"] * 2), tmp_path / "run")
    backend.close()
    assert not result.failed, result.summary.get("failure")
    state = json.loads((tmp_path / "run" / "summary.json").read_text())["image_state"]
    assert state["declared"] == {"enforce": True, "warm": "every other schedulable node", "cold_nodes": []}
    assert state["images"] == [{"function": "fn-a", "image": A, "runs": A_RUNS},
                               {"function": "fn-b", "image": B, "runs": B_RUNS}]
    assert state["nodes"]["node-1"] == sorted([A_RUNS, B_RUNS])
    assert state["nodes"]["node-2"] == sorted([A_RUNS, B_RUNS, normalize(A)])
    assert state["seconds"] >= 0


@pytest.mark.integration
def test_a_cold_node_loses_the_digest_a_knative_pod_pulled_there(fake, tmp_path):
    """The defect a purge by tag had: the pods of a step pull ``repo@sha256:...`` (Knative resolved
    the tag), ``crictl rmi repo:tag`` finds no such image, ``inspecti repo:tag`` says absent, and
    the node keeps the image ImageLocality counts. Purged by repository, nothing of it remains."""
    fake.drain_after = 1
    fake.node_of = lambda fn: "node-2"  # every pod of the step lands on the cold node
    backend = make_backend(fake, drain_s=5.0)
    backend.image_state = ImageState(cold_nodes=("node-2",))
    backend.reset()
    assert not fake.held("node-2") & {A_RUNS, B_RUNS, normalize(A), normalize(B)}
    backend.run(make_workload(np.linspace(0.0, 0.4, 4), ["fn-a", "fn-b"] * 2), tmp_path / "run")
    assert {A_RUNS, B_RUNS} <= fake.held("node-2")  # the kubelet pulled the digests, no tag
    assert normalize(A) not in fake.held("node-2")
    fake.cri["node-2"].pull(B)  # and someone pulled a tag by hand: the same image, one more reference
    backend.reset()
    backend.close()
    assert fake.cri["node-2"].repositories() == {repository(OLD_IMAGE)}
    names = {n for img in fake.cri["node-2"].images for n in (*img["tags"], *img["digests"])}
    assert names == {normalize(OLD_IMAGE), resolved(OLD_IMAGE)}
    assert backend._image_record["nodes"] == {"node-1": sorted([A_RUNS, B_RUNS]), "node-2": []}


def test_a_purge_the_runtime_refuses_is_a_lab_fault_naming_node_and_image(fake):
    fake.cri["node-2"].pull(A_RUNS)
    fake.cri["node-2"].rmi_refused.add(REPO_A)
    backend = make_backend(fake)
    backend.image_state = ImageState(cold_nodes=("node-2",))
    with pytest.raises(LabFault) as err:
        backend.reset()
    backend.close()
    msg = str(err.value)
    image_id = fake.cri["node-2"].find(A_RUNS)["id"]
    assert f"node-2 could not remove image {image_id} of {REPO_A}" in msg
    assert f"node-2 still holds {A_RUNS} (declared cold)" in msg


def test_without_digest_resolution_warm_means_the_tag(fake):
    fake.resolve_digests = False  # the registry is in registries-skipping-tag-resolving
    backend = make_backend(fake)
    backend.reset()
    backend.close()
    assert {normalize(A), normalize(B)} <= fake.held("node-1")
    assert backend._image_record["images"][0]["runs"] == normalize(A)


def test_an_image_that_cannot_be_pulled_back_fails_the_reset_with_what_to_do(fake):
    fake.unpullable.add(REPO_B)
    backend = make_backend(fake)
    with pytest.raises(LabFault) as err:
        backend.reset()
    backend.close()
    msg = str(err.value)
    assert f"node-1 could not pull {B_RUNS}" in msg
    assert "re-run ansible/functions.yml" in msg and "push/prebuilt images for cold nodes" in msg
    assert not [p for p in fake.pods if p.startswith("scoretune-images-")]


def test_a_report_that_stops_early_is_not_read_as_a_clean_node():
    assert parse_report(f"present {A_RUNS}\n").complete is False
    rec = parse_report(f"present {A_RUNS}\nholds {REPO_A} {A_RUNS}\npurge-failed {REPO_A} sha256:1\ndone\n")
    assert rec.complete and rec.holds == {REPO_A: [A_RUNS]} and rec.purge_failed == [(REPO_A, "sha256:1")]


def test_an_unknown_cold_node_is_named(fake):
    backend = make_backend(fake)
    backend.image_state = ImageState(cold_nodes=("node-9",))
    with pytest.raises(TestbedError, match=r"cold node\(s\) \['node-9'\] are not schedulable nodes .*node-1"):
        backend.reset()
    backend.close()
    assert fake.image_pods == []


def test_image_state_off_leaves_the_caches_and_says_so(fake):
    backend = make_backend(fake)
    backend.image_state = ImageState(enforce=False)
    backend.reset()
    assert fake.image_pods == [] and fake.held("node-1") == {normalize(OLD_IMAGE), resolved(OLD_IMAGE)}
    assert backend._image_record["nodes"] is None and backend._image_record["declared"]["enforce"] is False
    backend.close()
