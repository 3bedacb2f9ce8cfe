"""The RunResult contract (DESIGN.md): one run directory, the same for every backend.

``requests.parquet`` has one row per scheduled request; ``placements.parquet`` one row per pod the
run created; ``summary.json`` the counts and latency figures computed *from* the requests table.
Everything the project reports is derived from these files, so the schemas are explicit pyarrow
schemas and the summary is a pure function of the table.

``requests.parquet`` may carry the optional columns of :data:`OPTIONAL_REQUEST_FIELDS` after the
schema's: ``error``, why a request that is not ``ok`` failed ("connection refused", "HTTP 503",
"timeout after 30 s"), and ``pod``, the pod that answered (the runtime's ``X-Scoretune-Pod``),
which the Locust replay records and the simulator has no use for; and, on OpenWhisk, each
activation's ``activation_id``, ``wait_s``, ``init_s`` and ``duration_s``.
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
from loadgen.where import current_where, where_time_went
from loadgen.workload import atomic_write

STATUSES = ("ok", "error", "timeout")

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("function", pa.string(), nullable=False),
        pa.field("scheduled_s", pa.float64(), nullable=False),
        pa.field("sent_s", pa.float64()),
        pa.field("finished_s", pa.float64()),
        pa.field("latency_s", pa.float64()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("http_status", pa.int32()),
        pa.field("node", pa.string()),
        pa.field("cold_start", pa.bool_()),
    ]
)

OPTIONAL_REQUEST_FIELDS = (
    pa.field("error", pa.string()), pa.field("pod", pa.string()),
    # OpenWhisk's activation record (apache/openwhisk docs/annotations.md): its id, waitTime,
    # initTime (present only when the container was initialised: a cold start) and duration
    pa.field("activation_id", pa.string()), pa.field("wait_s", pa.float64()), pa.field("init_s", pa.float64()),
    pa.field("duration_s", pa.float64()),
)
"""Columns a requests table may add after REQUESTS_SCHEMA's (written only when present)."""

