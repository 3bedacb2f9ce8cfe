"""Open-loop replay of a Workload against live endpoints, with Locust as the load generator.

:func:`replay` writes the schedule to files, runs ``locust --headless`` (``loadgen/locustfile.py``)
as a subprocess — one local process, or a master and N workers splitting the schedule — waits for
it, and merges the per-process request records into a RunResult (``requests.parquet`` +
``summary.json`` via :func:`loadgen.results.write_run`). Locust is never imported here: it
monkey-patches the process with gevent.

Accounting is exact: every scheduled request appears once. One the load generator never reported
(its process died, was killed at the deadline, or never started) is recorded as ``error`` with
``sent_s`` null, and the run is marked failed with the reason, so ``ok + errors + timeouts`` always
equals the schedule and a broken load generator never reads as a good number. Every request that
is not ``ok`` says why in the ``error`` column ("connection refused", "HTTP 503", "timeout after
30 s", "never reported by the load generator").
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loadgen.errors import InputError, LoadgenError
from loadgen.results import RunResult, write_run
from loadgen.targets import Target, as_target
from loadgen.workload import Workload

logger = logging.getLogger(__name__)

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
FUNCTION_HEADER = "X-Scoretune-Function"
STARTUP_ALLOWANCE_S = 60.0
"""How long Locust may take to start and connect its workers before the run counts as failed."""
WORKERS_WAIT_S = 60.0
"""How long a master waits for its workers by default: a worker service restarts within seconds."""
UNREPORTED = "never reported by the load generator"
"""The ``error`` of a scheduled request no load process recorded (it died, was killed, never started)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_targets(
    functions: list[str], targets: str | Mapping[str, str], host_template: str | None = None
) -> tuple[list[str], list[str | None]]:
    """URL and Host header for each function.

    ``targets`` is either one ingress URL (every function is POSTed there; the function travels in
    the ``X-Scoretune-Function`` header, and ``host_template`` such as
    ``"{function}.default.example.com"`` sets the Host header, which is how Knative's ingress routes)
    or a mapping ``{function: url}`` that must cover every function of the workload.
    """
    if isinstance(targets, str):
        if not targets.startswith(("http://", "https://")):
            raise InputError(f"target must be an http(s) URL, got {targets!r}", field="target")
        urls = [targets for _ in functions]
    else:
        missing = [f for f in functions if f not in targets]
        if missing:
            raise InputError(f"no target URL for function(s) {missing}; the map has {sorted(targets)}", field="targets")
        urls = [str(targets[f]) for f in functions]
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise InputError(f"target must be an http(s) URL, got {bad[0]!r}", field="targets")
    hosts: list[str | None] = []
    for f in functions:
        if not host_template:
            hosts.append(None)
            continue
        try:
            host = host_template.format(function=f)
        except (KeyError, IndexError, ValueError, AttributeError) as err:
            raise InputError(
                f"bad template {host_template!r} ({type(err).__name__}: {err}); the one placeholder is {{function}}",
                field="host_template",
            ) from None
        if not host or any(c.isspace() or not c.isprintable() for c in host):
            raise InputError(f"template gives the Host header {host!r}, which is empty or has spaces", field="host_template")
        hosts.append(host)
    return urls, hosts


def write_schedule(workload: Workload, directory: Path, urls: list[str], hosts: list[str | None],
                   functions: list[str], *, concurrency: int, target: Target) -> Path:
    """``schedule.npz`` (numeric columns) + ``schedule.json`` (names, URLs, distinct payloads): cheap
    for the Locust processes to load without pandas or pyarrow."""
    frame = workload.frame
    fidx = pd.Categorical(frame["function"], categories=functions).codes.astype(np.int32)
    payload_codes, payloads = pd.factorize(frame["payload"], sort=False)
    path = directory / "schedule.npz"
    np.savez(
        path,
        request_id=np.arange(len(frame), dtype=np.int64),
        t_s=frame["t_s"].to_numpy(dtype=np.float64),
        function_index=fidx,
        payload_index=payload_codes.astype(np.int32),
    )
    meta: dict[str, Any] = {"functions": functions, "urls": urls, "hosts": hosts,
                            "payloads": [str(p) for p in payloads], "concurrency": concurrency,
                            "platform": str(target.platform), "answer": target.answer, "headers": target.headers()}
    path.with_suffix(".json").write_text(json.dumps(meta))
    if meta["headers"]:
        path.with_suffix(".json").chmod(0o600)  # a key may be in them
    return path


