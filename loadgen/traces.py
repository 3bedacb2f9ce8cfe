"""Trace readers: a real public trace in, a canonical :class:`~loadgen.workload.Workload` out.

Kinds (column layouts from the upstream READMEs, see ``../shared/notes/traces-functions-locust.md``):

=====================  ==========================================================================
``alibaba-genai``      alibaba/clusterdata ``cluster-trace-v2026-GenAI/lora_request_trace.csv``: one
                       row per request (``gmt_create``, 1 s resolution; ``exec_time_seconds``); a
                       trace function is a base model (``checkpoint_model_version_id``).
``alibaba-genai-qps``  the same release's ``qps.csv``: per-container QPS samples (``timestamp_anon``,
                       ``value``, ``request_type``); summed per timestamp, held until the next sample,
                       replayed as a Poisson process at that rate; a trace function is a request type.
``alibaba-gpu2023``    ``cluster-trace-gpu-v2023/csv/openb_pod_list_*.csv``: a pod's ``creation_time``
                       is an arrival; a trace function is a pod shape (cpu, memory, GPUs).
``azure2019``          Azure Functions 2019 ``invocations_per_function_md.anon.dNN.csv``: per-minute
                       counts in columns ``1``..``1440``, spread uniformly (Poisson-conditioned) within
                       each minute; durations and memory from the sibling percentile files if present.
``azure2021``          Azure Functions 2021 invocation trace: one row per invocation (``app, func,
                       end_timestamp, duration``); start = end - duration (as InVitro's loader does).
``huawei``             sir-lab/data-release 2023 ``requests_second/day_NNN.csv`` (or ``_minute``):
                       columns ``day, time`` then one column per function id holding that second's
                       request count; an empty cell means the function had no data (0 requests).
=====================  ==========================================================================

Every reader then applies the same three steps: **rate scaling** (``rate_scale`` x: count traces
scale each window's count with stochastic rounding; per-request traces keep each request with
probability x, or make ``floor(x)`` or ``ceil(x)`` copies, spread within the trace's 1 s resolution
or shifted by up to one second), **function mapping** (:mod:`loadgen.mapping`) and **time compression** (``minutes``: the
trace's span is squeezed linearly into that many minutes, which multiplies the rate by the same
factor; combine with ``rate_scale`` to keep the rate sane). ``trace_replay=True`` sends every request
to the trace-driven function with the trace's own work as payload ``{"cpu_s", "memory_bytes"}``.

Bad input raises :class:`~loadgen.errors.TraceError` naming the file, the row (the file's line
number; the header is line 1) and the column. Trace files are read where they are, never copied.
"""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import re
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from functions.spec import FunctionSpec
from loadgen.errors import TraceError
from loadgen.mapping import TRACE_REPLAY_FUNCTION, TraceFunction, map_functions, resolve_suite
from loadgen.workload import Workload, make_workload

logger = logging.getLogger(__name__)

MAX_REQUESTS = 20_000_000
"""A guard: a schedule larger than this is almost surely a missing ``rate_scale``."""

AZURE2021_MEMORY_BYTES = 200 * 2**20
"""Azure 2021 has no memory field; InVitro assumes 200 MB (``invitro:docs/loader.md``)."""

MIB = 2**20


@dataclass(frozen=True)
class ParsedTrace:
    """A trace reduced to arrivals in trace seconds (from the trace's start), before mapping."""

    t_s: np.ndarray
    trace_function: np.ndarray
    span_s: float
    functions: list[TraceFunction]
    cpu_s: np.ndarray | None = None
    memory_bytes: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# --- CSV plumbing -------------------------------------------------------------------------------


_OPENERS: dict[str, Callable[[Path], Any]] = {
    ".gz": lambda p: gzip.open(p, "rb"),
    ".bz2": lambda p: bz2.open(p, "rb"),
    ".xz": lambda p: lzma.open(p, "rb"),
}
"""The compressions pandas infers from the suffix that are a single stream (``.zip`` is left to pandas)."""

_HEAD_BYTES = 65536


