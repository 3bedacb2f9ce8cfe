"""What a tuner may know before its first run: the user's view (docs/twin.md).

A user has the cluster as the Kubernetes API shows it (capacities, labels, taints, the images each
node holds, zones), the workload they replay and the runs they measured. They do not have what no
API shows: each node's speed, its image-pull bandwidth, the real work of each function, the noise.
Every tuner that reads a cluster gets it through :func:`user_view`, the one place that builds its
input, so a hidden parameter cannot reach a tuner by another path (tests/agent/test_agent_view.py
changes only hidden parameters and checks that every method's input stays byte-identical).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.metrics import DEFAULT_TIMEOUT_S
from functions.platform import DEFAULT_PLATFORM, Platform, parse_platform


@dataclass(frozen=True)
class UserView:
    cluster: Any
    """``testbed.sim.twin.cluster_view`` of the cluster: hidden parameters at neutral values."""
    workload: Any
    metric: str = "mean"
    timeout_s: float = DEFAULT_TIMEOUT_S
    platform: Platform = DEFAULT_PLATFORM
    """What serves the functions (Knative or OpenWhisk): the user deployed it, so the twin knows it."""

    def fingerprint(self) -> str:
        """A digest of everything the view holds (the test of leaks compares these)."""
        import hashlib
        import json

        from testbed.cluster import cluster_to_dict

        frame = self.workload.frame
        blob = json.dumps({"cluster": cluster_to_dict(self.cluster), "metric": self.metric, "timeout_s": self.timeout_s,
                           "platform": self.platform,
                           "workload": [frame["t_s"].round(9).tolist(), frame["function"].tolist(),
                                        frame["payload"].tolist()]}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


def user_view(cluster: Any, workload: Any, metric: str = "mean", timeout_s: float = DEFAULT_TIMEOUT_S,
              platform: Platform = DEFAULT_PLATFORM) -> UserView:
    """The view of ``cluster`` (a ClusterSpec as the spec or the importer gives it)."""
    from testbed.sim.twin import cluster_view

    return UserView(cluster_view(cluster), workload, metric, float(timeout_s), parse_platform(platform))


def objective_view(objective: Any, *, platform: Platform = DEFAULT_PLATFORM) -> UserView | None:
    """The view of an evaluation objective: its nominal cluster and workload, never its truth
    (None for an objective with no cluster, such as a test's analytic function)."""
    cluster, workload = getattr(objective, "cluster", None), getattr(objective, "workload", None)
    if cluster is None or workload is None:
        return None
    return user_view(cluster, workload, getattr(objective, "metric", "mean"), platform=platform)