ACTIVATION_FIELDS = ("activation_id", "wait_s", "init_s", "duration_s")
"""The requests table's optional OpenWhisk columns (loadgen.results.OPTIONAL_REQUEST_FIELDS)."""


def merge_records(workload: Workload, records_dir: Path, epochs: list[float] | None = None,
                  processes: list[dict[str, Any]] | None = None) -> tuple[pd.DataFrame, int]:
    """The requests table: one row per scheduled request, filled from every ``records-*.json``.

    Returns the table and how many scheduled requests no load process reported (those are
    ``error`` with ``sent_s`` null and the error :data:`UNREPORTED`). ``epochs`` collects the Unix
    time of t = 0 each file reports (records of older locustfiles report none); ``processes`` the
    facts each load process reports (host, versions, clock offset), with its index."""
    n = len(workload)
    sent = np.full(n, np.nan)
    finished = np.full(n, np.nan)
    status = np.full(n, "error", dtype=object)
    error = np.full(n, UNREPORTED, dtype=object)
    http = np.full(n, -1, dtype=np.int64)
    node = np.full(n, None, dtype=object)
    pod = np.full(n, None, dtype=object)
    cold = np.full(n, None, dtype=object)
    activation = {k: np.full(n, None if k == "activation_id" else np.nan, dtype=object if k == "activation_id" else float)
                  for k in ACTIVATION_FIELDS}
    any_activation = False
    seen = np.zeros(n, dtype=bool)
    for path in sorted(records_dir.glob("records-*.json")):
        rec = json.loads(path.read_text())
        if epochs is not None and isinstance(rec.get("epoch"), int | float) and rec["epoch"] > 0:
            epochs.append(float(rec["epoch"]))
        if processes is not None and isinstance(rec.get("process"), dict):
            processes.append({"index": int(path.stem.split("-")[1]), **rec["process"]})
        rid = np.asarray(rec["request_id"], dtype=np.int64)
        if rid.size == 0:
            continue
        if rid.min() < 0 or rid.max() >= n:
            raise LoadgenError(f"{path}: request ids outside the schedule (0..{n - 1})")
        sent[rid] = np.asarray(rec["sent_s"], dtype=np.float64)
        finished[rid] = np.asarray(rec["finished_s"], dtype=np.float64)
        status[rid] = np.asarray(rec["status"], dtype=object)
        reasons = rec.get("error")  # absent in records of older locustfiles
        error[rid] = np.asarray(reasons if reasons is not None else [None] * rid.size, dtype=object)
        http[rid] = [(-1 if c is None else int(c)) for c in rec["http_status"]]
        node[rid] = np.asarray(rec["node"], dtype=object)
        pods = rec.get("pod")  # absent in records of older locustfiles
        pod[rid] = np.asarray(pods if pods is not None else [None] * rid.size, dtype=object)
        cold[rid] = np.asarray(rec["cold_start"], dtype=object)
        for key in ACTIVATION_FIELDS:  # OpenWhisk runs only
            values = rec.get(key)
            if values is not None and any(v is not None for v in values):
                any_activation = True
                activation[key][rid] = [(np.nan if v is None else v) if key != "activation_id" else v for v in values]
        seen[rid] = True
    scheduled = workload.frame["t_s"].to_numpy(dtype=np.float64)
    table = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "function": workload.frame["function"].astype(object).to_numpy(),
            "scheduled_s": scheduled,
            "sent_s": sent,
            "finished_s": finished,
            # finished - scheduled: client lag counts against latency instead of disappearing
            "latency_s": finished - scheduled,
            "status": status,
            "http_status": pd.array([None if c < 0 else int(c) for c in http], dtype="Int32"),
            "node": node,
            "cold_start": pd.array(cold.tolist(), dtype="boolean"),
            "error": error,  # missing (None/NaN) for a success
            "pod": pod,  # the pod that answered (X-Scoretune-Pod), where the runtime says
        }
    )
    if any_activation:
        for key in ACTIVATION_FIELDS:
            table[key] = activation[key]
    return table, int((~seen).sum())


