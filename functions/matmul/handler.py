"""Dense matrix multiply: FunctionBench's ``matmul`` (two random ``n``×``n`` float64 matrices).

BLAS-bound CPU work touching three ``n``² matrices (24 MB at n=1000), so both its CPU time and its
memory grow with ``n`` — a CPU-and-memory-shaped function. The matrices come from a seeded
generator so every request does identical work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from functions.payload import int_param


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Multiply two seeded random ``n``×``n`` matrices (payload keys ``n``, ``seed``)."""
    n = int_param(payload, "n", 1500, low=1, high=8000)
    seed = int_param(payload, "seed", 0, low=0, high=2**32 - 1)
    rng = np.random.default_rng(seed)
    a = rng.random((n, n))
    b = rng.random((n, n))
    c = a @ b
    return {"n": n, "trace": float(np.trace(c)), "frobenius": float(np.linalg.norm(c))}
