"""What a long simulation tells the user while it runs, on stderr (stdout carries the JSON).

- :class:`Progress`: nothing for the first few wall seconds (most runs end before that), then a
  rich progress bar on a terminal, or a plain line every ten seconds when stderr is a file or a
  pipe (a log should not fill with redraws).
- :func:`announce_compilation`: a one-line notice, once per process, when numba compiles the
  simulator's kernels (a cache miss: the first run after an install or a change of
  ``testbed/sim/kernel.py`` or ``testbed/scheduler/kernels.py``), which takes long enough to look
  like a hang. It is a numba event
  listener, so it costs nothing once the kernels are loaded.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from numba.core import event as numba_event

SHOW_AFTER_S = 3.0
"""Wall seconds before progress appears."""
PLAIN_EVERY_S = 10.0
"""Between two plain progress lines (stderr not a terminal)."""


class Progress:
    """``update(done, total)`` as often as convenient; ``close()`` at the end (also on error).

    ``label`` names what runs ("simulating lab-small", "sweep"); ``unit`` what ``done`` counts."""

    def __init__(self, label: str, *, unit: str = "simulated s", stream: TextIO | None = None,
                 show_after_s: float = SHOW_AFTER_S) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream
        self.show_after_s = show_after_s
        self._t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._last_plain = -float("inf")
        self._shown = False

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def __call__(self, done: float, total: float) -> None:
        self.update(done, total)

    def update(self, done: float, total: float) -> None:
        now = time.perf_counter()
        elapsed = now - self._t0
        if elapsed < self.show_after_s:
            return
        out = self._out()
        if getattr(out, "isatty", lambda: False)():
            if self._bar is None:
                from rich.console import Console
                from rich.progress import BarColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn
                from rich.progress import Progress as RichProgress

                self._bar = RichProgress(
                    TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    TextColumn("{task.completed:,.0f}/{task.total:,.0f} " + self.unit), TimeElapsedColumn(),
                    console=Console(file=out), transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=total)
            self._bar.update(self._task, completed=done, total=total)
            self._shown = True
        elif now - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = now
            pct = 100.0 * done / total if total > 0 else 100.0
            out.write(f"{self.label}: {done:,.0f} of {total:,.0f} {self.unit} ({pct:.0f} %), {elapsed:.0f} s so far\n")
            out.flush()
            self._shown = True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._shown:
            self._out().write(f"{self.label}: done in {time.perf_counter() - self._t0:.0f} s\n")
            self._out().flush()
        self._shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _CompileNotice(numba_event.Listener):
    """Prints the compilation notice at the first numba compile of a function of scoretune's."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.done = False
        self._lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        if self.done:
            return
        dispatcher = (event.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
        if not module.startswith(self.prefix):
            return
        with self._lock:
            if self.done:
                return
            self.done = True
        sys.stderr.write(
            "scoretune: compiling the simulator's and the scheduler's kernels with numba (once after an "
            "install or a change of them; about a minute, then cached)...\n"
        )
        sys.stderr.flush()

    def on_end(self, event: Any) -> None:
        """Nothing to say at the end: the run's own output follows."""


_notice: _CompileNotice | None = None


def announce_compilation(prefix: str = "testbed.") -> None:
    """Register the compilation notice for the numba functions of modules under ``prefix``
    (idempotent; the first registration's prefix stays)."""
    global _notice
    if _notice is None:
        _notice = _CompileNotice(prefix)
        numba_event.register("numba:compile", _notice)