PLACEMENTS_SCHEMA = pa.schema(
    [
        pa.field("pod", pa.string(), nullable=False),
        pa.field("function", pa.string(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("created_s", pa.float64(), nullable=False),
        pa.field("scheduled_s", pa.float64()),
        pa.field("ready_s", pa.float64()),
        pa.field("deleted_s", pa.float64()),
        pa.field("image_pull_s", pa.float64()),
        pa.field("start_s", pa.float64()),
        pa.field("init_s", pa.float64()),
    ]
)


_TIMES = ("created_s", "scheduled_s", "ready_s", "deleted_s", "image_pull_s", "start_s", "init_s")


@dataclass(frozen=True)
class PodTimes:
    """One row of the placements table, the one record every backend gives for a pod its run
    created: where it went and its lifecycle, in seconds from the run's t = 0 (``created_s``,
    ``scheduled_s``, ``ready_s``, ``deleted_s``), with the cold-start parts where the backend knows
    them (``image_pull_s``, ``start_s``, ``init_s``: durations). ``None``: not seen."""

    pod: str
    function: str
    node: str | None
    created_s: float
    scheduled_s: float | None = None
    ready_s: float | None = None
    deleted_s: float | None = None
    image_pull_s: float | None = None
    start_s: float | None = None
    init_s: float | None = None

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PLACEMENTS_SCHEMA.names}


def placements_table(pods: list[PodTimes] | list[dict[str, Any]]) -> pd.DataFrame:
    """The placements table of ``pods`` (records, or their rows as a backend sent them), typed as
    :data:`PLACEMENTS_SCHEMA` says: every time a float64 with NaN for not seen."""
    if not pods:
        return empty_placements()
    rows = [p.to_row() if isinstance(p, PodTimes) else p for p in pods]
    columns: dict[str, Any] = {name: [r.get(name) for r in rows] for name in ("pod", "function", "node")}
    for name in _TIMES:
        columns[name] = np.array([np.nan if r.get(name) is None else r[name] for r in rows], dtype=np.float64)
    return pd.DataFrame(columns)[PLACEMENTS_SCHEMA.names]


def empty_requests() -> pd.DataFrame:
    return REQUESTS_SCHEMA.empty_table().to_pandas()


def empty_placements() -> pd.DataFrame:
    return PLACEMENTS_SCHEMA.empty_table().to_pandas()


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def summarize_arrays(
    *,
    ok: np.ndarray,
    errors: int,
    timeouts: int,
    cold_starts: int,
    latency_s: np.ndarray,
    lag_s: np.ndarray,
    late_threshold_s: float = 0.020,
) -> dict[str, Any]:
    """The summary from arrays: ``ok`` a boolean mask over all requests, ``latency_s`` the
    latencies of the ok ones, ``lag_s`` the dispatch lags known. The one definition of every
    figure, shared by :func:`summarize` and the simulator's no-disk fast path."""
    lat = latency_s[np.isfinite(latency_s)]
    lag = lag_s[np.isfinite(lag_s)]
    return {
        "count": int(len(ok)),
        "ok": int(ok.sum()),
        "errors": int(errors),
        "timeouts": int(timeouts),
        "cold_starts": int(cold_starts),
        "latency_mean_s": float(lat.mean()) if lat.size else None,
        "latency_p50_s": _pct(lat, 50),
        "latency_p95_s": _pct(lat, 95),
        "latency_p99_s": _pct(lat, 99),
        "latency_max_s": float(lat.max()) if lat.size else None,
        "dispatch_lag_p50_s": _pct(lag, 50),
        "dispatch_lag_p99_s": _pct(lag, 99),
        "late_dispatches": int((lag > late_threshold_s).sum()),
        "late_threshold_s": late_threshold_s,
    }


def summarize(requests: pd.DataFrame, *, late_threshold_s: float = 0.020) -> dict[str, Any]:
    """Counts and latency statistics of a requests table.

    Latency figures are over *ok* requests (a failed request has no meaningful latency, and is
    counted under errors/timeouts instead, never dropped). Dispatch lag is ``sent_s -
    scheduled_s``: how late the load generator itself was.
    """
    status = requests["status"].to_numpy(dtype=object)
    ok = status == "ok"
    sent = requests["sent_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    cold = requests["cold_start"].to_numpy(dtype=object)
    return summarize_arrays(
        ok=ok,
        errors=int((status == "error").sum()),
        timeouts=int((status == "timeout").sum()),
        cold_starts=sum(1 for c in cold if c is True),
        latency_s=requests["latency_s"].to_numpy(dtype=np.float64, na_value=np.nan)[ok],
        lag_s=sent - requests["scheduled_s"].to_numpy(dtype=np.float64),
        late_threshold_s=late_threshold_s,
    )


def by_start(requests: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Latency of the ok requests that met a cold start and of those that did not, apart (SeBS
    measures cold and warm invocations separately: a mean over both moves with the cold share as
    much as with either latency). ``{"cold"|"warm": {"count", "mean_s", "p50_s", "p95_s"}}``."""
    status = requests["status"].to_numpy(dtype=object)
    cold = np.array([c is True for c in requests["cold_start"].to_numpy(dtype=object)], dtype=bool)
    lat = requests["latency_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    out = {}
    for name, mask in (("cold", cold), ("warm", ~cold)):
        x = lat[(status == "ok") & mask]
        x = x[np.isfinite(x)]
        out[name] = {"count": int(x.size), "mean_s": float(x.mean()) if x.size else None,
                     "p50_s": _pct(x, 50), "p95_s": _pct(x, 95)}
    return out


def _to_table(frame: pd.DataFrame, schema: pa.Schema, what: str, optional: tuple[pa.Field, ...] = ()) -> pa.Table:
    missing = [c for c in schema.names if c not in frame.columns]
    if missing:
        raise InputError(f"{what} lacks column(s) {missing}", field=missing[0])
    extra = [f for f in optional if f.name in frame.columns]
    if extra:
        schema = pa.schema([*schema, *extra])
    return pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)


def _atomic_write_table(table: pa.Table, path: Path) -> None:
    atomic_write(path, lambda tmp: pq.write_table(table, tmp), what="table")


def _atomic_write_json(obj: Any, path: Path) -> None:
    text = json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text), what="summary")


@dataclass
class RunResult:
    """A finished (or failed) run: the tables and the summary, and where they live on disk."""

    requests: pd.DataFrame
    placements: pd.DataFrame = field(default_factory=empty_placements)
    summary: dict[str, Any] = field(default_factory=dict)
    directory: Path | None = None

    @property
    def failed(self) -> bool:
        return bool(self.summary.get("failed", False))

    def metric(self, name: str = "mean") -> float:
        """The latency metric an agent optimises: ``mean``, ``p50``, ``p95`` or ``p99`` (seconds)."""
        key = f"latency_{name}_s"
        value = self.summary.get(key)
        if value is None:
            raise InputError(f"run has no {name} latency (no successful request)", field=key)
        return float(value)


def write_run(
    directory: str | Path,
    requests: pd.DataFrame,
    placements: pd.DataFrame | None = None,
    *,
    info: dict[str, Any] | None = None,
    failed: bool = False,
    failure: str | None = None,
) -> RunResult:
    """Write a run directory; the summary is computed from ``requests`` and merged with ``info``
    (seed, versions, cluster, workload, profile). Files are written atomically, tables first, so
    a summary never describes tables that are not there."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError("is a file, not a run directory", file=directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the run directory: {err.strerror or err}", file=directory) from None
    placements = empty_placements() if placements is None else placements
    _atomic_write_table(_to_table(requests, REQUESTS_SCHEMA, "requests table", OPTIONAL_REQUEST_FIELDS),
                        directory / "requests.parquet")
    _atomic_write_table(_to_table(placements, PLACEMENTS_SCHEMA, "placements table"), directory / "placements.parquet")
    summary = summarize(requests)
    summary.update(info or {})
    # computed after ``info``: a backend's info is its load generator's summary, whose ``where``
    # knew no placements (no pods, no pulls); the section is a function of the tables written here
    summary["where"] = where_time_went(requests, placements)
    summary["by_start"] = by_start(requests)
    summary["failed"] = bool(failed)
    if failure:
        summary["failure"] = failure
    _atomic_write_json(summary, directory / "summary.json")
    return RunResult(requests=requests, placements=placements, summary=summary, directory=directory)


def read_run(directory: str | Path) -> RunResult:
    directory = Path(directory)
    for name in ("requests.parquet", "placements.parquet", "summary.json"):
        if not (directory / name).exists():
            raise InputError(f"run directory lacks {name}", file=directory)
    tables = {}
    for name in ("requests.parquet", "placements.parquet"):
        try:
            tables[name] = pq.ParquetFile(directory / name).read().to_pandas()
        except (OSError, pa.ArrowException, ValueError) as err:
            raise InputError(f"not a readable Parquet table: {err}", file=directory / name) from None
    try:
        summary = json.loads((directory / "summary.json").read_bytes().decode("utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"not a JSON summary: {err}", file=directory / "summary.json") from None
    if not isinstance(summary, dict):
        raise InputError(f"must be a JSON object, got {type(summary).__name__}", file=directory / "summary.json")
    return RunResult(requests=tables["requests.parquet"], placements=tables["placements.parquet"], summary=summary,
                     directory=directory)


def run_where(run: RunResult) -> dict[str, Any]:
    """A run's ``where`` section: its summary's if of the current version, else recomputed from its
    tables (a version-1 lab or kube summary counted no pulls)."""
    where = current_where(run.summary)
    return where if where is not None else where_time_went(run.requests, run.placements)
