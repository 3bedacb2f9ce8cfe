"""``scoretune workload ...``, ``scoretune replay`` and ``scoretune bench replay``.

Registered by ``agent/cli.py``: ``workload_app`` as the ``workload`` group, :func:`replay_command`
as ``replay`` and :func:`bench_replay` under ``bench``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import typer
import yaml

from loadgen.errors import InputError, LoadgenError
from loadgen.workload import (
    MAX_TIME_S,
    Workload,
    atomic_write,
    check_output_path,
    read_workload,
    write_workload,
)

logger = logging.getLogger(__name__)

workload_app = typer.Typer(help="Build and inspect workloads (arrival schedules).", no_args_is_help=True)


def _names(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    return names or None


def _floats(text: str, field: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated numbers, got {text!r}", field=field) from None
    if not values:
        raise InputError(f"expected comma-separated numbers, got {text!r}", field=field)
    return values


def _function_shares(text: str, field: str = "--functions") -> list[str] | dict[str, float]:
    """``a,b,c`` (equal shares) or ``a=3,b=1``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InputError("at least one function is needed", field=field)
    if all("=" not in p for p in parts):
        dupes = sorted({n for n in parts if parts.count(n) > 1})
        if dupes:
            raise InputError(f"function {dupes[0]!r} is given twice", field=field)
        return parts
    shares: dict[str, float] = {}
    for p in parts:
        name, _, share = p.partition("=")
        name = name.strip()
        if not name:
            raise InputError(f"expected NAME or NAME=SHARE, got {p!r}", field=field)
        if name in shares:
            raise InputError(f"function {name!r} is given twice", field=field)
        try:
            shares[name] = float(share) if share.strip() else 1.0
        except ValueError:
            raise InputError(f"share of {name!r} is not a number: {share!r}", field=field) from None
    return shares


SYNTH_OPTIONS = {
    "rate_per_s": "--rate", "mean_rate_per_s": "--rate", "rates_per_s": "--rates", "mean_dwell_s": "--dwell",
    "step_s": "--step-s", "duration_s": "--duration", "amplitude": "--amplitude", "period_s": "--period",
    "functions": "--functions", "rate_per_s*duration_s": "--rate x --duration",
    "mean_rate_per_s*duration_s": "--rate x --duration", "rates_per_s*duration_s": "--rates x --duration",
    "rates_per_s*step_s": "--rates x --step-s",
}
"""The generators' parameter names -> the ``workload synth`` options that set them."""

FROM_TRACE_OPTIONS = {
    "kind": "KIND", "window_s": "--window", "minutes": "--minutes", "rate_scale": "--rate-scale",
    "functions": "--functions", "trace_replay": "--trace-replay",
}
"""``read_trace``'s parameter names -> the ``workload from-trace`` options."""

REPLAY_OPTIONS = {
    "target": "--target", "targets": "--targets", "timeout_s": "--timeout", "workers": "--workers",
    "host_template": "--host-template", "master_port": "--master-port",
}
"""``replay``'s parameter names -> the ``replay`` options."""


@contextmanager
def _as_options(names: dict[str, str]) -> Iterator[None]:
    """Re-raise a library InputError with its field renamed to the option the user typed (the
    library names its Python parameters, e.g. ``rate_per_s`` for ``--rate``); file and row stay."""
    try:
        yield
    except InputError as err:
        if err.field not in names:
            raise
        raise type(err)(err.detail, file=err.file, row=err.row, field=names[err.field]) from None


@workload_app.command("from-trace")
def from_trace(
    kind: str = typer.Argument(..., help="alibaba-genai, alibaba-genai-qps, alibaba-gpu2023, azure2019, azure2021, huawei"),
    path: Path = typer.Argument(..., help="the trace file (or directory, for azure2019 / huawei); read in place"),
    minutes: float | None = typer.Option(None, "--minutes", help="compress the trace's span into this many minutes"),
    rate_scale: float = typer.Option(1.0, "--rate-scale", help="multiply the arrival rate (thin or replicate)"),
    functions: str | None = typer.Option(None, "--functions", help="suite functions to map onto, comma-separated"),
    seed: int = typer.Option(0, "--seed", min=0),
    trace_replay: bool = typer.Option(False, "--trace-replay", help="send all to the trace-driven function with the trace's own durations"),
    window: str | None = typer.Option(None, "--window", help="START,END in trace seconds: keep only that span"),
    out: Path = typer.Option(..., "-o", "--out", help="workload Parquet file to write"),
) -> None:
    """Turn a public trace into a workload."""
    from loadgen.traces import read_trace

    check_output_path(out, what="workload file")
    span = None
    if window is not None:
        bounds = _floats(window, "--window")
        if len(bounds) != 2:
            raise InputError(f"expected START,END, got {window!r}", field="--window")
        span = (bounds[0], bounds[1])
    with _as_options(FROM_TRACE_OPTIONS):
        wl = read_trace(kind, path, minutes=minutes, rate_scale=rate_scale, functions=_names(functions), seed=seed,
                        trace_replay=trace_replay, window_s=span)
    write_workload(wl, out)
    _print_summary(wl, out)


