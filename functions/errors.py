"""The root of scoretune's exception tree.

It lives in ``functions`` because that package sits at the bottom of the dependency table in
DESIGN.md: every other package may import it, so the CLI can turn any scoretune error into one
clear line and a non-zero exit.
"""

from __future__ import annotations

from pathlib import Path


class ScoretuneError(Exception):
    """An error a user can act on: bad input, an impossible request, a failed dependency."""


class InputError(ScoretuneError):
    """Bad input, located as precisely as the caller can: file, row and field.

    The message reads ``FILE: row R: field F: what is wrong``, so the user can go straight to
    the offending value.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        row: int | None = None,
    ) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.row = row
        self.detail = message
        parts = []
        if self.file is not None:
            parts.append(self.file)
        if row is not None:
            parts.append(f"row {row}")
        if field is not None:
            parts.append(f"field {field}")
        parts.append(message)
        super().__init__(": ".join(parts))


class FunctionsError(ScoretuneError):
    """Errors of the function suite (unknown function, bad spec, build failure)."""
