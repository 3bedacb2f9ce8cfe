"""What a long simulation tells the user while it runs, on stderr (stdout carries the JSON).

- :class:`Progress`: nothing for the first few wall seconds (most runs end before that), then a
  status line (what runs, how far) redrawn on a terminal, or printed every ten seconds when stderr
  is a file or a pipe (a log should not fill with redraws).
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
REFRESH_S = 0.5
"""Between two redraws of the bar."""


class Progress:
    """A progress display driven by a background thread, so the work itself only assigns numbers.

    Use as a context manager. ``phase(text)`` names the current step ("reading the workload",
    "simulating"); ``update(done, total)`` (or calling the object) sets how far it is, which the
    simulator does every 64 one-second segments. Nothing is shown unless the block runs longer
    than ``show_after_s``: most runs end before that and print nothing but their result.
    """

    def __init__(self, label: str, *, unit: str = "simulated s", stream: TextIO | None = None,
                 show_after_s: float | None = None) -> None:
        self.label = label
        self.unit = unit
        self.stream = stream
        self.show_after_s = SHOW_AFTER_S if show_after_s is None else show_after_s
        self.done: float | None = None
        self.total: float | None = None
        self.step = ""
        self.shown = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.perf_counter()

    # --- the work's side: plain assignments -------------------------------------------------------
    def __call__(self, done: float, total: float) -> None:
        self.done, self.total = done, total

    def update(self, done: float, total: float) -> None:
        self.done, self.total = done, total

    def phase(self, text: str) -> None:
        self.step, self.done, self.total = text, None, None

    # --- the display's side -----------------------------------------------------------------------
    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def _text(self) -> str:
        what = f"{self.label}: {self.step}" if self.step else self.label
        if self.done is not None and self.total:
            pct = 100.0 * self.done / self.total
            what += f", {self.done:,.0f} of {self.total:,.0f} {self.unit} ({pct:.0f} %)"
        return what

    def _run(self) -> None:
        if self._stop.wait(self.show_after_s):
            return
        out = self._out()
        self.shown = True
        if getattr(out, "isatty", lambda: False)():
            from rich.console import Console
            from rich.status import Status

            status = Status(self._text(), console=Console(file=out), spinner="dots")
            status.start()
            try:
                while not self._stop.wait(REFRESH_S):
                    status.update(f"{self._text()}, {time.perf_counter() - self._t0:.0f} s")
            finally:
                status.stop()
            return
        while True:
            out.write(f"{self._text()}, {time.perf_counter() - self._t0:.0f} s so far\n")
            out.flush()
            if self._stop.wait(PLAIN_EVERY_S):
                return

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="scoretune-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(failed=exc_type is not None)

    def close(self, *, failed: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.shown and not getattr(self._out(), "isatty", lambda: False)():
            how = "stopped after" if failed else "finished in"
            self._out().write(f"{self.label}: {how} {time.perf_counter() - self._t0:.0f} s\n")
            self._out().flush()
        self.shown = False


COMPILE_NOTICE = "scoretune: compiling the simulator's and the scheduler's kernels with numba"
"""The start of the one line a process prints on stderr the first time it compiles a kernel: not an
error (a command's error is its own ``Error:`` line), and whichever command first compiles in a
process prints it."""


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
        sys.stderr.write(f"{COMPILE_NOTICE} (once after an install or a change of them; about a minute, then cached)...\n")
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
