"""Reference for the scheduler benchmark: skippy-core, the Python scheduler of faas-sim.

Measured in the same run as scoretune's scheduler so the ratio is against the same machine and
moment. Skippy scores every node with its two resource/image priorities (percentage 100), as the
issue's "for scale" figure does. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

from skippy.core.clustercontext import ClusterContext
from skippy.core.model import Capacity, Container, ImageState, Node, Pod, PodSpec, ResourceRequirements
from skippy.core.predicates import PodFitsResourcesPred
from skippy.core.priorities import BalancedResourcePriority, ImageLocalityPriority
from skippy.core.scheduler import Scheduler

IMAGES = [f"scoretune/fn-{i}:latest" for i in range(8)]


class _Context(ClusterContext):
    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = nodes
        super().__init__()
        self.storage_index = None

    def get_init_image_states(self) -> dict[str, ImageState]:
        return {img: ImageState({"amd64": 100 * 2**20 * (1 + i)}) for i, img in enumerate(IMAGES)}

    def get_bandwidth_graph(self) -> dict[str, dict[str, float]]:
        return {}

    def list_nodes(self) -> list[Node]:
        return self._nodes

    def get_next_storage_node(self, node: Node) -> str:
        return ""


def _pod(i: int) -> Pod:
    res = ResourceRequirements({"cpu": 250, "memory": 256 * 2**20})
    return Pod(f"pod-{i}", "default", PodSpec(containers=[Container(IMAGES[i % len(IMAGES)], res)]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--decisions", type=int, default=200)
    args = ap.parse_args()
    nodes = [Node(f"node-{i}", Capacity(16000, 64 * 2**30), Capacity(16000, 64 * 2**30)) for i in range(args.nodes)]
    ctx = _Context(nodes)
    sched = Scheduler(
        ctx,
        percentage_of_nodes_to_score=100,
        predicates=[PodFitsResourcesPred()],
        priorities=[(1.0, BalancedResourcePriority()), (1.0, ImageLocalityPriority())],
    )
    for i, node in enumerate(nodes):
        for j in range(args.pods_per_node):
            ctx.place_pod_on_node(_pod(i * args.pods_per_node + j), node)
    pods = [_pod(10**9 + k) for k in range(args.decisions)]
    t0 = time.perf_counter()
    for pod in pods:
        result = sched.schedule(pod)
        ctx.remove_pod_from_node(pod, result.suggested_host)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"reference": "skippy-core 0.1.1 (faas-sim's scheduler), 2 priorities",
                      "nodes": args.nodes, "decisions": args.decisions,
                      "decisions_per_s": args.decisions / elapsed}))


if __name__ == "__main__":
    main()
