"""Sequential disk I/O: FunctionBench's ``dd`` / sequential-disk-IO test (write, fsync, read back).

Most of its time is spent waiting for the disk (``fsync`` and the read), not on the CPU, which
makes it the suite's I/O-shaped function: the spec's ``work.io_s`` carries the wait.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from functions.payload import int_param


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Write ``size_mib`` MiB in ``block_kib`` KiB blocks, ``fsync``, evict, read back and compare."""
    size_mib = int_param(payload, "size_mib", 64, low=0, high=4096)
    block = int_param(payload, "block_kib", 1024, low=4, high=65_536) * 1024
    seed = int_param(payload, "seed", 0, low=0, high=255)
    buf = bytes((seed + i) % 256 for i in range(256)) * (block // 256) + bytes(block % 256)
    total = size_mib << 20
    mismatched = 0
    with tempfile.TemporaryDirectory(prefix="scoretune-dd-") as tmp:
        path = os.path.join(tmp, "dd.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            while written < total:
                written += os.write(fd, buf[: min(block, total - written)])
            os.fsync(fd)
            # Drop the written pages from the page cache so the read below goes to the disk.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        read = 0
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(block):
                mismatched += chunk != buf[: len(chunk)]
                read += len(chunk)
    if read != written or mismatched:
        raise RuntimeError(f"read back {read} of {written} bytes, {mismatched} blocks differ")
    return {"bytes_written": written, "bytes_read": read, "blocks": -(-read // block) if block else 0}