@workload_app.command("synth")
def synth(
    kind: str = typer.Argument(..., help="poisson, mmpp, diurnal or steps"),
    functions: str = typer.Option(..., "--functions", help="a,b,c (equal shares) or a=3,b=1"),
    rate: float = typer.Option(10.0, "--rate", help="poisson: rate; diurnal: mean rate (requests/s)"),
    rates: str = typer.Option("2,50", "--rates", help="mmpp: rate per state; steps: rate per step (requests/s)"),
    dwell: str = typer.Option("10,2", "--dwell", help="mmpp: mean time in each state (s)"),
    step_s: str = typer.Option("60", "--step-s", help="steps: length of each step, one or one per step (s)"),
    duration: float = typer.Option(600.0, "--duration", help="seconds (steps: the sum of the steps)"),
    amplitude: float = typer.Option(0.5, "--amplitude", help="diurnal: relative swing in [0, 1]"),
    period: float | None = typer.Option(None, "--period", help="diurnal: period (s), default the duration"),
    seed: int = typer.Option(0, "--seed", min=0),
    out: Path = typer.Option(..., "-o", "--out", help="workload Parquet file to write"),
) -> None:
    """Generate a synthetic workload with a seed.

    Function names must be suite functions (``functions/*/spec.yaml``), as ``from-trace`` requires:
    a workload naming a function the suite lacks would only fail later, in a replay or simulation.
    """
    from loadgen import synth as gen
    from loadgen.mapping import resolve_suite

    if kind not in gen.GENERATORS:
        raise InputError(f"unknown generator {kind!r}; known: {sorted(gen.GENERATORS)}", field="kind")
    check_output_path(out, what="workload file")
    fns = _function_shares(functions)
    try:
        resolve_suite(list(fns), None)
    except InputError as err:
        raise InputError(err.detail, field="--functions") from None
    with _as_options(SYNTH_OPTIONS):
        if kind == "poisson":
            wl = gen.poisson(rate, duration, fns, seed=seed)
        elif kind == "mmpp":
            wl = gen.mmpp(_floats(rates, "--rates"), _floats(dwell, "--dwell"), duration, fns, seed=seed)
        elif kind == "diurnal":
            wl = gen.diurnal(rate, duration, fns, amplitude=amplitude, period_s=period, seed=seed)
        else:
            lengths = _floats(step_s, "--step-s")
            wl = gen.steps(_floats(rates, "--rates"), lengths[0] if len(lengths) == 1 else lengths, fns, seed=seed)
    write_workload(wl, out)
    _print_summary(wl, out)


NICE_BINS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0,
               300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0)
"""Bin widths a reader takes in at a glance: 1-2-5 below a second, then 1 s ... 1 min ... 1 h ... 1 day."""

PEAK_WINDOW_S = 1.0
"""The window of the reported peak rate: the most arrivals in any 1 s span, whatever the plot's bins."""


def bin_width(duration_s: float, target_bins: int = 200) -> float:
    """The smallest round width (:data:`NICE_BINS_S`, whole days beyond) giving at most about
    ``target_bins`` bins over ``duration_s``."""
    want = max(float(duration_s), 1e-9) / target_bins
    for w in NICE_BINS_S:
        if w >= want:
            return w
    days = 86400.0
    return days * float(np.ceil(want / days))


