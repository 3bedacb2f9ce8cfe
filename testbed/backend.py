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

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

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

    def close(self, *, failed: bool = False) -> None:
        """Release everything the backend started; ``failed``: the work ended by an error, so keep
        what helps to find out why (the embedded lab keeps its logs)."""


def restore(backend: Backend, profile: Profile, *, why: str) -> dict[str, Any]:
    """Put ``backend`` back on ``profile`` after an aborted experiment and say what state it is
    in. Never raises: the record says ``restored`` true or false (with the error). A backend with
    its own ``restore(profile, why=...)`` (``kube``: it knows the configuration hash) does it."""
    own = getattr(backend, "restore", None)
    if callable(own):
        return dict(own(profile, why=why))
    record: dict[str, Any] = {"why": why, "profile": profile.scheduler_name}
    try:
        backend.apply(profile)
    except Exception as err:  # noqa: BLE001 - the record carries it; the abort's own error wins
        record.update(restored=False, error=str(err), state="the scheduler may still run the last candidate profile")
    else:
        record.update(restored=True, state="the scheduler runs the restored profile")
    return record


@contextlib.contextmanager
def restoring(backend: Backend, fallback: Callable[[], Profile], *,
              on_restore: Callable[[dict[str, Any]], None] | None = None,
              state: Callable[[], str] = lambda: "the scheduler may still run the last candidate profile",
              ) -> Iterator[None]:
    """Never leave a cluster on a candidate profile: on any exception, SIGINT or SIGTERM inside
    the block, :func:`restore` ``fallback()`` (called then, so it can return the confirmed best
    once one was applied), hand the record to ``on_restore`` and re-raise. SIGTERM is turned into
    the same KeyboardInterrupt as SIGINT so the restore runs; a second signal while restoring
    aborts at once (exit 128 + signal) after printing ``state()``. Handlers are installed only in
    the main thread, and the previous ones come back afterwards."""
    previous: dict[int, Any] = {}
    busy = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if busy.is_set():
            print(f"scoretune: {name} again: aborting the restore; {state()}", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        raise KeyboardInterrupt(name)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    except BaseException as err:
        busy.set()
        why = f"aborted by {err}" if isinstance(err, KeyboardInterrupt) and str(err) else \
            f"aborted by {type(err).__name__}: {err}"
        record = restore(backend, fallback(), why=why)
        if on_restore is not None:
            on_restore(record)
        raise
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
