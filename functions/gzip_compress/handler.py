"""File compression: FunctionBench's ``gzip_compression`` (write a file, gzip it to another).

The input is written to and read from the container's scratch disk, so the function mixes disk I/O
with zlib CPU. ``compressibility`` (0..1) sets the fraction of the data that is repetitive text;
the rest is seeded pseudo-random bytes, which deflate cannot shrink.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import tempfile
from typing import Any

from functions.payload import float_param, int_param

_CHUNK = 1 << 20


def _write_input(path: str, size: int, compressibility: float, seed: int) -> None:
    rng = random.Random(seed)
    text = (b"scoretune gzip benchmark line of moderately repetitive text 0123456789\n" * 15_000)[:_CHUNK]
    with open(path, "wb") as f:
        written = 0
        while written < size:
            n = min(_CHUNK, size - written)
            repetitive = int(n * compressibility)
            f.write(text[:repetitive] + rng.randbytes(n - repetitive))
            written += n


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Compress ``file_size`` bytes (payload keys ``file_size``, ``compressibility``, ``level``, ``seed``)."""
    size = int_param(payload, "file_size", 128 * _CHUNK, low=0, high=4 << 30)
    compressibility = float_param(payload, "compressibility", 0.5, low=0.0, high=1.0)
    level = int_param(payload, "level", 6, low=1, high=9)
    seed = int_param(payload, "seed", 0, low=0, high=2**32 - 1)
    with tempfile.TemporaryDirectory(prefix="scoretune-gzip-") as tmp:
        source = os.path.join(tmp, "input.bin")
        target = source + ".gz"
        _write_input(source, size, compressibility, seed)
        with open(source, "rb") as src, gzip.open(target, "wb", compresslevel=level) as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        compressed = os.path.getsize(target)
    return {"file_size": size, "compressed_size": compressed, "ratio": compressed / size if size else None}
