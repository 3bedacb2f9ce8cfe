"""The one way scoretune writes a figure with its interval, and text safe in a Markdown cell."""

from __future__ import annotations

import math


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(float(x))


def format_ci(mean: float | None, low: float | None = None, high: float | None = None, *, digits: int = 1,
              scale: float = 1.0, signed: bool = True, unit: str = "") -> str:
    """``+32.4 % [1.8, 63.1]``: a figure times ``scale``, its ``unit`` and, when both ends are
    finite, its interval; ``–`` for a missing or non-finite figure. ``signed`` shows a ``+`` on
    gains (improvements); shares and counts read better without it."""
    if not _finite(mean):
        return "–"
    text = f"{float(mean) * scale:{'+' if signed else ''}.{digits}f}{unit}"
    if _finite(low) and _finite(high):
        text += f" [{float(low) * scale:.{digits}f}, {float(high) * scale:.{digits}f}]"
    return text


def md_cell(text: str) -> str:
    """``text`` safe in a GitHub Markdown table cell: ``|`` escaped (GFM splits cells on every
    unescaped ``|``, even inside a code span), newlines as spaces."""
    return text.replace("|", "\\|").replace("\n", " ")
