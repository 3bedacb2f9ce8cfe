"""Editing a spec file in place — for the commands that write measurements back (``profile``
writes the ``measured`` block, ``build --write-sizes`` the built image size).

The file is rewritten from its YAML mapping, keeping the header comment lines, the key order and
the spelling of every value not changed (``250m`` stays ``250m``). The result is validated with
:func:`functions.spec.load_spec`; a spec that no longer parses is restored and the error raised,
so a bad measurement can never leave a broken spec behind.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from functions.spec import FunctionSpec, load_spec


def update_spec_file(path: Path, change: Callable[[dict[str, Any]], None]) -> FunctionSpec:
    """Apply ``change`` to the spec mapping at ``path``, write it back and return the new spec."""
    original = path.read_text()
    header = "".join(line for line in original.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(original)
    change(data)
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=110))
    try:
        return load_spec(path)
    except Exception:
        path.write_text(original)
        raise


def mib_quantity(nbytes: int) -> str:
    """A memory quantity rounded up to whole MiB (at least ``1Mi``)."""
    return f"{max(1, -(-nbytes // 2**20))}Mi"
