"""Reading a handler's payload: typed, ranged parameters with the spec's defaults.

Every handler takes a JSON object whose keys set the size of its work (``n``, ``file_size`` ...).
A bad value is the caller's fault, so it raises :class:`PayloadError`, which the runtime answers
with HTTP 400 rather than 500. Stdlib only: handlers import this inside their container.
"""

from __future__ import annotations

from typing import Any

from functions.errors import FunctionsError


class PayloadError(FunctionsError, ValueError):
    """A payload value is missing the right type or range; names the key, the value and the range."""


def int_param(payload: dict[str, Any], key: str, default: int, *, low: int, high: int) -> int:
    """``payload[key]`` (or ``default``) as an int in ``low..high``."""
    value = payload.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PayloadError(f"payload.{key} must be an integer in {low}..{high}, got {value!r}")
    return value


def float_param(payload: dict[str, Any], key: str, default: float, *, low: float, high: float) -> float:
    """``payload[key]`` (or ``default``) as a finite float in ``low..high``."""
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= float(value) <= high:
        raise PayloadError(f"payload.{key} must be a number in {low}..{high}, got {value!r}")
    return float(value)


def str_param(payload: dict[str, Any], key: str, default: str, *, max_length: int = 1024) -> str:
    value = payload.get(key, default)
    if not isinstance(value, str) or len(value) > max_length:
        raise PayloadError(
            f"payload.{key} must be a string of at most {max_length} characters, got {value!r}"
        )
    return value