def format_width(seconds: float) -> str:
    """``0.05 s``, ``10 s``, ``5 min``, ``1 h``, ``2 d``."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def peak_count(t_s: np.ndarray, window_s: float = PEAK_WINDOW_S) -> int:
    """The most arrivals in any half-open window ``[a, a + window_s)``: a maximum is attained at a
    window starting at an arrival, so one binary search per arrival finds it exactly (no grid
    whose phase could split a burst, and no memory that grows with the duration)."""
    t = np.sort(np.asarray(t_s, dtype=np.float64))
    if t.size == 0:
        return 0
    ends = np.searchsorted(t, t + window_s, side="left")
    return int(np.max(ends - np.arange(t.size)))


def span_s(workload: Workload) -> float:
    """The schedule's span: the generator's declared duration (metadata ``duration_s``, which
    includes a quiet tail after the last arrival) when it is a sane number, else the last arrival.
    Metadata comes from the file, so a value that is not a finite number within the time limit is
    ignored rather than trusted."""
    declared = workload.metadata.get("duration_s")
    try:
        value = float(declared) if declared is not None and not isinstance(declared, bool) else 0.0
    except (TypeError, ValueError):
        value = 0.0
    if not (np.isfinite(value) and 0.0 <= value <= MAX_TIME_S):
        value = 0.0
    return max(value, workload.duration_s)


def rate_series(workload: Workload, bin_s: float | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], float]:
    """Bin edges and requests/s per function in each bin (a round width, at most about 200 bins by default)."""
    duration = max(span_s(workload), 1e-9)
    bin_s = bin_s or bin_width(duration)
    n_bins = max(int(np.ceil(duration / bin_s - 1e-9)), 1)
    if workload.duration_s >= n_bins * bin_s:  # the last arrival sits exactly on the edge
        n_bins += 1
    edges = np.arange(n_bins + 1) * bin_s
    per_fn = {}
    for fn, g in workload.frame.groupby("function", sort=True):
        per_fn[str(fn)] = np.histogram(g["t_s"].to_numpy(), bins=edges)[0] / bin_s
    return edges, per_fn, bin_s


def _fmt_meta(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def summary_rows(workload: Workload) -> list[tuple[str, str]]:
    """Field/value rows of the summary: counts, the mean rate and the true peak rate (the most
    requests in any :data:`PEAK_WINDOW_S` window, not a coarse bin's average)."""
    duration = span_s(workload)
    window = format_width(PEAK_WINDOW_S)
    rows = [
        ("name", workload.name),
        ("source", str(workload.metadata.get("source", "?"))),
        ("seed", str(workload.metadata.get("seed", "?"))),
        ("requests", str(len(workload))),
        ("duration (s)", f"{duration:.1f}"),
        ("mean rate (req/s)", f"{len(workload) / duration:.2f}" if duration else "-"),
        (f"peak rate (req/s, any {window})", f"{peak_count(workload.frame['t_s'].to_numpy()) / PEAK_WINDOW_S:g}"),
        ("plot bins", format_width(bin_width(max(duration, 1e-9)))),
    ]
    for k in ("rate_scale", "time_compression", "minutes"):
        if workload.metadata.get(k) is not None:
            rows.append((k, _fmt_meta(workload.metadata[k])))
    mapping = workload.metadata.get("mapping") or {}
    if isinstance(mapping, dict) and mapping:
        rows.append(("function mapping", str(mapping.get("method"))))
    return rows


def function_rows(workload: Workload) -> list[tuple[str, str, str, str]]:
    """Per function, busiest first: requests, share, and its own peak rate in any 1 s window."""
    n = max(len(workload), 1)
    out = []
    frame = workload.frame
    for fn, count in frame["function"].value_counts().items():
        peak = peak_count(frame.loc[frame["function"] == fn, "t_s"].to_numpy()) / PEAK_WINDOW_S
        out.append((str(fn), str(int(count)), f"{100.0 * count / n:.1f}%", f"{peak:g}"))
    return out


def _print_summary(workload: Workload, path: Path | None = None) -> None:
    """Two tables that fit an 80-column terminal: the numbers keep their full width, and a function
    name too long for the rest wraps onto a second line instead of being cut."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"workload {path}" if path else "workload", show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for k, v in summary_rows(workload):
        table.add_row(k, v)
    console.print(table)
    rows = function_rows(workload)
    headers = ("function", "requests", "share", "peak/s")
    fn_table = Table(show_header=True, header_style="bold",
                     caption=f"peak/s: the most requests in any {format_width(PEAK_WINDOW_S)} window", caption_justify="left")
    fn_table.add_column(headers[0], overflow="fold")
    for i, h in enumerate(headers[1:], start=1):
        width = max(len(h), *(len(r[i]) for r in rows))
        fn_table.add_column(h, justify="right", no_wrap=True, min_width=width)
    for r in rows:
        fn_table.add_row(*r)
    console.print(fn_table)


def plot_rate(workload: Workload, png: Path) -> Path:
    """A PNG of requests/s over time, one line per function (top 8) and the total; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edges, per_fn, bin_s = rate_series(workload)
    mid = (edges[:-1] + edges[1:]) / 2.0
    fig, ax = plt.subplots(figsize=(9, 4), dpi=100)
    try:
        if per_fn:
            total = sum(per_fn.values())
            ax.plot(mid, total, color="black", lw=1.5, label="total")
            top = sorted(per_fn, key=lambda f: -per_fn[f].sum())[:8]
            if len(per_fn) > 1:
                for f in top:
                    ax.plot(mid, per_fn[f], lw=0.8, label=f)
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"requests/s ({format_width(bin_s)} bins)")
        ax.set_title(workload.name)
        if per_fn:
            ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        atomic_write(png, lambda tmp: fig.savefig(tmp, format="png"), what="plot file", example="rate.png")
    finally:
        plt.close(fig)
    return png


