"""TaintToleration's score: ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``.

The raw score of a node is the number of its ``PreferNoSchedule`` taints that the pod's
tolerations with an empty or ``PreferNoSchedule`` effect do not tolerate; NormalizeScore is
``DefaultNormalizeScore`` reversed (fewest intolerable taints scores 100). Its Filter
(NoSchedule/NoExecute taints) is the framework's.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.plugins.helper import DefaultNormalized
from testbed.scheduler.selectors import tolerated


class TaintToleration(ScorePlugin):
    name: ClassVar[str] = "TaintToleration"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go"

    def prepare(self, c: Cluster, t: Template) -> DefaultNormalized:
        soft = tuple(x for x in t.pod.tolerations if x.effect in ("", "PreferNoSchedule"))
        raw = np.array(
            [sum(1 for x in node.taints if x.effect == "PreferNoSchedule" and not tolerated(soft, x.key, x.value, x.effect)) for node in c.nodes],
            dtype=np.int64,
        )
        return DefaultNormalized.of(raw, reverse=True)

    def pre_score(self, c: Cluster, t: Template, prepared: DefaultNormalized, args: None) -> DefaultNormalized:
        return prepared

    def score(self, c: Cluster, state: DefaultNormalized, idx: np.ndarray) -> np.ndarray:
        return state.over(idx)
