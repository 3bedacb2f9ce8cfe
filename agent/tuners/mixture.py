"""``task-mixture``: the next profile chosen by which training tasks the new cluster behaves like.

A fixed portfolio (``gp-warm``'s first runs) ignores what the new cluster answers; a search ignores
the training tasks. This tuner keeps the training tasks as hypotheses: the new cluster is one of
them, seen through measurement noise. Each run of a prior candidate on the new cluster gives its
latency relative to the reference run, ``r``; a training task ``j`` that predicted ``R[c, j]`` for
that candidate keeps the weight ``exp(-(ln r - ln R[c, j])^2 / (2 sigma^2))``. The next profile is
the untried candidate with the lowest expected best-so-far under the weighted tasks,
``sum_j w_j min(b, R[c, j]) / h_j`` (``b`` the best relative latency measured so far, ``h_j`` task
``j``'s headroom ``1 - min_c R[c, j]``: a gain counts as the share of the gap it closes, so the
tasks with most headroom do not decide alone).

Before any candidate ran, the weights come from the reference run's facts (agent.metrics.RUN_FACTS:
its share of cold starts and failures, its tail's shape), compared with each training task's
default-weights run: ``exp(-|z - z_j|^2 / (2 width^2))`` over the facts standardised across the
training tasks, so the first profile is the best one of the tasks that look like the new cluster.
Without facts (a tuner told only metrics), the weights start equal, and the first suggestion is the
profile that closes the largest mean share of the training tasks' gaps (counted as latency, the
greedy portfolio's first profile); afterwards the weights move to the tasks that predicted what was
measured, so the second and third profiles are those tasks' best ones (Wistuba et al.'s portfolio
made adaptive; the task-similarity-by-response idea of RGPE, Feurer et al. arXiv 1802.02219, on a
finite candidate set). ``sigma`` (the log-latency mismatch allowed between the new cluster and a
training task) and the facts kernel's ``width`` were chosen on the validation set. The plain name
``task-mixture`` is the validated tuner: this mixture for :data:`HANDOVER` runs, then GP-BO from every
run (agent.tuners.handover); a name with parameters (``task-mixture:sigma0.1``) is the mixture alone,
and ``+gpK`` hands it over.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.metrics import RUN_FACTS
from agent.tuners.transfer import TransferPrior

SIGMA = 0.05
"""The default log-latency mismatch between the new cluster and a training task."""
WIDTH = 0.5
"""The default width of the facts kernel, in standard deviations of the training tasks' facts."""
BROAD = 0.0
"""The default share of the starting weight that ignores the facts: none, as validation chose
(shares 0.25 and 0.5 lost at T = 1 and tied at T = 3, docs/results/validation/mixture-broad)."""
HANDOVER = 3
"""Runs after which the plain ``task-mixture`` hands over to GP-BO. SIGMA, WIDTH and HANDOVER were
chosen on the validation set only (docs/results/validation/mixture-grid, mixture)."""
_HEADROOM_FLOOR = 0.01
"""A task whose best candidate gains under 1 % counts as if it could gain 1 %."""
_SHARE_FLOOR = 0.01
"""Shares (cold starts, failures) are compared as ``ln(share + floor)``: 1 % and 2 % differ as much as 20 % and 40 %."""
_MATCH = 1e-4
"""How close (in the box, per coordinate) a told action must be to a candidate to count as it."""