@workload_app.command("show")
def show(
    path: Path = typer.Argument(..., help="a workload Parquet file"),
    png: Path | None = typer.Option(None, "--png", help="where to write the rate plot (default: beside WL, .rate.png)"),
) -> None:
    """Print a summary table and write a PNG of the arrival rate over time.

    The peak rate is the most requests in any 1 s window (exact, whatever the plot's bins); the
    plot's bin width is a round one chosen from the duration (1 s, 10 s, 1 min, ...).
    """
    png = check_output_path(png or path.with_suffix(".rate.png"), what="plot file", example="rate.png")
    wl = read_workload(path)
    _print_summary(wl, path)
    out = plot_rate(wl, png)
    typer.echo(f"rate plot: {out}")


def parse_targets(text: str) -> dict[str, str]:
    """A function -> URL map from a JSON/YAML file or inline ``a=http://...,b=http://...``."""
    p = Path(text)
    if p.exists():
        if p.is_dir():
            raise InputError("is a directory, not a function -> URL map", file=p, field="--targets")
        try:
            data = yaml.safe_load(p.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as err:
            raise InputError(f"not UTF-8 text (byte at offset {err.start}); expected a JSON/YAML map", file=p) from None
        except yaml.YAMLError as err:
            raise InputError(f"not JSON/YAML: {str(err).splitlines()[0]}", file=p) from None
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", file=p) from None
        if data is None:
            raise InputError("the file is empty; it must map function names to URLs", file=p)
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise InputError(f"must map function names to URLs, got {type(data).__name__}", file=p)
        return {str(k): v for k, v in data.items()}
    out = {}
    for part in text.split(","):
        name, sep, url = part.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise InputError(f"expected NAME=URL, got {part!r}", field="--targets")
        out[name.strip()] = url.strip()
    return out


def replay_command(
    workload: Path = typer.Argument(..., help="a workload Parquet file"),
    target: str | None = typer.Option(None, "--target", help="one ingress URL; the function goes in X-Scoretune-Function"),
    targets: str | None = typer.Option(None, "--targets", help="function->URL map: a JSON/YAML file or a=URL,b=URL"),
    out: Path = typer.Option(..., "--out", "-o", help="run directory to write (requests.parquet, summary.json)"),
    timeout: float = typer.Option(30.0, "--timeout", help="per-request timeout (s)"),
    workers: int = typer.Option(0, "--workers", help="0: one Locust process; N: a master and N workers"),
    host_template: str | None = typer.Option(None, "--host-template", help='Host header, e.g. "{function}.default.example.com"'),
    remote_workers: int = typer.Option(0, "--remote-workers", help="workers on other machines the master waits for"),
    master_bind_host: str = typer.Option("127.0.0.1", "--master-bind-host", help="address the master listens on"),
    master_port: int | None = typer.Option(None, "--master-port", min=1, max=65535,
                                           help="fixed master port (needed by remote workers)"),
) -> None:
    """Replay a workload open loop with Locust and record every request.

    Exits 1 with one line when the load generator failed, or when no request succeeded (then the
    line gives the first request's error, e.g. "connection refused"); the run directory is written
    either way, with each request's error in the ``error`` column of ``requests.parquet``.
    """
    from loadgen.replay import replay

    if (target is None) == (targets is None):
        raise InputError("give exactly one of --target URL or --targets MAP", field="--target")
    if out.exists() and not out.is_dir():
        raise InputError("is a file; --out names the run directory to write", file=out)
    wl = read_workload(workload)
    with _as_options(REPLAY_OPTIONS):
        result = replay(wl, target if target is not None else parse_targets(targets or ""), out, timeout_s=timeout,
                        workers=workers, host_template=host_template, info={"workload_file": str(workload)},
                        remote_workers=remote_workers, master_bind_host=master_bind_host, master_port=master_port)
    s = result.summary
    keys = ("count", "ok", "errors", "timeouts", "latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s",
            "dispatch_lag_p50_s", "dispatch_lag_p99_s", "late_dispatches", "failed")
    typer.echo(json.dumps({k: s.get(k) for k in keys}, indent=2))
    if result.failed:
        raise LoadgenError(f"replay failed: {s.get('failure')} (run directory {out})")
    if s.get("count") and not s.get("ok"):
        raise LoadgenError(f"0 of {s['count']} requests succeeded; the first failed with: {first_error(result.requests)} "
                           f"(run directory {out})")


def first_error(requests: Any) -> str:
    """The error of the earliest scheduled request that did not succeed (``?`` if none is recorded)."""
    bad = requests[requests["status"] != "ok"].sort_values("scheduled_s", kind="stable")
    if bad.empty:
        return "?"
    row = bad.iloc[0]
    reason = row.get("error") if "error" in bad.columns else None
    return str(reason) if isinstance(reason, str) and reason else str(row["status"])


def _bench_step(rate: float, duration_s: float, workers: int, seed: int) -> dict[str, Any]:
    from loadgen.replay import replay
    from loadgen.synth import poisson
    from loadgen.testserver import ReplayTestServer

    wl = poisson(rate, duration_s, ["bench-a", "bench-b"], seed=seed)
    with ReplayTestServer() as server, tempfile.TemporaryDirectory(prefix="scoretune-bench-") as tmp:
        r = replay(wl, server.url, Path(tmp) / "run", timeout_s=5.0, workers=workers)
    s = r.summary
    lag = s["dispatch_lag_p99_s"]
    return {
        "rate_per_s": rate, "requests": s["count"], "ok": s["ok"], "errors": s["errors"], "timeouts": s["timeouts"],
        "dispatch_lag_p50_ms": None if s["dispatch_lag_p50_s"] is None else round(1000 * s["dispatch_lag_p50_s"], 3),
        "dispatch_lag_p99_ms": None if lag is None else round(1000 * lag, 3),
        "latency_p99_ms": None if s["latency_p99_s"] is None else round(1000 * s["latency_p99_s"], 3),
        "late_dispatches": s["late_dispatches"], "failed": s["failed"],
    }


def bench_replay(
    as_json: bool = typer.Option(True, "--json/--no-json", help="print JSON (always JSON; kept for symmetry)"),
    duration: float = typer.Option(6.0, "--duration", help="seconds of load per rate step"),
    start_rate: float = typer.Option(100.0, "--start-rate"),
    max_rate: float = typer.Option(3200.0, "--max-rate"),
    factor: float = typer.Option(1.5, "--factor", help="rate multiplier between steps"),
    workers: int = typer.Option(0, "--workers", help="Locust worker processes (0: one local process)"),
    lag_limit_ms: float = typer.Option(20.0, "--lag-limit-ms", help="dispatch lag p99 a step must stay under"),
    retries: int = typer.Option(1, "--retries", help="re-run a failing step this often before stopping (shared machines are noisy)"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Highest open-loop rate this machine replays with dispatch lag p99 under the limit.

    Ramps a Poisson workload against a fast local server (loadgen/testserver.py) until the p99 of
    sent - scheduled exceeds ``--lag-limit-ms`` or a request fails, ``--retries`` times in a row at
    the same rate (other work on a shared machine makes single steps noisy).
    """
    steps = []
    best = None
    rate = start_rate
    # stdout carries exactly one JSON line (`make bench` reads it): progress goes to stderr
    quiet = logging.getLogger("loadgen")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        while rate <= max_rate:
            for attempt in range(retries + 1):
                step = _bench_step(rate, duration, workers, seed + attempt)
                step["attempt"] = attempt
                steps.append(step)
                typer.echo(f"rate {rate:g}/s: dispatch lag p99 {step['dispatch_lag_p99_ms']} ms", err=True)
                good = (not step["failed"] and step["ok"] == step["requests"] and step["dispatch_lag_p99_ms"] is not None
                        and step["dispatch_lag_p99_ms"] < lag_limit_ms)
                if good:
                    break
            if not good:
                break
            best = step
            rate = round(rate * factor)
    finally:
        quiet.setLevel(level)
    result = {
        "benchmark": "replay",
        "what": "highest Poisson rate replayed open loop by Locust with dispatch lag p99 under the limit",
        "cores": os.cpu_count(),
        "workers": workers,
        "lag_limit_ms": lag_limit_ms,
        "retries": retries,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "step_duration_s": duration,
        "max_rate_per_s": best["rate_per_s"] if best else 0.0,
        "lag_p99_ms_at_max": best["dispatch_lag_p99_ms"] if best else None,
        "goal_rate_per_s": 300.0,
        "meets_goal": bool(best and best["rate_per_s"] >= 300.0),
        "steps": steps,
    }
    typer.echo(json.dumps(result))  # one line: `make bench` reads the last JSON line
