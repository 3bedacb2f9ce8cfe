"""The measuring process of :mod:`functions.profile`: ``python -m functions.measure NAME``.

It imports only what a function instance imports (the runtime, uvicorn, the one handler) so its
resident set is that of a real instance; the statistics and the spec writing stay in the parent.
It prints one JSON line: per-sample CPU, wall and run-queue seconds, the import-and-warm time (wall,
and CPU since interpreter start), the resident set of the idle warm instance and the peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any


def rss_bytes() -> int:
    """Current resident set, from ``/proc/self/statm`` (in pages); the peak where that is absent."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set of this process image: ``VmHWM`` of ``/proc/self/status``.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries that high-water mark across ``fork`` and
    ``execve``, so a child would report its parent's peak when the parent is the larger.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def runqueue_wait_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (``/proc/thread-self/schedstat``
    field 2): time lost to other processes, which is neither the handler's CPU nor its I/O."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def run(name: str, samples: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Import and warm function ``name``, run one unrecorded request, then ``samples`` timed ones."""
    started = time.perf_counter()
    import uvicorn  # noqa: F401  (part of what a cold instance imports)

    from functions.runtime import import_handler, load_runtime_config

    config = load_runtime_config(name)
    handler, module = import_handler(config.handler)
    warm = getattr(module, "warm", None)
    if callable(warm):
        warm()
    init_cpu_s = time.process_time()  # CPU since the interpreter started: imports + warm-up
    init_s = time.perf_counter() - started
    payload = {**config.payload, **(overrides or {})}
    baseline = rss_bytes()
    handler(dict(payload))
    cpu, wall, runq = [], [], []
    for _ in range(samples):
        q0, c0, w0 = runqueue_wait_s(), time.process_time(), time.perf_counter()
        handler(dict(payload))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        runq.append(runqueue_wait_s() - q0)
    return {
        "name": name,
        "cpu_s": cpu,
        "wall_s": wall,
        "runqueue_s": runq,
        "init_s": init_s,
        "init_cpu_s": init_cpu_s,
        "baseline_rss_bytes": baseline,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m functions.measure")
    parser.add_argument("function", help="function name, as in its spec")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--payload", default=None, help="JSON object merged over the default payload")
    args = parser.parse_args(argv)
    overrides = json.loads(args.payload) if args.payload else None
    sys.stdout.write(json.dumps(run(args.function, args.samples, overrides)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