class TaskMixture:
    """A weighted mixture of the training tasks, updated by every run of a prior candidate."""

    name = "task-mixture"

    def __init__(self, prior: TransferPrior, codec: ActionCodec, *, sigma: float = SIGMA,
                 width: float | None = WIDTH, per_gap: bool = True, broad: float = BROAD) -> None:
        """``width``: the facts kernel's width; None ignores the reference run's facts.
        ``broad``: the share of the starting weight spread equally over the tasks whatever the facts
        say (a new cluster may resemble none of them closely).
        ``per_gap``: each task's gain counts as a share of its own headroom (what the gap closed
        measures), else as latency (the tasks with most headroom dominate)."""
        if not (np.isfinite(sigma) and sigma > 0):
            raise AgentError(f"task-mixture: sigma must be a positive number, got {sigma!r}")
        if width is not None and not (np.isfinite(width) and width > 0):
            raise AgentError(f"task-mixture: the facts width must be a positive number, got {width!r}")
        if not (np.isfinite(broad) and 0.0 <= broad <= 1.0):
            raise AgentError(f"task-mixture: the broad share must be in [0, 1], got {broad!r}")
        self.broad = float(broad)
        self.codec = codec
        self.actions = np.asarray(prior.actions, dtype=np.float64)
        self.log_relative = np.log(np.asarray(prior.relative, dtype=np.float64))  # (candidates, tasks)
        self.sigma = float(sigma)
        self.log_weight = np.zeros(self.log_relative.shape[1])
        self.tried = np.zeros(len(self.actions), dtype=bool)
        self.reference: float | None = None
        self.best = 1.0
        self.width = width
        headroom = 1.0 - np.exp(self.log_relative.min(axis=0))
        self._scale = 1.0 / np.maximum(headroom, _HEADROOM_FLOOR) if per_gap else np.ones_like(headroom)
        self._facts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """(mean, std, the tasks' standardised facts), or None for a prior without facts."""
        if prior.facts is not None:
            features = _features(prior.facts)
            mean, std = features.mean(axis=0), features.std(axis=0)
            std = np.where(std > 0, std, 1.0)
            self._facts = (mean, std, (features - mean) / std)

    def observe(self, facts: Mapping[str, float]) -> None:
        """The facts of the run told next; those of the reference run set the starting weights."""
        if self.reference is not None or self.width is None or self._facts is None:
            return
        mean, std, tasks = self._facts
        z = (_features(np.asarray([[float(facts[k]) for k in RUN_FACTS]]))[0] - mean) / std
        self.log_weight = -((tasks - z) ** 2).sum(axis=1) / (2.0 * self.width**2)
        if self.broad >= 1:
            self.log_weight = np.zeros_like(self.log_weight)
        elif self.broad > 0:  # (1 - broad) * kernel + broad * uniform, both normalised, in logs
            kernel = self.log_weight - np.logaddexp.reduce(self.log_weight)
            self.log_weight = np.logaddexp(np.log1p(-self.broad) + kernel, np.log(self.broad / len(kernel)))

    def weights(self) -> np.ndarray:
        """The tasks' normalised weights (they sum to 1)."""
        w = np.exp(self.log_weight - self.log_weight.max())
        return w / w.sum()

    def _candidate(self, action: np.ndarray) -> int | None:
        dist = np.abs(self.actions - np.asarray(action, dtype=np.float64)[None, :]).max(axis=1)
        i = int(np.argmin(dist))
        return i if dist[i] <= _MATCH else None

    def suggest(self) -> np.ndarray:
        if self.tried.all():  # every candidate ran: repeat the best expected one
            self.tried[:] = False
        expected = (np.minimum(self.best, np.exp(self.log_relative)) * self._scale) @ self.weights()
        expected[self.tried] = np.inf
        return self.actions[int(np.argmin(expected))].astype(np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        if self.reference is None:  # the first tell is the reference run
            self.reference = float(metric)
            i = self._candidate(action)
            if i is not None:
                self.tried[i] = True
            return
        rel = float(metric) / self.reference
        self.best = min(self.best, rel)
        i = self._candidate(action)
        if i is None:  # not a candidate (another tuner's proposal): no task predicted it
            return
        self.tried[i] = True
        self.log_weight -= (np.log(rel) - self.log_relative[i]) ** 2 / (2.0 * self.sigma**2)


def _features(facts: np.ndarray) -> np.ndarray:
    """RUN_FACTS rows as compared: the shares on a log scale, the tail's shape as it is."""
    out = np.array(facts, dtype=np.float64)
    for k, name in enumerate(RUN_FACTS):
        if name.endswith("_share"):
            out[:, k] = np.log(np.clip(out[:, k], 0.0, 1.0) + _SHARE_FLOOR)
    return out


__all__ = ["BROAD", "HANDOVER", "SIGMA", "WIDTH", "TaskMixture"]
