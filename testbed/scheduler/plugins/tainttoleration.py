"""TaintToleration's score: ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``.

The raw score of a node is the number of its ``PreferNoSchedule`` taints that the pod's
tolerations with an empty or ``PreferNoSchedule`` effect do not tolerate; NormalizeScore is
``DefaultNormalizeScore`` reversed (fewest intolerable taints scores 100). Its Filter
(NoSchedule/NoExecute taints) is the framework's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from testbed.scheduler import kernels
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.selectors import tolerated


@dataclass(frozen=True)
class _State:
    raw: np.ndarray
    #: the normalised scores over every node, the common case, computed once
    full: np.ndarray


class TaintToleration(ScorePlugin):
    name: ClassVar[str] = "TaintToleration"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go"

    def prepare(self, c: Cluster, t: Template) -> _State:
        soft = tuple(x for x in t.pod.tolerations if x.effect in ("", "PreferNoSchedule"))
        raw = np.array(
            [sum(1 for x in node.taints if x.effect == "PreferNoSchedule" and not tolerated(soft, x.key, x.value, x.effect)) for node in c.nodes],
            dtype=np.int64,
        )
        return _State(raw, kernels.default_normalize(raw, np.arange(c.n), True))

    def pre_score(self, c: Cluster, t: Template, prepared: _State, args: None) -> _State:
        return prepared

    def score(self, c: Cluster, state: _State, idx: np.ndarray) -> np.ndarray:
        return state.full if len(idx) == c.n else kernels.default_normalize(state.raw, idx, True)
