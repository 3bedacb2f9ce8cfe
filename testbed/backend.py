"""The one interface every backend implements (DESIGN.md, "Backend").

The agent sees only this Protocol, so a policy trained on ``sim`` tunes ``local`` or ``kube``
unchanged. A backend is bound to one cluster at construction; ``run`` replays a workload with the
profile most recently applied and returns a RunResult whose directory holds the tables.

Every backend records that profile in the run's ``summary.json`` the same way, as
:func:`testbed.scheduler.config.profile_record` builds it: ``"profile": {"scheduler_name": str,
"weights": {plugin: int | null}, "config": <KubeSchedulerConfiguration dict>}`` (``weights`` names
all 7 default score plugins, null = disabled; ``config`` parses back with ``parse_config`` into the
same profile), or ``"profile": null`` when no profile was applied and the backend's scheduler ran
with what it already had (``sim`` applies the default profile then, and records it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from loadgen.results import RunResult
    from loadgen.workload import Workload
    from testbed.scheduler.config import Profile


@runtime_checkable
class Backend(Protocol):
    name: str

    def apply(self, profile: Profile) -> None:
        """Make ``profile`` the scheduler profile for every pod created from now on."""

    def reset(self) -> None:
        """Return the cluster to its starting state: every function at zero, image caches as in
        the spec, so each run starts from the same state."""

    def run(self, workload: Workload, out_dir: Path, *, seed: int = 0) -> RunResult:
        """Replay ``workload`` open-loop and write a run directory to ``out_dir``."""

    def close(self) -> None:
        """Release everything the backend started."""
