"""Floating-point loop: FunctionBench's ``float_operation`` (sin, cos, sqrt over ``n`` values).

Pure CPU in the interpreter with no allocation beyond a few floats, so its cost scales linearly in
``n`` and its memory is flat: the cleanest CPU-shaped function of the suite.
"""

from __future__ import annotations

import math
from typing import Any

from functions.payload import int_param


def handle(payload: dict[str, Any]) -> dict[str, Any]:
    """Sum ``sin(i) + cos(i) + sqrt(i)`` for ``i < n`` (payload key ``n``)."""
    n = int_param(payload, "n", 200_000, low=1, high=100_000_000)
    sin, cos, sqrt = math.sin, math.cos, math.sqrt
    total = 0.0
    for i in range(n):
        x = float(i)
        total += sin(x) + cos(x) + sqrt(x)
    return {"n": n, "sum": total}
