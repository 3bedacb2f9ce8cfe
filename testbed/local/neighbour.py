"""A noisy neighbour: a process in a node's CPU group whose load comes and goes.

On a real cluster a node's CPU is shared with things no scheduler accounts for (daemons, another
tenant's VM on the same host, a backup job). The lab's hardware file gives a node a neighbour
(:class:`testbed.local.hardware.Neighbour`): it spins for ``duty(t)`` of every 10 ms slice, its
duty moving along a sine between two bounds, inside the node's CPU quota, so the node's pods get
what it leaves. One process uses at most one core; ``--share`` is its part of the neighbour's cpu.

Entry point: ``python -m testbed.local.neighbour --share 0.7 --low 0.1 --high 0.9 --period 30``
(started by the node agent, which puts it in the node's group and kills it with itself).
"""

from __future__ import annotations

import argparse
import time

from testbed.local.hardware import Neighbour

SLICE_S = 0.01


def spin(nb: Neighbour, share: float, *, until: float | None = None) -> None:
    t0 = time.monotonic()
    while until is None or time.monotonic() < until:
        start = time.monotonic()
        busy = SLICE_S * share * max(0.0, min(1.0, nb.duty(start - t0)))
        while time.monotonic() - start < busy:
            pass
        rest = SLICE_S - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.local.neighbour")
    p.add_argument("--share", type=float, required=True, help="fraction of one core at full duty")
    p.add_argument("--low", type=float, required=True)
    p.add_argument("--high", type=float, required=True)
    p.add_argument("--period", type=float, required=True)
    a = p.parse_args(argv)
    spin(Neighbour(int(a.share * 1000), a.low, a.high, a.period), a.share)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
