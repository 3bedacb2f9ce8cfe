"""The canonical Workload: a columnar arrival schedule every backend replays the same way.

Columns: ``t_s`` (float64 seconds from the start, sorted ascending), ``function`` (a suite function
name) and ``payload`` (a JSON object as a string; ``"{}"`` means the function's default payload).
Provenance (source trace, seed, compression, scaling, function mapping) rides in the Parquet file's
schema metadata under the ``scoretune`` key, so a workload file says where it came from.

Parquet is written with an explicit pyarrow schema: pandas 3 would otherwise infer its new string
dtype and files would differ between pandas versions.

Every workload file is validated once, in :func:`read_workload`, against that schema (column
types, nulls, an empty schedule, sorted finite times, JSON-object payloads, the metadata), so
``workload show``, ``replay``, ``sim run`` and ``tune --workload`` all refuse a bad file with the
same one-line error naming the file, row and column instead of failing somewhere downstream.
Files are written atomically (:func:`atomic_write`): a failed write never leaves a file that looks
like a good workload.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from functions.atomic import write_atomic_with
from loadgen.errors import InputError

WORKLOAD_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("function", pa.string(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)
METADATA_KEY = b"scoretune"

MAX_TIME_S = 1e8
"""The latest arrival time accepted (about 3.2 years): later is surely a unit error (Unix epoch
seconds or milliseconds as ``t_s``), and would make a replay or a simulation run for ever."""


@dataclass(frozen=True)
class Workload:
    """An arrival schedule plus its provenance.

    ``frame`` always has exactly the three schema columns, ``t_s`` sorted; construct through
    :func:`make_workload` (or :func:`read_workload`) which enforce that.
    """

    frame: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def duration_s(self) -> float:
        return float(self.frame["t_s"].iloc[-1]) if len(self.frame) else 0.0

    @property
    def functions(self) -> list[str]:
        return sorted(self.frame["function"].unique().tolist())

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", self.metadata.get("source", "workload")))


def _check_functions(fn: np.ndarray, source: str) -> None:
    """Every function a non-empty printable name (it travels in an HTTP header); checked per
    distinct value, so millions of rows cost a factorize."""
    codes, uniques = pd.factorize(pd.Series(fn, dtype=object), use_na_sentinel=True)
    if (codes < 0).any():
        row = int(np.flatnonzero(codes < 0)[0])
        raise InputError("function is null; every request needs a function name", file=source, row=row, field="function")
    for k, f in enumerate(uniques):
        if not isinstance(f, str) or not f or not f.isprintable():
            row = int(np.flatnonzero(codes == k)[0])
            raise InputError(f"function must be a non-empty printable name, got {f!r}", file=source, row=row, field="function")


def _check_payloads(pl: np.ndarray, source: str) -> None:
    """Every payload a JSON object, checked once per distinct string."""
    codes, uniques = pd.factorize(pd.Series(pl, dtype=object), use_na_sentinel=True)
    if (codes < 0).any():
        row = int(np.flatnonzero(codes < 0)[0])
        raise InputError('payload is null; use "{}" for the default payload', file=source, row=row, field="payload")
    for k, p in enumerate(uniques):
        reason = None
        if not isinstance(p, str):
            reason = f"payload must be a JSON object as text, got {p!r}"
        else:
            try:
                value = json.loads(p)
            except ValueError as err:
                reason = f"payload is not JSON ({err.msg} at char {err.pos}): {p[:60]!r}"
            else:
                if not isinstance(value, dict):
                    reason = f"payload must be a JSON object, got {type(value).__name__}: {p[:60]!r}"
        if reason:
            raise InputError(reason, file=source, row=int(np.flatnonzero(codes == k)[0]), field="payload")


def make_workload(
    t_s: Any,
    function: Any,
    payload: Any | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    source: str = "<workload>",
) -> Workload:
    """Build a validated Workload from columns; sorts by time (stable) and checks every value."""
    try:
        t = np.asarray(t_s, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputError(f"times must be numbers (seconds): {err}", file=source, field="t_s") from None
    if t.ndim != 1:
        raise InputError(f"times must be one number per request, got an array of shape {t.shape}", file=source, field="t_s")
    fn = np.asarray(function, dtype=object)
    if payload is None:
        pl = np.full(len(t), "{}", dtype=object)
    else:
        pl = np.asarray(
            [p if isinstance(p, str) else json.dumps(p, sort_keys=True) for p in payload], dtype=object
        )
    if not (len(t) == len(fn) == len(pl)):
        raise InputError(f"column lengths differ: t_s={len(t)} function={len(fn)} payload={len(pl)}", file=source)
    bad = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if bad.size:
        raise InputError(f"time must be a finite number >= 0, got {float(t[bad[0]])!r}", file=source, row=int(bad[0]), field="t_s")
    late = np.flatnonzero(t > MAX_TIME_S)
    if late.size:
        raise InputError(
            f"time {float(t[late[0]]):.6g} s is beyond the {MAX_TIME_S:g} s limit (about 3 years); "
            "are these Unix timestamps or milliseconds? t_s is seconds from the start",
            file=source, row=int(late[0]), field="t_s",
        )
    _check_functions(fn, source)
    _check_payloads(pl, source)
    order = np.argsort(t, kind="stable")
    frame = pd.DataFrame(
        {
            "t_s": t[order],
            "function": pd.array(fn[order].tolist(), dtype=object),
            "payload": pd.array(pl[order].tolist(), dtype=object),
        }
    )
    return Workload(frame=frame, metadata=dict(metadata or {}))


REDRAW_INTERVAL_S = 1.0
"""The grain a seed redraws arrivals within, unless the workload says its own (``interval_s`` in
its metadata, a trace's bin): a count per interval is what a trace fixes, where in the interval
a request falls is what it leaves to chance."""


def redraw_arrivals(workload: Workload, seed: int | None) -> Workload:
    """The workload with every arrival redrawn uniformly within its interval by ``seed`` (None: as
    it is). Counts per interval, functions and payloads stay; the order within an interval is the
    seed's. On a live lab this is what a run's seed means: two runs of a pair share it, two pairs
    differ, as the simulator's seed redraws each request's work."""
    if seed is None or len(workload) == 0:
        return workload
    step = float(workload.metadata.get("interval_s") or REDRAW_INTERVAL_S)
    t = workload.frame["t_s"].to_numpy(dtype=np.float64)
    rng = np.random.default_rng([int(seed), 0x5EED])
    new = np.floor(t / step) * step + rng.uniform(0.0, step, t.size)
    new = np.minimum(new, max(float(t[-1]), 0.0)) if t.size else new
    meta = {**workload.metadata, "arrivals_redrawn": {"seed": int(seed), "interval_s": step}}
    return make_workload(new, workload.frame["function"].to_numpy(), workload.frame["payload"].to_numpy(),
                         metadata=meta, source=workload.name)


def subset(workload: Workload, keep: np.ndarray, **metadata: Any) -> Workload:
    """The requests where ``keep`` is true, with ``metadata`` added to the workload's."""
    f = workload.frame[np.asarray(keep, dtype=bool)]
    return make_workload(f["t_s"].to_numpy(), f["function"].to_numpy(), f["payload"].to_numpy(),
                         metadata={**workload.metadata, **metadata}, source=workload.name)


def check_output_path(path: str | Path, *, what: str = "file", example: str = "out.parquet") -> Path:
    """Refuse an output path that names an existing directory (checked before any work is done)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"is a directory; give a {what} name, e.g. {path / example}", file=path)
    return path


def atomic_write(
    path: str | Path, write: Callable[[Path], None], *, what: str = "file", example: str = "out.parquet"
) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path`` and rename it over ``path`` only if
    that succeeded (:func:`functions.atomic.write_atomic_with`); on any failure the temporary is
    removed and ``path`` is left as it was.

    ``path`` naming a directory, or a parent that cannot be created, is an InputError naming it.
    """
    path = check_output_path(path, what=what, example=example)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the {what} here: {err.strerror or err}", file=path) from None
    try:
        return write_atomic_with(path, write)
    except OSError as err:
        raise InputError(f"cannot write the {what}: {err.strerror or err}", file=path) from None


def write_workload(workload: Workload, path: str | Path) -> Path:
    """Write ``workload`` atomically; an empty one is refused (no backend can replay it, and
    :func:`read_workload` would refuse it)."""
    path = Path(path)
    if len(workload) == 0:
        raise InputError("the workload has no requests (0 arrivals); raise the rate or the duration", file=path)
    table = pa.Table.from_pandas(workload.frame, schema=WORKLOAD_SCHEMA, preserve_index=False)
    meta = {METADATA_KEY: json.dumps(workload.metadata, sort_keys=True, default=str).encode()}
    table = table.replace_schema_metadata(meta)
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp), what="workload file")