def _sniff(path: Path) -> None:
    """Refuse, with the reason, a file that is plainly not CSV text: judged on its first 64 KiB
    (decompressed), so a multi-gigabyte trace costs nothing extra. A truncated or corrupt
    compressed stream is reported here when it breaks that early, otherwise by the full read."""
    opener = _OPENERS.get(path.suffix.lower(), lambda p: open(p, "rb"))
    try:
        with open(path, "rb") as raw:
            magic = raw.read(4)
        with opener(path) as f:
            head = f.read(_HEAD_BYTES)
    except (EOFError, zlib.error, lzma.LZMAError) as err:
        raise TraceError(f"cannot read: truncated or corrupt {path.suffix} file ({err}); an interrupted download?", file=path) from None
    except OSError as err:  # gzip.BadGzipFile, permission denied, ...
        raise TraceError(f"cannot read: {err.strerror or err}", file=path) from None
    if magic == b"PAR1":
        raise TraceError("cannot read as CSV: a Parquet file, not a CSV trace (a workload? see `scoretune workload show`)", file=path)
    if magic[:2] == b"\x1f\x8b" and path.suffix.lower() != ".gz":
        raise TraceError(f"cannot read as CSV: gzip-compressed but not named .gz; rename it to {path.name}.gz", file=path)
    nul = head.find(b"\x00")
    if nul >= 0:
        raise TraceError(f"cannot read as CSV: a binary file, not text (NUL byte at offset {nul})", file=path)
    # a multi-byte character may be cut at the end of the sample: only earlier bytes count
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:
            raise TraceError(
                f"cannot read as CSV: not UTF-8 text (byte 0x{head[err.start]:02x} at offset {err.start}); a binary file or another encoding?",
                file=path,
            ) from None
    if not head.strip():
        raise TraceError("cannot read as CSV: the file is empty (a trace CSV starts with a header line)", file=path)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _read_csv(path: Path, required: Sequence[str]) -> pd.DataFrame:
    """All cells as strings (parsed per column below, so every bad cell can be located).

    Refuses, naming the file (and the line where pandas knows it): a missing file, a directory,
    binary or non-UTF-8 content, a truncated compressed file, rows with more fields than the
    header, a missing required column and a header with no data rows.
    """
    if path.is_dir():
        raise TraceError("is a directory; this trace kind reads one CSV file", file=path)
    if not path.exists():
        raise TraceError("no such trace file", file=path)
    _sniff(path)
    try:
        with warnings.catch_warnings():
            # index_col=False: a first data row longer than the header would otherwise silently
            # become an index and shift every column; pandas warns instead, which is an error here
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, index_col=False)
    except pd.errors.ParserWarning:
        raise TraceError("cannot read as CSV: the row has more fields than the header", file=path, row=2) from None
    except pd.errors.ParserError as err:
        text = _one_line(err)
        m = re.search(r"line (\d+)", text)
        raise TraceError(f"cannot read as CSV: {text}", file=path, row=int(m.group(1)) if m else None) from None
    except pd.errors.EmptyDataError:
        raise TraceError("cannot read as CSV: the file is empty (a trace CSV starts with a header line)", file=path) from None
    except UnicodeDecodeError as err:
        raise TraceError(f"cannot read as CSV: not UTF-8 text (byte 0x{err.object[err.start]:02x}); a binary file or another encoding?",
                         file=path) from None
    except (EOFError, zlib.error, lzma.LZMAError) as err:
        raise TraceError(f"cannot read: truncated or corrupt {path.suffix} file ({_one_line(err)}); an interrupted download?",
                         file=path) from None
    except (OSError, ValueError) as err:
        raise TraceError(f"cannot read as CSV: {_one_line(err)}", file=path) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise TraceError(
            f"missing column {missing[0]!r} (the file has {list(frame.columns)[:12]})", file=path, field=missing[0]
        )
    if len(frame) == 0:
        raise TraceError("the file has a header but no data rows", file=path)
    return frame


def _line(i: int) -> int:
    return int(i) + 2


def _numbers(
    frame: pd.DataFrame, col: str, path: Path, *, empty: float | None = None, minimum: float | None = 0.0,
    what: str = "value",
) -> np.ndarray:
    """Column ``col`` as float64; empty cells become ``empty`` (or are an error when it is None);
    unparsable, NaN, infinite or below-``minimum`` cells raise with the file line."""
    s = frame[col].astype(str).str.strip()
    blank = (s == "").to_numpy()
    values = pd.to_numeric(s.where(~blank, "0"), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan).copy()
    if empty is not None:
        values[blank] = empty
    bad = ~np.isfinite(values) | (blank if empty is None else np.zeros_like(blank))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raw = frame[col].iloc[i]
        reason = "is empty" if blank[i] else "is not a finite number"
        raise TraceError(f"{what} {reason}: {raw!r}", file=path, row=_line(i), field=col)
    if minimum is not None and (values < minimum).any():
        i = int(np.flatnonzero(values < minimum)[0])
        raise TraceError(f"{what} must be >= {minimum:g}, got {float(values[i])!r}", file=path, row=_line(i), field=col)
    return values


