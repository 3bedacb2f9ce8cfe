"""``pkg/scheduler/framework/plugins/helper/normalize_score.go``: ``DefaultNormalizeScore``, the
NormalizeScore of the plugins with raw per-node scores (TaintToleration reversed, NodeAffinity)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from testbed.scheduler import kernels


@dataclass(frozen=True)
class DefaultNormalized:
    """Raw per-node scores with their normalisation over every node, the common case, computed
    once; any other candidate set is normalised when scored."""

    raw: np.ndarray
    reverse: bool
    full: np.ndarray

    @classmethod
    def of(cls, raw: np.ndarray, *, reverse: bool) -> DefaultNormalized:
        return cls(raw, reverse, kernels.default_normalize(raw, np.arange(len(raw)), reverse))

    def over(self, idx: np.ndarray) -> np.ndarray:
        """The normalised scores over the candidates ``idx`` (sorted, unique node indices)."""
        return self.full if len(idx) == len(self.raw) else kernels.default_normalize(self.raw, idx, self.reverse)
