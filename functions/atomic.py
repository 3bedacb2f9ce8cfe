"""Write a file whole or not at all: the one helper every package's outputs go through.

A temporary file beside the target (same file system, so the rename is atomic), written, flushed
and fsynced, then ``os.replace``d over the target, and the directory entry fsynced: a kill
mid-write leaves the old file (or none), never half of one, and no temporary behind. Readers of
logs, configs, tables and traces can therefore trust that a file they find is complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a file's creation or rename durable (the directory entry), where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic_with(path: str | Path, write: Callable[[Path], None], *, mode: int | None = 0o666) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``.

    ``mode``: the permission bits the file gets, less the umask, as a plain ``open()`` would give
    (``mkstemp`` creates 0600); None keeps 0600. The parent directory is created. OSError
    propagates for the caller to name the file in its own words; the temporary never outlives the
    call."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        if mode is not None:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, mode & ~umask)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return write_atomic_with(path, lambda tmp: tmp.write_bytes(payload))
