"""Anchors: the reference profile measured again every ``k`` steps of a tuning experiment.

The host probe (:mod:`agent.loop.hostcheck`) sees the machine move; it cannot see the lab itself
drift (a cache that fills, a node that slows, a load generator that warms up) nor a host that
moved less than its threshold. Abedi & Brecht (ICPE 2017) answer both the same way: measure the
baseline again, interleaved with the alternatives. With ``anchor_every = k`` every ``k``-th step
runs the default profile once beside its candidate, in a seeded order (:func:`anchor_first`), on
the step's seed; the anchor's latency over step 0's is the step's *drift*, held until the next
anchor (:func:`drift_of`). The report shows the drift; the tuner is told each step's latency
divided by its drift (:meth:`agent.loop.log.StepRecord.corrected`), so a candidate measured on
a lab 30 % slower than at step 0 is not taken for a 30 % worse profile.

The price, stated: an anchor is one run, so its noise (the lab's run-to-run sd, about 10 % on the
container lab) enters every step until the next one; with no drift, anchors only add that noise
to comparisons across anchors. They are off by default (``tune --anchor-every K``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ANCHOR_DIR = "anchor"
"""A step's anchor run directory: ``runs/step-KKK/anchor``."""


def anchor_due(step: int, every: int) -> bool:
    """Whether step ``step`` runs an anchor: every ``every``-th step after the reference."""
    return every > 0 and step > 0 and step % every == 0


def anchor_first(seed: int, step: int) -> bool:
    """Whether the anchor runs before the step's candidate: a seeded coin per step, so a lab that
    changes over a step's two runs does not always favour the same one (interleaved, randomized)."""
    return bool(np.random.default_rng([int(seed), int(step), 0xA4C]).random() < 0.5)


def drift_of(reference: float, anchor: float | None, previous: float | None) -> float:
    """The step's drift: its own anchor over the reference's (step 0) latency when it ran one,
    else the last drift measured (1.0 before the first anchor)."""
    if anchor is not None:
        return anchor / reference
    return previous if previous is not None else 1.0


def anchors_summary(records: list[Any]) -> dict[str, Any] | None:
    """The anchors of an experiment for ``summary.json``: each anchor's step, latency and drift,
    and the range of drift the tuner's figures were corrected by (None: no anchors)."""
    runs = [{"step": r.step, "metric": r.anchor, "drift": r.drift} for r in records if r.anchor is not None]
    drifts = [r.drift for r in records if r.drift is not None]
    if not drifts:
        return None
    return {"runs": runs, "drift_range": [min(drifts), max(drifts)]}


__all__ = ["ANCHOR_DIR", "anchor_due", "anchor_first", "anchors_summary", "drift_of"]
