"""The one way scoretune writes a figure with its interval, text safe in a Markdown cell, and a
small table as Markdown."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


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


def md_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], number: str = "{:.1f}") -> str:
    """A Markdown table: floats written with ``number``, everything else as text, each cell made safe."""
    lines = ["| " + " | ".join(map(str, columns)) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(md_cell(number.format(v) if isinstance(v, float) else str(v)) for v in row) + " |")
    return "\n".join(lines)