def _strings(frame: pd.DataFrame, col: str, path: Path, *, empty: str | None = None) -> np.ndarray:
    s = frame[col].astype(str).str.strip()
    blank = (s == "").to_numpy()
    if empty is not None:
        s = s.where(~blank, empty)
    elif blank.any():
        i = int(np.flatnonzero(blank)[0])
        raise TraceError("is empty", file=path, row=_line(i), field=col)
    return s.to_numpy(dtype=object)


def _scale_counts(counts: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """``counts x scale`` rounded stochastically (unbiased: the expected total is exact)."""
    if scale == 1.0:
        return counts.astype(np.int64)
    x = counts * scale
    base = np.floor(x)
    return (base + (rng.random(x.shape) < (x - base))).astype(np.int64)


def _spread(counts: np.ndarray, rng: np.random.Generator, *, file: Path) -> tuple[np.ndarray, np.ndarray]:
    """For a grid of window counts: the flat index of the window each arrival falls in, and its
    offset as a fraction of the window, uniform. Uniform order statistics are a Poisson process
    conditioned on its count (InVitro's exponential IATs rescaled to the window)."""
    total = int(counts.sum())
    if total > MAX_REQUESTS:
        raise TraceError(f"{total} requests exceed the {MAX_REQUESTS} limit; lower --rate-scale", file=file, field="rate_scale")
    flat = np.repeat(np.arange(counts.size), counts.ravel())
    return flat, rng.random(flat.size)


def _scale_requests(n: int, scale: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Row index of every output request (rows repeated or dropped) and the shift of each copy:
    0 for a row's first copy, U(0, 1) s for the extra ones, so copies do not arrive in lockstep."""
    copies = _scale_counts(np.ones(n), scale, rng)
    if int(copies.sum()) > MAX_REQUESTS:
        raise TraceError(f"{int(copies.sum())} requests exceed the {MAX_REQUESTS} limit; lower --rate-scale", field="rate_scale")
    idx = np.repeat(np.arange(n), copies)
    first = np.ones(idx.size, dtype=bool)
    first[1:] = idx[1:] != idx[:-1]
    shift = np.where(first, 0.0, rng.random(idx.size))
    return idx, shift


def _profiles(names: np.ndarray, durations: np.ndarray | None = None, memory: np.ndarray | None = None) -> list[TraceFunction]:
    """Per trace function: invocation count and mean duration / memory over its requests."""
    frame = pd.DataFrame({"f": names})
    if durations is not None:
        frame["d"] = durations
    if memory is not None:
        frame["m"] = memory
    g = frame.groupby("f", sort=True)
    counts = g.size()
    d = g["d"].mean() if durations is not None else None
    m = g["m"].mean() if memory is not None else None
    return [
        TraceFunction(
            str(name),
            int(counts[name]),
            float(d[name]) if d is not None else None,
            float(m[name]) if m is not None else None,
        )
        for name in counts.index
    ]


# --- readers ------------------------------------------------------------------------------------


def parse_alibaba_genai(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    frame = _read_csv(path, ["gmt_create", "exec_time_seconds", "checkpoint_model_version_id"])
    stamps = pd.to_datetime(frame["gmt_create"].astype(str).str.strip(), format="%Y-%m-%d %H:%M:%S", errors="coerce")
    bad = stamps.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"time is not 'YYYY-MM-DD HH:MM:SS': {frame['gmt_create'].iloc[i]!r}", file=path, row=_line(i), field="gmt_create"
        )
    secs = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    exec_s = _numbers(frame, "exec_time_seconds", path, what="execution time")
    # a few rows have no base model (anonymised away upstream): one "unknown" trace function
    model = _strings(frame, "checkpoint_model_version_id", path, empty="unknown")
    idx, _ = _scale_requests(len(frame), rate_scale, rng)
    t = secs[idx] + rng.random(idx.size)  # 1 s resolution: every copy spread within its second
    return ParsedTrace(
        t_s=t, trace_function=model[idx], span_s=float(secs.max()) + 1.0, functions=_profiles(model, exec_s),
        cpu_s=exec_s[idx], memory_bytes=None, extra={"trace_start": str(stamps.min())},
    )


def parse_alibaba_genai_qps(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    frame = _read_csv(path, ["timestamp_anon", "value", "request_type"])
    ts = _numbers(frame, "timestamp_anon", path, minimum=None, what="timestamp")
    qps = _numbers(frame, "value", path, what="QPS")
    rtype = _strings(frame, "request_type", path)
    total = pd.DataFrame({"t": ts, "r": rtype, "v": qps}).groupby(["r", "t"], sort=True)["v"].sum()
    t0 = float(ts.min())
    all_t = np.unique(ts)
    gap = float(np.median(np.diff(all_t))) if all_t.size > 1 else 60.0
    end = float(all_t.max()) + gap
    times, names, counts = [], [], {}
    expected = 0.0
    for r, series in total.groupby(level=0, sort=True):
        starts = series.index.get_level_values(1).to_numpy(dtype=np.float64)
        rates = series.to_numpy(dtype=np.float64) * rate_scale
        ends = np.append(starts[1:], end)
        lam = rates * (ends - starts)
        expected += float(lam.sum())
        # refuse before drawing: np.repeat of an absurd QPS would exhaust memory first
        if not np.isfinite(expected) or expected > MAX_REQUESTS:
            raise TraceError(f"about {expected:.3g} requests (QPS x sample interval), over the {MAX_REQUESTS} limit; "
                             "lower --rate-scale", file=path, field="rate_scale")
        n = rng.poisson(lam)
        seg = np.repeat(np.arange(starts.size), n)
        times.append(starts[seg] + rng.random(seg.size) * (ends - starts)[seg] - t0)
        names.append(np.full(seg.size, str(r), dtype=object))
        counts[str(r)] = int(seg.size)
    return ParsedTrace(
        t_s=np.concatenate(times), trace_function=np.concatenate(names), span_s=end - t0,
        functions=[TraceFunction(r, c) for r, c in counts.items()], extra={"sample_interval_s": gap},
    )


def parse_alibaba_gpu2023(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    frame = _read_csv(path, ["name", "cpu_milli", "memory_mib", "creation_time"])
    created = _numbers(frame, "creation_time", path, what="creation time")
    cpu = _numbers(frame, "cpu_milli", path, what="cpu")
    mem = _numbers(frame, "memory_mib", path, what="memory")
    gpus = _numbers(frame, "num_gpu", path, empty=0.0, what="GPU count") if "num_gpu" in frame else np.zeros(len(frame))
    gpu_milli = _numbers(frame, "gpu_milli", path, empty=0.0, what="GPU share") if "gpu_milli" in frame else np.zeros(len(frame))
    shape = np.asarray(
        [f"{c:g}m-{m:g}Mi-{g:g}x{gm:g}gpu" for c, m, g, gm in zip(cpu, mem, gpus, gpu_milli, strict=True)], dtype=object
    )
    created = created - created.min()
    idx, _ = _scale_requests(len(frame), rate_scale, rng)
    t = created[idx] + rng.random(idx.size)  # 1 s resolution: every copy spread within its second
    fns = _profiles(shape, None, mem * MIB)
    # pods carry memory but no request duration: mapping falls back to popularity (see mapping.py)
    fns = [TraceFunction(f.name, f.count, None, f.memory_bytes) for f in fns]
    return ParsedTrace(t_s=t, trace_function=shape[idx], span_s=float(created.max()) + 1.0, functions=fns)


def _azure2019_siblings(path: Path) -> tuple[Path | None, Path | None]:
    """The durations and memory files that go with an invocations file (upstream or InVitro names)."""
    name = path.name
    dur = [name.replace("invocations_per_function_md", "function_durations_percentiles"), "durations.csv"]
    mem = [name.replace("invocations_per_function_md", "app_memory_percentiles"), "memory.csv"]

    def first(cands: list[str]) -> Path | None:
        for c in cands:
            p = path.with_name(c)
            if c != name and p.exists():
                return p
        return None

    return first(dur), first(mem)


_DUR_PCTS = (0, 1, 25, 50, 75, 99, 100)
_MEM_PCTS = (1, 5, 25, 50, 75, 95, 99, 100)


def _quantile_draw(q: np.ndarray, points: np.ndarray, pcts: Sequence[int]) -> np.ndarray:
    """Interpolate row ``i`` of ``points`` (values at the percentiles ``pcts``) at quantile ``q[i]``:
    InVitro's sampler (a uniform quantile, linear between the published percentiles, clamped to
    the outer ones), vectorised over rows."""
    x = np.asarray(pcts, dtype=np.float64) / 100.0
    q = np.clip(q, x[0], x[-1])
    hi = np.clip(np.searchsorted(x, q, side="right"), 1, x.size - 1)
    lo = hi - 1
    rows = np.arange(q.size)
    w = (q - x[lo]) / (x[hi] - x[lo])
    return points[rows, lo] + w * (points[rows, hi] - points[rows, lo])


def parse_azure2019(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    if path.is_dir():
        cands = sorted(p for p in path.glob("*invocations*.csv"))
        if len(cands) != 1:
            raise TraceError(f"expected one invocations CSV in the directory, found {[p.name for p in cands]}", file=path)
        path = cands[0]
    frame = _read_csv(path, ["HashApp", "HashFunction"])
    minutes = [c for c in frame.columns if c.isdigit()]
    if not minutes:
        raise TraceError("no per-minute count columns ('1'..'1440')", file=path, field="1")
    minute_no = np.asarray([int(c) for c in minutes])
    app = _strings(frame, "HashApp", path)
    func = _strings(frame, "HashFunction", path)
    ids = np.asarray([f"{a[:8]}/{f[:8]}" for a, f in zip(app, func, strict=True)], dtype=object)
    counts = np.stack([_numbers(frame, c, path, what="count") for c in minutes], axis=1)  # (functions, minutes)
    if np.any(counts != np.floor(counts)):
        r, c = np.argwhere(counts != np.floor(counts))[0]
        raise TraceError(f"count must be a whole number, got {float(counts[r, c])!r}", file=path, row=_line(r), field=minutes[c])
    scaled = _scale_counts(counts, rate_scale, rng)
    flat, frac = _spread(scaled, rng, file=path)
    row, col = np.divmod(flat, len(minutes))
    t = ((minute_no - minute_no.min())[col] + frac) * 60.0
    dur_path, mem_path = _azure2019_siblings(path)
    duration_s = memory = None
    cpu_s = mem_b = None
    extra: dict[str, Any] = {"invocations_file": str(path)}
    if dur_path is not None:
        d = _read_csv(dur_path, ["HashApp", "HashFunction", "Average"] + [f"percentile_Average_{p}" for p in _DUR_PCTS])
        key = dict(zip(zip(_strings(d, "HashApp", dur_path), _strings(d, "HashFunction", dur_path), strict=True), range(len(d)), strict=True))
        avg = _numbers(d, "Average", dur_path, what="duration") / 1000.0
        pts = np.stack([_numbers(d, f"percentile_Average_{p}", dur_path, what="duration") for p in _DUR_PCTS], axis=1) / 1000.0
        at = np.asarray([key.get((a, f), -1) for a, f in zip(app, func, strict=True)])
        if np.all(at >= 0):
            duration_s = avg[at]
            cpu_s = _quantile_draw(rng.random(row.size), pts[at][row], _DUR_PCTS)
        else:
            logger.warning("%s: %d functions lack durations; mapping by popularity", dur_path, int((at < 0).sum()))
        extra["durations_file"] = str(dur_path)
    if mem_path is not None:
        m = _read_csv(mem_path, ["HashApp", "AverageAllocatedMb"] + [f"AverageAllocatedMb_pct{p}" for p in _MEM_PCTS])
        m_app = _strings(m, "HashApp", mem_path)
        per_fn = "HashFunction" in m.columns
        m_key = list(zip(m_app, _strings(m, "HashFunction", mem_path), strict=True)) if per_fn else list(m_app)
        key = dict(zip(m_key, range(len(m)), strict=True))
        avg = _numbers(m, "AverageAllocatedMb", mem_path, what="memory") * MIB
        pts = np.stack([_numbers(m, f"AverageAllocatedMb_pct{p}", mem_path, what="memory") for p in _MEM_PCTS], axis=1) * MIB
        at = np.asarray([key.get((a, f) if per_fn else a, -1) for a, f in zip(app, func, strict=True)])
        if np.all(at >= 0):
            # upstream memory is per app: split evenly over the app's functions (InVitro's sampler)
            share = np.ones(len(frame)) if per_fn else 1.0 / pd.Series(app).map(pd.Series(app).value_counts()).to_numpy()
            memory = avg[at] * share
            mem_b = _quantile_draw(rng.random(row.size), pts[at][row], _MEM_PCTS) * share[row]
        extra["memory_file"] = str(mem_path)
    per_fn_counts = counts.sum(axis=1)
    fns = [
        TraceFunction(
            str(ids[i]), int(per_fn_counts[i]),
            float(duration_s[i]) if duration_s is not None else None,
            float(memory[i]) if memory is not None else None,
        )
        for i in range(len(frame))
    ]
    return ParsedTrace(
        t_s=t, trace_function=ids[row], span_s=float(minute_no.max() - minute_no.min() + 1) * 60.0,
        functions=fns, cpu_s=cpu_s, memory_bytes=mem_b, extra=extra,
    )


def parse_azure2021(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    frame = _read_csv(path, ["app", "func", "end_timestamp", "duration"])
    end = _numbers(frame, "end_timestamp", path, what="end time")
    dur = _numbers(frame, "duration", path, what="duration")
    ids = np.asarray(
        [f"{a[:8]}/{f[:8]}" for a, f in zip(_strings(frame, "app", path), _strings(frame, "func", path), strict=True)],
        dtype=object,
    )
    start = np.clip(end - dur, 0.0, None)
    start = start - start.min()
    idx, shift = _scale_requests(len(frame), rate_scale, rng)
    mem = np.full(idx.size, float(AZURE2021_MEMORY_BYTES))
    return ParsedTrace(
        t_s=start[idx] + shift, trace_function=ids[idx], span_s=float(start.max()) + 1.0, functions=_profiles(ids, dur),
        cpu_s=dur[idx], memory_bytes=mem,
    )


def parse_huawei(path: Path, rate_scale: float, rng: np.random.Generator) -> ParsedTrace:
    files = sorted(path.glob("day_*.csv")) or sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files:
        raise TraceError("no day_*.csv files in the directory", file=path)
    times, counts, names_all = [], [], None
    for f in files:
        frame = _read_csv(f, ["time"])
        fn_cols = [c for c in frame.columns if c not in ("day", "time") and not c.startswith("Unnamed")]
        if not fn_cols:
            raise TraceError("no function columns besides 'day' and 'time'", file=f)
        if names_all is None:
            names_all = fn_cols
        elif fn_cols != names_all:
            raise TraceError(f"function columns differ from {files[0].name}", file=f, field=fn_cols[0])
        times.append(_numbers(frame, "time", f, what="time"))
        counts.append(np.stack([_numbers(frame, c, f, empty=0.0, what="request count") for c in fn_cols], axis=1))
    assert names_all is not None
    ts = np.concatenate(times)
    c = np.concatenate(counts)
    uniq = np.unique(ts)
    window = float(np.median(np.diff(uniq))) if uniq.size > 1 else 1.0
    ts = ts - ts.min()
    scaled = _scale_counts(c, rate_scale, rng)
    flat, frac = _spread(scaled, rng, file=path)
    row, col = np.divmod(flat, len(names_all))
    t = ts[row] + frac * window
    names = np.asarray([f"fn{n}" for n in names_all], dtype=object)
    per_fn = c.sum(axis=0)
    return ParsedTrace(
        t_s=t, trace_function=names[col], span_s=float(ts.max()) + window,
        functions=[TraceFunction(str(names[i]), int(per_fn[i])) for i in range(len(names)) if per_fn[i] > 0],
        extra={"window_s": window, "files": [str(f) for f in files]},
    )


def _window(parsed: ParsedTrace, start: float, end: float) -> ParsedTrace:
    """The arrivals in ``[start, end)`` trace seconds, shifted to start at 0."""
    if not (np.isfinite(start) and np.isfinite(end) and 0 <= start < end):
        raise TraceError(f"window must satisfy 0 <= start < end, got ({start!r}, {end!r})", field="window_s")
    span = min(end, parsed.span_s) - start
    if span <= 0:
        raise TraceError(f"window starts at {start:g} s, after the trace ends ({parsed.span_s:g} s)", field="window_s")
    keep = (parsed.t_s >= start) & (parsed.t_s < end)
    sel = np.flatnonzero(keep)
    names, counts = np.unique(parsed.trace_function[sel].astype(str), return_counts=True)
    n_in = dict(zip(names.tolist(), counts.tolist(), strict=True))
    functions = [TraceFunction(f.name, n_in[f.name], f.duration_s, f.memory_bytes) for f in parsed.functions if f.name in n_in]
    return ParsedTrace(
        t_s=parsed.t_s[sel] - start, trace_function=parsed.trace_function[sel],
        span_s=span,
        functions=functions,
        cpu_s=None if parsed.cpu_s is None else parsed.cpu_s[sel],
        memory_bytes=None if parsed.memory_bytes is None else parsed.memory_bytes[sel],
        extra={**parsed.extra, "trace_window_s": [start, end]},
    )


READERS: dict[str, Callable[[Path, float, np.random.Generator], ParsedTrace]] = {
    "alibaba-genai": parse_alibaba_genai,
    "alibaba-genai-qps": parse_alibaba_genai_qps,
    "alibaba-gpu2023": parse_alibaba_gpu2023,
    "azure2019": parse_azure2019,
    "azure2021": parse_azure2021,
    "huawei": parse_huawei,
}
KINDS = tuple(READERS)


def read_trace(
    kind: str,
    path: str | Path,
    *,
    minutes: float | None = None,
    rate_scale: float = 1.0,
    functions: Sequence[str] | None = None,
    seed: int = 0,
    trace_replay: bool = False,
    specs: Mapping[str, FunctionSpec] | None = None,
    window_s: tuple[float, float] | None = None,
) -> Workload:
    """Turn a trace file into a Workload (see the module docstring for every step).

    ``window_s = (start, end)`` keeps only the arrivals in that span of trace seconds (from the
    trace's start) before compression, e.g. ``(0, 86400)`` for the first day of a multi-day trace.

    ``functions`` restricts the suite subset trace functions map onto (default: every discovered
    spec); ``specs`` overrides discovery (tests build specs with ``parse_spec``). With ``trace_replay``
    every request goes to the trace-driven function with the trace's own per-request work as payload,
    which needs a trace with durations (alibaba-genai, azure2019 with its durations file, azure2021).
    """
    if kind not in READERS:
        raise TraceError(f"unknown trace kind {kind!r}; known: {list(KINDS)}", field="kind")
    if not (np.isfinite(rate_scale) and rate_scale > 0):
        raise TraceError(f"must be > 0, got {rate_scale!r}", field="rate_scale")
    if minutes is not None and not (np.isfinite(minutes) and minutes > 0):
        raise TraceError(f"must be > 0, got {minutes!r}", field="minutes")
    path = Path(path)
    rng = np.random.default_rng(seed)
    parsed = READERS[kind](path, float(rate_scale), rng)
    if window_s is not None:
        parsed = _window(parsed, float(window_s[0]), float(window_s[1]))
    factor = (float(minutes) * 60.0 / parsed.span_s) if minutes is not None else 1.0
    t = parsed.t_s * factor
    meta: dict[str, Any] = {
        "source": kind,
        "name": f"{kind}-{path.stem.split('.')[0]}",
        "file": str(path),
        "seed": seed,
        "rate_scale": float(rate_scale),
        "minutes": minutes,
        "time_compression": factor,
        "trace_span_s": parsed.span_s,
        "duration_s": parsed.span_s * factor,
        "trace_functions": len(parsed.functions),
        **parsed.extra,
    }
    if trace_replay:
        if parsed.cpu_s is None:
            raise TraceError(f"trace kind {kind!r} has no per-request durations to replay", file=path, field="trace_replay")
        fn = np.full(t.size, TRACE_REPLAY_FUNCTION, dtype=object)
        mem = parsed.memory_bytes
        payload = [
            json.dumps({"cpu_s": round(float(c), 6)} if mem is None else {"cpu_s": round(float(c), 6), "memory_bytes": int(m)})
            for c, m in zip(parsed.cpu_s, mem if mem is not None else np.zeros(t.size), strict=True)
        ]
        meta["mapping"] = {"method": "trace-replay"}
    else:
        names, suite = resolve_suite(functions, specs)
        mapping = map_functions(parsed.functions, names, suite, seed=seed)
        fn = mapping(parsed.trace_function)
        payload = None
        meta["mapping"] = {"method": mapping.method, "suite": names, "assignment": mapping.assignment}
    logger.info("%s: %d requests over %.1f s (compression x%.4g)", path, t.size, meta["duration_s"], factor)
    return make_workload(t, fn, payload, metadata=meta, source=str(path))
