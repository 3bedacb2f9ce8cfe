"""Image-pull times from the kubelet's ``Pulled`` events (testbed.kube.pulls), on the messages
kubelets write (kubernetes ``pkg/kubelet/images/image_manager.go``) and on a run against the fake
API server whose kubelets record them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.workload import make_workload
from testbed.kube.pulls import container_of, go_duration, pull_seconds, pulls_of
from testbed.scheduler.config import profile_from_weights


@pytest.mark.parametrize(("text", "seconds"), [
    ("1.234s", 1.234), ("850ms", 0.85), ("1m2.5s", 62.5), ("2h0m1s", 7201.0), ("12µs", 12e-6), ("0s", 0.0),
])
def test_go_durations(text, seconds):
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1.2", "s", "1.2sx", "-1s", "1 s"])
def test_what_is_not_a_go_duration(text):
    assert go_duration(text) is None


@pytest.mark.parametrize(("message", "seconds"), [
    # kubelet >= 1.30: pull, pull including the wait for the serial puller, and the size
    ('Successfully pulled image "ghcr.io/scoretune/fn-aes:0.1.0" in 3.761s (14.002s including waiting). '
     "Image size: 58720256 bytes.", 3.761),
    # kubelet 1.28-1.29
    ('Successfully pulled image "docker.io/library/nginx:1.25" in 1m2.5s (1m2.5s including waiting)', 62.5),
    # kubelet before 1.28
    ('Successfully pulled image "busybox" in 850.123ms', 0.850123),
    ('Container image "ghcr.io/scoretune/fn-aes@sha256:ab12" already present on machine', 0.0),
    ('Pulling image "busybox"', None),
    ('Successfully pulled image "busybox" in soon', None),
])
def test_the_pull_of_a_pulled_message(message, seconds):
    got = pull_seconds(message)
    assert got == (pytest.approx(seconds) if seconds is not None else None)


def _event(pod, container, message, t="2026-12-02T10:00:01Z", reason="Pulled"):
    return {"reason": reason, "message": message, "firstTimestamp": t,
            "involvedObject": {"kind": "Pod", "name": pod, "fieldPath": f"spec.containers{{{container}}}"}}


def test_the_function_container_first_pull_of_the_run_pods_only():
    events = [
        _event("fn-a-1", "queue-proxy", 'Successfully pulled image "q" in 9s (9s including waiting)'),
        _event("fn-a-1", "user-container", 'Successfully pulled image "a" in 2s (2s including waiting)'),
        # the same container after a restart: the image is present now; the cold start pulled
        _event("fn-a-1", "user-container", 'Container image "a" already present on machine', t="2026-12-02T10:05:00Z"),
        _event("fn-b-1", "user-container", 'Container image "b" already present on machine'),
        _event("other-1", "user-container", 'Successfully pulled image "o" in 5s'),
        _event("fn-c-1", "user-container", "Back-off pulling image", reason="BackOff"),
    ]
    got = pulls_of(events, ["fn-a-1", "fn-b-1", "fn-c-1"], "user-container")
    assert got == {"fn-a-1": 2.0, "fn-b-1": 0.0}
    assert container_of("spec.containers{user-action}") == "user-action"
    assert container_of("spec.initContainers{setup}") == "setup" and container_of(None) is None


@pytest.mark.integration
def test_a_run_whose_event_list_fails_keeps_its_pulls_unknown_and_counts(fake, backend, tmp_path):
    backend.apply(profile_from_weights({"NodeResourcesFit": 5}, strategy="MostAllocated"))
    fake.fail_paths["GET /api/v1/namespaces/default/events"] = (403, 'events is forbidden: User "x" cannot list')
    workload = make_workload(np.linspace(0.0, 2.0, 20), ["fn-a", "fn-b"] * 10, metadata={"name": "smoke"})
    result = backend.run(workload, tmp_path / "run", seed=1)
    assert not result.failed, result.summary.get("failure")
    assert all(math.isnan(v) for v in result.placements["image_pull_s"])
    assert "image-pull times unknown" in result.summary["image_pulls"] and "forbidden" in result.summary["image_pulls"]
