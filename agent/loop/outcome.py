"""What one attempt at a measured run gave: a metric, or a void and why.

A void is not a measurement: the lab could not be prepared for the run (``stage="prepare"``: a
node not Ready, a cache that would not purge; no run directory exists) or the load generator could
not drive it (``stage="run"``: its directory exists and is kept aside as ``*.void-K``). Callers
tell the two apart by the record, never by parsing the reason."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scored:
    """A scored run: its metric and its facts (:func:`agent.metrics.run_facts`)."""

    metric: float
    facts: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Void:
    """An attempt that is not a measurement (rerun, never scored)."""

    reason: str
    stage: str = "run"
    """``prepare`` (the lab, before any run: no run directory) or ``run`` (the load generator)."""

    def describe(self) -> str:
        return f"{self.stage}: {self.reason}" if self.stage == "prepare" else self.reason


Outcome = Scored | Void

__all__ = ["Scored", "Outcome", "Void"]
