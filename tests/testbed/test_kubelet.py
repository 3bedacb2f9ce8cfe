"""testbed/kubelet.py: when the scheduler learns of a pulled image (the kubelet's two loops), and
which images ``status.images`` lists (nodeStatusMaxImages)."""

from __future__ import annotations

import pytest

from testbed.kubelet import KubeletTiming, phase_s, reported_at, reported_images


def test_a_pull_is_reported_at_the_status_sync_after_the_image_list_refresh():
    t = KubeletTiming()
    for node in ("n-0", "n-1", "big-0", "small-1"):
        lp, sp = phase_s(node, 30.0, "images"), phase_s(node, 10.0, "status")
        assert 0 <= lp < 30 and 0 <= sp < 10
        for pulled in (0.0, 3.3, lp, lp + 0.01, 47.0, 123.4):
            at = reported_at(pulled, node, t)
            listed = min(lp + 30 * k for k in range(-1, 20) if lp + 30 * k >= pulled - 1e-9)
            assert at == pytest.approx(min(sp + 10 * k for k in range(-1, 30) if sp + 10 * k >= listed - 1e-9))
            assert pulled <= at <= pulled + 40 + 1e-9
    assert phase_s("n-0", 30.0, "images") != phase_s("n-1", 30.0, "images")  # nodes differ
    assert reported_at(7.25, "n-0", KubeletTiming.immediate()) == 7.25


def test_status_images_lists_the_largest_max_images():
    images = {f"i{k}": k * 10 for k in range(60)}
    kept = reported_images(images, 50)
    assert len(kept) == 50 and min(kept.values()) == 100 and "i9" not in kept
    assert reported_images(images, -1) == images
    assert reported_images({"a": 5, "b": 5, "c": 1}, 2) == {"a": 5, "b": 5}


@pytest.mark.parametrize("bad", [{"image_list_period_s": -1.0}, {"node_status_period_s": float("nan")},
                                 {"max_images": 0}])
def test_timing_refuses_what_a_kubelet_cannot_be(bad):
    with pytest.raises(ValueError):
        KubeletTiming(**bad)
