"""Compile the simulator's kernels before parallel work starts, each platform's once.

numba keeps a compiled kernel on disk (``cache=True``), but processes that start together on a cold
cache do not wait for each other: each compiles every kernel it meets. On a clean clone the fast test
tier's two workers compiled the Knative and the OpenWhisk kernels twice each (about 45 s of CPU a
kernel, 140 s of the tier's wall time). :func:`compile_all` runs one short simulation per platform,
each in its own process and side by side, so that every kernel is compiled once and the workers
that follow load it from the cache (when it is already cached a process costs its imports, ~3 s).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from functions.platform import PLATFORMS

FUNCTION_MIX = {"dynamic-html": 0.3, "float-ops": 0.3, "thumbnailer": 0.2, "aes": 0.2}
"""The functions of the warm-up workload and of ``bench sim``'s (one definition). Any short run
compiles everything: numba compiles a kernel whole, once per argument types, whatever paths the run
takes."""


def compile_kernels(platform: str) -> None:
    """Compile (or load from numba's cache) every kernel a simulation of ``platform`` runs: the
    platform's event loop and kube-scheduler's scoring kernels, by simulating a short workload."""
    from loadgen.synth import steps
    from testbed.cluster import load_cluster
    from testbed.scheduler.config import default_profile
    from testbed.sim.backend import evaluate
    from testbed.sim.engine import SimConfig

    workload = steps([5.0, 10.0, 20.0, 40.0, 40.0], 5.0, FUNCTION_MIX, seed=0)
    evaluate(load_cluster("homogeneous-20"), workload, default_profile(), seed=0,
             config=SimConfig(platform=platform))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Failure:
    """A platform whose kernels could not be compiled, with the last line its process printed."""

    platform: str
    returncode: int
    last_line: str


def compile_all(platforms: Sequence[str] = PLATFORMS) -> list[Failure]:
    """Compile each platform's kernels in a process of its own, all at once; the failures (none when
    everything compiled). Never raises for a kernel that fails: whoever runs it next reports the error
    in full."""
    procs = [
        (p, subprocess.Popen([sys.executable, "-m", "testbed.sim.warmup", p], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for p in platforms
    ]
    failures: list[Failure] = []
    try:
        for platform, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                lines = [ln for ln in err.splitlines() if ln.strip()]
                failures.append(Failure(platform, proc.returncode, lines[-1] if lines else ""))
    finally:
        for _, proc in procs:  # interrupted: leave nothing compiling behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return failures


def main(argv: Sequence[str]) -> int:
    """``python -m testbed.sim.warmup [PLATFORM ...]``: one platform compiles in this process; several
    (or none: every platform) each in a process of its own."""
    unknown = [a for a in argv if a not in PLATFORMS]
    if unknown:
        sys.stderr.write(f"Error: unknown platform {unknown[0]!r} (one of {', '.join(PLATFORMS)})\n")
        return 2
    if len(argv) == 1:
        compile_kernels(argv[0])
        return 0
    failures = compile_all(list(argv) or PLATFORMS)
    for f in failures:
        sys.stderr.write(f"Error: compiling the {f.platform} kernels failed (exit {f.returncode}): {f.last_line}\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