MAX_CLOCK_OFFSET_S = 0.1
"""The largest clock offset of a load process from the master's before a run is void: a worker
whose clock is off by d sends its slice of the schedule d late (or early). 0.1 s is far above what
chrony keeps on a LAN (well under 1 ms) and what the message's one-way delay adds, so it only
fires on a clock that is really off; ``inf`` turns the check off."""


def process_problems(processes: list[dict[str, Any]], *, max_clock_offset_s: float = MAX_CLOCK_OFFSET_S) -> list[str]:
    """Why the load processes' facts make the run void: a clock offset past the bound, or a
    Locust or NumPy version other than this host's (the master's environment), which changes how
    requests are sent or how the schedule is split."""
    from importlib.metadata import PackageNotFoundError, version

    mine: dict[str, str | None] = {}
    for pkg in ("locust", "numpy"):
        try:
            mine[pkg] = version(pkg)
        except PackageNotFoundError:
            mine[pkg] = None
    out = []
    for p in sorted(processes, key=lambda x: x["index"]):
        who = f"load process {p['index']} on {p.get('host') or '?'}"
        off = p.get("clock_offset_s")
        if isinstance(off, int | float) and abs(off) > max_clock_offset_s:
            out.append(f"{who}: its clock is {off:+.3f} s off the master's (bound {max_clock_offset_s:g} s): "
                       "check chrony on that host")
        for pkg, want in mine.items():
            theirs = p.get(pkg)
            if want is not None and theirs is not None and theirs != want:
                out.append(f"{who} runs {pkg} {theirs}, the master {want}: install the same versions "
                           "(ansible/loadgen.yml pins them)")
    return out


def _command(role: str, *, users: int, run_time_s: float, stop_timeout_s: float, port: int, workers: int,
             bind_host: str = "127.0.0.1", workers_wait_s: float = WORKERS_WAIT_S) -> list[str]:
    locust = shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"
    cmd = [locust, "-f", str(LOCUSTFILE), "--headless", "--loglevel", "WARNING"]
    if role == "worker":
        return cmd + ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    cmd += ["-u", str(users), "-r", str(max(users, 1)), "-t", f"{int(np.ceil(run_time_s))}s",
            "--stop-timeout", f"{int(np.ceil(stop_timeout_s))}", "--exit-code-on-error", "0"]
    if role == "master":
        cmd += ["--master", "--expect-workers", str(workers), "--master-bind-host", bind_host,
                "--master-bind-port", str(port), "--expect-workers-max-wait", str(max(1, int(np.ceil(workers_wait_s))))]
    return cmd


def _gave_up_waiting(master_log: Path) -> bool:
    """Locust's master logs this and exits when ``--expect-workers-max-wait`` runs out."""
    try:
        return "Gave up waiting for workers to connect" in master_log.read_text(errors="replace")
    except OSError:
        return False


