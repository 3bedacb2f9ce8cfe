"""When kube-scheduler learns that a node holds an image: the kubelet's image report, ported.

ImageLocality scores a node by ``node.status.images``, which the node's kubelet writes; it does
not know what the node pulled a moment ago. Upstream (kubernetes/kubernetes, read at 923690b and
00267ac):

- the kubelet's image manager refreshes its cached image list every 30 s from the runtime
  (``pkg/kubelet/images/image_gc_manager.go``, ``Start``: ``wait.Until(... im.runtime.ListImages
  ... im.imageCache.set(images) ..., 30*time.Second, ...)``; ``GetImageList`` returns the cache);
- the node-status setter copies that cached list into ``status.images``, sorted by size, largest
  first, truncated to ``nodeStatusMaxImages`` (default 50; ``pkg/kubelet/nodestatus/setters.go``,
  ``Images``);
- the kubelet computes its status every ``nodeStatusUpdateFrequency`` (default 10 s,
  ``pkg/kubelet/kubelet_node_status.go`` ``syncNodeStatus``) and posts it when it changed, which
  a new image is.

So an image pulled at ``t`` reaches the scheduler at the first node-status sync after the first
image-list refresh after ``t``: 0-40 s later, about 20 s on average. Each node's two loops run on
their own phase (kubelets start at different times); :func:`phase_s` derives it from the node's
name, so the simulator and the embedded lab, which both time the loops from a run's t = 0, agree
on it and a run is reproducible.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

IMAGE_LIST_PERIOD_S = 30.0
"""The image manager's refresh of its image list (``image_gc_manager.go``)."""
NODE_STATUS_PERIOD_S = 10.0
"""``nodeStatusUpdateFrequency``'s default (KubeletConfiguration)."""
NODE_STATUS_MAX_IMAGES = 50
"""``nodeStatusMaxImages``'s default: ``status.images`` holds the largest this many (-1: all)."""


@dataclass(frozen=True)
class KubeletTiming:
    """The kubelet's loops that delay an image's report (:data:`IMAGE_LIST_PERIOD_S` and
    :data:`NODE_STATUS_PERIOD_S`), and ``nodeStatusMaxImages``. ``immediate()``: reported the
    moment the pull ends, as the simulator counted before this module (kept for comparison)."""

    image_list_period_s: float = IMAGE_LIST_PERIOD_S
    node_status_period_s: float = NODE_STATUS_PERIOD_S
    max_images: int = NODE_STATUS_MAX_IMAGES

    def __post_init__(self) -> None:
        for name in ("image_list_period_s", "node_status_period_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a number of seconds >= 0, got {v!r}")
        if not isinstance(self.max_images, int) or (self.max_images < 1 and self.max_images != -1):
            raise ValueError(f"max_images must be a positive count or -1 (all), got {self.max_images!r}")

    @classmethod
    def immediate(cls) -> KubeletTiming:
        return cls(0.0, 0.0, -1)


def phase_s(node: str, period_s: float, loop: str) -> float:
    """Where in its period node ``node``'s ``loop`` ticks (seconds after t = 0): fixed by the
    node's name, different per loop and per node."""
    if period_s <= 0:
        return 0.0
    return (zlib.crc32(f"{loop}:{node}".encode()) % 1_000_000) / 1_000_000 * period_s


def _next_tick(t: float, period_s: float, phase: float) -> float:
    """The first tick at or after ``t`` of a loop ticking at ``phase + k * period``."""
    if period_s <= 0:
        return t
    return phase + math.ceil((t - phase) / period_s - 1e-12) * period_s


def reported_at(pulled_s: float, node: str, timing: KubeletTiming) -> float:
    """When an image node ``node`` finished pulling at ``pulled_s`` appears in its
    ``status.images``: the next image-list refresh, then the next node-status sync."""
    listed = _next_tick(pulled_s, timing.image_list_period_s, phase_s(node, timing.image_list_period_s, "images"))
    return _next_tick(listed, timing.node_status_period_s, phase_s(node, timing.node_status_period_s, "status"))


def reported_images(images: dict[str, int], max_images: int) -> dict[str, int]:
    """What ``status.images`` lists of a node holding ``images`` (name -> size): the largest
    ``max_images`` (ties by name), all of them with -1."""
    if max_images == -1 or len(images) <= max_images:
        return dict(images)
    keep = sorted(images.items(), key=lambda kv: (-kv[1], kv[0]))[:max_images]
    return dict(keep)


__all__ = ["IMAGE_LIST_PERIOD_S", "NODE_STATUS_MAX_IMAGES", "NODE_STATUS_PERIOD_S", "KubeletTiming", "phase_s",
           "reported_at", "reported_images"]
