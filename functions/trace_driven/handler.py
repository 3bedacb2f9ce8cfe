"""Trace-driven function: plays back a trace row's own CPU time and memory, as vHive's InVitro
loader does with its ``trace-function`` (busy-spin for the row's duration, hold its memory).

The payload gives ``cpu_s`` (CPU seconds to burn), ``memory_bytes`` (memory to allocate and
touch, page by page, so it is resident rather than merely reserved) and optionally ``io_s`` (a
wait off the CPU) — the same keys :func:`functions.work.sample_work` reads for the simulator, so
one workload drives the simulator and a live lab alike.

CPU is counted with :func:`time.thread_time`, the CPU time of the calling thread, not
``process_time``: the runtime runs concurrent requests on threads of one process, and a
process-wide clock would let each request stop when the *sum* of all of them reached its target.
"""

from __future__ import annotations

import time
from typing import Any

from functions.payload import float_param, int_param

_PAGE = 4096
_SPIN = 2_000  # arithmetic steps between clock reads: ~0.1 ms, far below any target


def touch_memory(nbytes: int) -> bytearray:
    """Allocate ``nbytes`` and write one byte in every page so the kernel backs all of them."""
    buf = bytearray(nbytes)
    pages = len(range(0, nbytes, _PAGE))
    buf[::_PAGE] = b"\x01" * pages
    return buf


def burn_cpu(cpu_s: float) -> float:
    """Spin until this thread has used ``cpu_s`` CPU seconds; returns the CPU seconds used."""
    start = time.thread_time()
    deadline = start + cpu_s
    x = 0
    while time.thread_time() < deadline:
        for i in range(_SPIN):
            x = (x + i * i) & 0xFFFF
    return time.thread_time() - start


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Burn ``cpu_s``, hold ``memory_bytes`` meanwhile, then wait ``io_s``."""
    cpu_s = float_param(payload, "cpu_s", 0.5, low=0.0, high=600.0)
    memory = int_param(payload, "memory_bytes", 16 << 20, low=0, high=64 << 30)
    io_s = float_param(payload, "io_s", 0.0, low=0.0, high=600.0)
    held = touch_memory(memory)
    used = burn_cpu(cpu_s)
    resident = len(held)
    del held
    if io_s:
        time.sleep(io_s)
    return {"cpu_s": used, "memory_bytes": resident, "io_s": io_s}