def replay(
    workload: Workload,
    targets: str | Mapping[str, str] | Target,
    out_dir: str | Path,
    *,
    timeout_s: float = 30.0,
    workers: int = 0,
    info: dict[str, Any] | None = None,
    host_template: str | None = None,
    concurrency: int = 2000,
    start_epoch: float | None = None,
    remote_workers: int = 0,
    master_bind_host: str = "127.0.0.1",
    master_port: int | None = None,
    workers_wait_s: float = WORKERS_WAIT_S,
    max_clock_offset_s: float = MAX_CLOCK_OFFSET_S,
    child_setup: Callable[[], None] | None = None,
) -> RunResult:
    """Replay ``workload`` open loop against ``targets`` and write a run directory to ``out_dir``.

    targets: a :mod:`loadgen.targets` target (Knative's ingress, OpenWhisk's API with its key), or
        one ingress URL (function in the ``X-Scoretune-Function`` header, optional Host from
        ``host_template``, e.g. ``"{function}.default.example.com"`` for Knative) or ``{function: url}``.
    timeout_s: a request not answered within this is ``timeout``; connection errors and non-2xx are
        ``error``.
    workers: 0 runs one local Locust process; N >= 1 runs a master and N worker processes on this
        machine (the same code path as remote workers), worker i taking ``request_id % N == i``.
    info: extra fields for ``summary.json`` (seed, cluster, profile, ...).
    concurrency: connections per target host per load process (open loop needs one per in-flight request).
    start_epoch: the Unix time of t = 0; by default Locust starts the clock itself once its
        processes are up (the master: one second after the test starts), so startup is not lag.
    remote_workers: workers on other machines the master also waits for; each runs
        ``locust -f loadgen/locustfile.py --worker --master-host <this host> --master-port <master_port>``
        and gets the plan from the master (clocks must be synchronised). Needs ``master_bind_host``
        set to an address they can reach and a fixed ``master_port``.
    workers_wait_s: the longest the master waits for all its workers to connect; a worker that
        does not come is a failed run naming it, never a hang.
    max_clock_offset_s: a load process whose clock is further than this from the master's, or
        that runs another Locust or NumPy version, voids the run (:func:`process_problems`);
        every process's host, versions and offset go to ``summary.json`` ``replay.processes``.
    child_setup: run in each local Locust process before it starts (the embedded lab puts its load
        generator in the harness's CPU group with it).

    A worker that connected but sent no records (it died, lost the network, or its clock put its
    requests outside the run) fails the run too, naming its index: its slice of the schedule is
    unreported, so the run is not scored (``agent.stats.run_health`` voids it).

    Returns the RunResult; a load generator that failed gives ``result.failed`` with the reason in
    ``summary["failure"]`` (never an exception after the schedule was handed to Locust).
    """
    if not (np.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"must be > 0, got {timeout_s!r}", field="timeout_s")
    if workers < 0 or remote_workers < 0:
        raise InputError(f"must be >= 0, got {min(workers, remote_workers)!r}", field="workers")
    if not max_clock_offset_s > 0:  # NaN fails too
        raise InputError(f"must be > 0 (inf: no check), got {max_clock_offset_s!r}", field="max_clock_offset_s")
    if remote_workers and not master_port:
        raise InputError("remote workers need a fixed master_port to connect to", field="master_port")
    if len(workload) == 0:
        raise InputError("the workload has no requests to replay", field="workload")
    target = as_target(targets, host_template)
    total_workers = workers + remote_workers
    out_dir = Path(out_dir).resolve()  # Locust runs in its own working directory
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("is a file, not a run directory", file=out_dir)
    functions = sorted(workload.frame["function"].unique().tolist())
    routes, host_template = target.routes(functions)
    urls, hosts = resolve_targets(functions, routes, host_template)  # before anything is written
    work = out_dir / "locust"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    schedule = write_schedule(workload, work, urls, hosts, functions, concurrency=concurrency,
                              target=target)
    duration = workload.duration_s
    run_time = duration + timeout_s + 15.0
    deadline_s = run_time + STARTUP_ALLOWANCE_S + (workers_wait_s if total_workers else 0.0)
    env = dict(os.environ)
    env.update(
        SCORETUNE_SCHEDULE=str(schedule), SCORETUNE_RECORDS_DIR=str(work), SCORETUNE_TIMEOUT_S=repr(float(timeout_s)),
        SCORETUNE_WORKERS=str(max(total_workers, 1)), SCORETUNE_START_EPOCH=repr(float(start_epoch or 0.0)),
        PYTHONUNBUFFERED="1",
    )
    port = master_port or _free_port()
    roles = [("local", 1)] if total_workers == 0 else [("master", total_workers)] + [("worker", 0)] * workers
    procs: list[tuple[str, subprocess.Popen]] = []
    failure: str | None = None
    t0 = time.time()
    try:
        for i, (role, users) in enumerate(roles):
            log = open(work / f"{role}-{i}.log", "wb")  # the child keeps its own descriptor
            cmd = _command(role, users=users, run_time_s=run_time, stop_timeout_s=timeout_s + 10,
                           port=port, workers=total_workers, bind_host=master_bind_host, workers_wait_s=workers_wait_s)
            try:
                procs.append((role, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                                                           preexec_fn=child_setup)))
            except OSError as err:
                failure = f"cannot start locust ({cmd[0]}): {err}"
                break
            finally:
                log.close()
        procs_to_wait = [] if failure else procs
        logger.info("replaying %d requests over %.1f s with %s", len(workload), duration,
                    "1 Locust process" if total_workers == 0 else f"a master and {total_workers} workers")
        if procs_to_wait:
            try:
                procs_to_wait[0][1].wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                failure = f"load generator did not finish within {deadline_s:.0f} s"
            for role, p in procs_to_wait[1:]:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    failure = failure or f"locust {role} did not exit"
            rcs = [p.returncode for _, p in procs_to_wait]
            if failure is None and total_workers and _gave_up_waiting(work / "master-0.log"):
                failure = (f"not all {total_workers} Locust workers connected within {workers_wait_s:.0f} s "
                           f"({workers} local, {remote_workers} remote on {master_bind_host}:{port}): check the "
                           "worker services on the load generators (docs/lab.md)")
            if failure is None and any(rc not in (0, None) for rc in rcs):
                failure = f"locust exited with status {rcs} (see {work}/*.log)"
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    epochs: list[float] = []
    processes: list[dict[str, Any]] = []
    requests, unsent = merge_records(workload, work, epochs, processes)
    if total_workers and failure is None:
        silent = sorted(set(range(total_workers)) - {int(p.stem.split("-")[1]) for p in work.glob("records-*.json")})
        if silent:
            failure = (f"Locust worker(s) {', '.join(map(str, silent))} of {total_workers} sent no records: a worker "
                       f"dropped out of the run, so {unsent} request(s) are unreported")
    if unsent and failure is None:
        failure = f"{unsent} scheduled request(s) never reported by the load generator (see {work}/*.log)"
    problems = process_problems(processes, max_clock_offset_s=max_clock_offset_s)
    if problems and failure is None:
        failure = "void: " + "; ".join(problems)
    if failure:
        logger.error("replay failed: %s", failure)
    summary_info = {
        "replay": {
            "platform": str(target.platform),
            "targets": routes if isinstance(routes, str) else dict(routes),
            "host_template": host_template,
            "timeout_s": timeout_s,
            "workers": workers,
            "remote_workers": remote_workers,
            "wall_s": round(time.time() - t0, 3),
            "unreported": unsent,
            "start_epoch": min(epochs) if epochs else None,  # the load processes share one epoch
            "processes": sorted(processes, key=lambda x: x["index"]),
            "max_clock_offset_s": max_clock_offset_s,
        },
        "workload": {k: workload.metadata.get(k) for k in ("name", "source", "seed", "file", "duration_s")
                     if k in workload.metadata},
        **(info or {}),
    }
    return write_run(out_dir, requests, info=summary_info, failed=failure is not None, failure=failure)
