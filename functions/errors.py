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


def read_input_text(path: str | Path, *, error: type[InputError] = InputError, what: str = "a text file") -> str:
    """The UTF-8 text of an input file, or one ``error`` naming it: missing or unreadable, a
    directory, binary (a NUL byte), or not UTF-8 (with the offset of the first bad byte, so a user
    can find it). A leading byte-order mark is dropped, as ``kubectl`` does. Every reader of a
    user's YAML/JSON goes through here, so they all refuse such files the same way."""
    p = Path(path)
    if p.is_dir():
        raise error(f"is a directory, not {what}", file=p)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise error(f"cannot read: {err.strerror or err}", file=p) from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise error(f"a binary file (NUL byte at offset {nul}), not {what}", file=p)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(f"not UTF-8 text: byte 0x{raw[err.start]:02x} at offset {err.start}; expected {what}",
                    file=p) from None
