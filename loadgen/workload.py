"""The canonical Workload: a columnar arrival schedule every backend replays the same way.

Columns: ``t_s`` (float64 seconds from the start, sorted ascending), ``function`` (a suite function
name) and ``payload`` (a JSON object as a string; ``"{}"`` means the function's default payload).
Provenance (source trace, seed, compression, scaling, function mapping) rides in the Parquet file's
schema metadata under the ``scoretune`` key, so a workload file says where it came from.

Parquet is written with an explicit pyarrow schema: pandas 3 would otherwise infer its new string
dtype and files would differ between pandas versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.errors import InputError

WORKLOAD_SCHEMA = pa.schema(
    [
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("function", pa.string(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)
METADATA_KEY = b"scoretune"


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


def make_workload(
    t_s: Any,
    function: Any,
    payload: Any | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    source: str = "<workload>",
) -> Workload:
    """Build a validated Workload from columns; sorts by time (stable) and checks every value."""
    t = np.asarray(t_s, dtype=np.float64)
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
        raise InputError(f"time must be a finite number >= 0, got {t[bad[0]]!r}", file=source, row=int(bad[0]), field="t_s")
    for i, f in enumerate(fn):
        if not isinstance(f, str) or not f:
            raise InputError(f"function must be a non-empty name, got {f!r}", file=source, row=i, field="function")
    order = np.argsort(t, kind="stable")
    frame = pd.DataFrame(
        {
            "t_s": t[order],
            "function": pd.array(fn[order].tolist(), dtype=object),
            "payload": pd.array(pl[order].tolist(), dtype=object),
        }
    )
    return Workload(frame=frame, metadata=dict(metadata or {}))


def write_workload(workload: Workload, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(workload.frame, schema=WORKLOAD_SCHEMA, preserve_index=False)
    meta = {METADATA_KEY: json.dumps(workload.metadata, sort_keys=True, default=str).encode()}
    table = table.replace_schema_metadata(meta)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_workload(path: str | Path) -> Workload:
    """Read and re-validate a workload file; errors name the file and the column."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise InputError("no such workload file", file=path) from None
    except (OSError, pa.ArrowInvalid) as err:
        raise InputError(f"not a Parquet workload: {err}", file=path) from None
    missing = [c for c in WORKLOAD_SCHEMA.names if c not in table.column_names]
    if missing:
        raise InputError(f"missing column(s) {missing}; a workload has {WORKLOAD_SCHEMA.names}", file=path, field=missing[0])
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    metadata = json.loads(raw) if raw else {}
    t = table.column("t_s").to_numpy(zero_copy_only=False)
    if np.any(np.diff(t) < 0):
        row = int(np.flatnonzero(np.diff(t) < 0)[0]) + 1
        raise InputError("arrival times must be sorted ascending", file=path, row=row, field="t_s")
    return make_workload(
        t,
        table.column("function").to_pylist(),
        table.column("payload").to_pylist(),
        metadata=metadata,
        source=str(path),
    )
