"""The host measured: a fixed CPU probe and a fixed unpack probe, timed the same way every time.

The lab's latencies are real, so they move with the machine under it; this project's host got
2-2.5x slower between sessions and faster again while steal stayed under 3 % (measurement.md),
so nothing recorded saw it. Two probes see it directly, in the units that matter to a cold start:

- ``cpu_ms``: a fixed pure-Python loop (the work a function's handler and the lab's own Python do);
- ``unpack_ms``: ``tar -xzf`` of a fixed gzip'd archive (what a node does with every pulled layer).

Each is the *minimum* of ``repeats`` timings (pyperf's rule for a probe: the minimum is the
figure least disturbed by whatever else ran), taken in a quiet moment (between runs). ``testbed
up`` records one in ``lab.json``; the backend records one before every run (``summary.host.probe``);
:func:`drift` compares two, and an experiment pauses when the host left its first probe's speed
by more than the threshold (``agent.loop.hostcheck``)."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

CPU_LOOP = 2_000_000
UNPACK_BYTES = 8 << 20
PROBE_SEED = 20261207


def _cpu_once(n: int = CPU_LOOP) -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(n):
        acc = (acc + i * i) % 1_000_003
    return (time.perf_counter() - t0) * 1000.0


def archive(path: Path) -> Path:
    """The fixed archive (made once per path): half incompressible bytes, half repetitive text,
    as an image layer mixes binaries and text; the same bytes from the same seed everywhere."""
    if path.exists():
        return path
    rng = np.random.default_rng(PROBE_SEED)
    noise = rng.integers(0, 256, UNPACK_BYTES // 2, dtype=np.uint8).tobytes()
    text = (b"def handler(event):\n    return {'ok': True}\n" * (UNPACK_BYTES // 2 // 44 + 1))[: UNPACK_BYTES // 2]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in (("bin/blob", noise), ("lib/text.py", text)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    tmp = path.with_suffix(".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(gzip.compress(raw.getvalue(), compresslevel=6, mtime=0))
    tmp.replace(path)
    return path


def _unpack_once(tgz: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="scoretune-probe-") as d:
        t0 = time.perf_counter()
        subprocess.run(["tar", "-xzf", str(tgz), "-C", d], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return (time.perf_counter() - t0) * 1000.0


def probe(work_dir: Path | None = None, *, repeats: int = 3) -> dict[str, Any]:
    """``{"cpu_ms", "unpack_ms", "at"}``: the minimum of ``repeats`` timings of each probe
    (``unpack_ms`` None where ``tar`` is missing)."""
    cpu_ms = min(_cpu_once() for _ in range(repeats))
    unpack_ms = None
    if shutil.which("tar"):
        tgz = archive((work_dir or Path(tempfile.gettempdir())) / "scoretune-probe.tgz")
        unpack_ms = min(_unpack_once(tgz) for _ in range(repeats))
    return {"cpu_ms": round(cpu_ms, 3), "unpack_ms": None if unpack_ms is None else round(unpack_ms, 3),
            "at": time.time()}


def drift(now: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """Each probe's time now over its time in ``base`` (1.0: same speed; 2.0: twice as slow)."""
    out = {}
    for key in ("cpu_ms", "unpack_ms"):
        a, b = now.get(key), base.get(key)
        if a is not None and b:
            out[key] = round(float(a) / float(b), 4)
    return out


def worst(ratios: dict[str, float]) -> float:
    """How far the host moved: the largest of each ratio and its inverse (1.0: not at all)."""
    return max((max(r, 1.0 / r) for r in ratios.values() if r > 0), default=1.0)


__all__ = ["archive", "drift", "probe", "worst"]
