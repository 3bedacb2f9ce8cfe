"""ImageLocality: ``pkg/scheduler/framework/plugins/imagelocality/image_locality.go``.

Per node, the sum over the pod's init and regular containers of the image's size scaled by its
spread (``scaledImageScore``: size x nodes holding it / all nodes), clamped to
[23Mi, 1000Mi x containers] and mapped linearly to 0..100 (``calculatePriority``). It depends on
the template and the nodes' images only, so it is computed once per template (and again when a
node's images change); there is no NormalizeScore.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from testbed.scheduler.objects import normalized_image_name
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB
MAX_NODE_SCORE = 100


def scaled_image_score(size_bytes: int, num_nodes_with_image: int, total_num_nodes: int) -> int:
    """``scaledImageScore``: ``int64(float64(size) * spread)``."""
    spread = float(num_nodes_with_image) / float(total_num_nodes)
    return int(float(size_bytes) * spread)


def calculate_priority(sum_scores: np.ndarray, num_containers: int) -> np.ndarray:
    """``calculatePriority``: the sums clamped to [23Mi, 1000Mi x containers], then
    ``MaxNodeScore * (sum - min) / (max - min)`` in int64."""
    max_threshold = MAX_CONTAINER_THRESHOLD * num_containers
    s = np.clip(np.asarray(sum_scores, dtype=np.int64), MIN_THRESHOLD, max(max_threshold, MIN_THRESHOLD))
    span = max_threshold - MIN_THRESHOLD
    if span <= 0:
        return np.zeros(s.shape, dtype=np.int64)
    return (MAX_NODE_SCORE * (s - MIN_THRESHOLD) // span).astype(np.int64)


class ImageLocality(ScorePlugin):
    name: ClassVar[str] = "ImageLocality"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/imagelocality/image_locality.go"
    reads_node_images: ClassVar[bool] = True

    def prepare(self, c: Cluster, t: Template) -> np.ndarray:
        containers = t.pod.init_containers + t.pod.containers
        sums = np.zeros(c.n, dtype=np.int64)
        for ctr in containers:
            name = normalized_image_name(ctr.image)
            k = c.image_nodes.get(name, 0)
            if not k:
                continue
            for i, node in enumerate(c.nodes):
                size = node.images.get(name)
                if size is not None:
                    sums[i] += scaled_image_score(size, k, c.n)
        return calculate_priority(sums, len(containers))

    def pre_score(self, c: Cluster, t: Template, prepared: np.ndarray, args: None) -> np.ndarray:
        return prepared

    def score(self, c: Cluster, state: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return state if len(idx) == c.n else state[idx]
