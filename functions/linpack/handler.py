"""LINPACK-style solve: FunctionBench's ``linpack`` (solve ``A x = b`` for a random ``n``×``n`` A).

LU factorisation dominates (2/3·n³ flops); the result reports the achieved MFLOP/s the way the
LINPACK benchmark does, and the residual so a wrong answer cannot pass unnoticed.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from functions.payload import int_param


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Solve a seeded random dense system of order ``n`` (payload keys ``n``, ``seed``)."""
    n = int_param(payload, "n", 2500, low=1, high=8000)
    seed = int_param(payload, "seed", 0, low=0, high=2**32 - 1)
    rng = np.random.default_rng(seed)
    a = rng.random((n, n)) - 0.5
    b = a.sum(axis=1)  # the exact solution is the all-ones vector
    start = time.perf_counter()
    x = np.linalg.solve(a, b)
    elapsed = time.perf_counter() - start
    flops = (2.0 / 3.0) * n**3 + 2.0 * n**2
    residual = float(np.linalg.norm(a @ x - b, ord=np.inf))
    return {
        "n": n,
        "residual": residual,
        "max_error": float(np.max(np.abs(x - 1.0))),
        "mflops": flops / elapsed / 1e6 if elapsed > 0 else None,
    }