def _not_parquet_hint(path: Path) -> str:
    """Why a file that is not Parquet was probably given: a CSV trace, or a truncated copy."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(0, os.SEEK_END)
            size = f.tell()
    except OSError:
        return ""
    if size == 0:
        return "the file is empty"
    if head == b"PAR1":
        return "it starts like Parquet but its footer is missing: truncated or still being written?"
    if path.suffix.lower() in (".csv", ".gz", ".tsv") or (head.isascii() and head.decode("ascii").isprintable()):
        return "it looks like a CSV; turn a trace into a workload with `scoretune workload from-trace KIND FILE -o WL.parquet`"
    return "a workload is a Parquet file written by `scoretune workload synth|from-trace`"


def _unwrap(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _is_text(t: pa.DataType) -> bool:
    t = _unwrap(t)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)


def _is_number(t: pa.DataType) -> bool:
    t = _unwrap(t)
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _first_null(column: pa.ChunkedArray) -> int | None:
    if column.null_count == 0:
        return None
    return int(np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False))[0])


def _metadata(table: pa.Table, path: Path) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if not raw:
        return {}
    try:
        metadata = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise InputError(f"the Parquet schema metadata 'scoretune' is not JSON text: {err}", file=path, field="scoretune") from None
    if not isinstance(metadata, dict):
        raise InputError(
            f"the Parquet schema metadata 'scoretune' must be a JSON object, got {type(metadata).__name__}",
            file=path, field="scoretune",
        )
    return metadata


def read_workload(path: str | Path) -> Workload:
    """Read and validate a workload file; every error names the file and the column (and row).

    Accepted column types: ``t_s`` any integer or floating type (cast to float64), ``function``
    and ``payload`` string, large string or dictionary-encoded string (pandas and Polars write
    those); extra columns are ignored.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError("is a directory, not a workload file", file=path)
    if not path.exists():
        raise InputError("no such workload file", file=path)
    try:
        table = pq.ParquetFile(path).read()
    except (OSError, pa.ArrowException, ValueError) as err:
        hint = _not_parquet_hint(path)
        raise InputError(f"not a readable Parquet workload ({hint})" if hint else f"not a readable Parquet workload: {err}",
                         file=path) from None
    missing = [c for c in WORKLOAD_SCHEMA.names if c not in table.column_names]
    if missing:
        raise InputError(
            f"missing column(s) {missing}; a workload has {WORKLOAD_SCHEMA.names} (the file has {table.column_names[:8]})",
            file=path, field=missing[0],
        )
    dupes = [c for c in WORKLOAD_SCHEMA.names if table.column_names.count(c) > 1]
    if dupes:
        raise InputError("the column appears more than once", file=path, field=dupes[0])
    for name, ok, want in (("t_s", _is_number, "numbers (float64 seconds)"), ("function", _is_text, "text"),
                           ("payload", _is_text, "text (a JSON object per row)")):
        dtype = table.schema.field(name).type
        if not ok(dtype):
            raise InputError(f"column has type {dtype}; a workload's {name} must be {want}", file=path, field=name)
    if table.num_rows == 0:
        raise InputError("the workload has no requests (0 rows)", file=path)
    for name in WORKLOAD_SCHEMA.names:
        row = _first_null(table.column(name))
        if row is not None:
            raise InputError("is null; every request needs a value", file=path, row=row, field=name)
    metadata = _metadata(table, path)
    t = table.column("t_s").cast(pa.float64()).to_numpy(zero_copy_only=False)
    step = np.diff(t)
    if np.any(step < 0):
        row = int(np.flatnonzero(step < 0)[0]) + 1
        raise InputError(f"arrival times must be sorted ascending ({t[row - 1]:g} then {t[row]:g})", file=path, row=row, field="t_s")
    return make_workload(
        t,
        table.column("function").to_pylist(),
        table.column("payload").to_pylist(),
        metadata=metadata,
        source=str(path),
    )
