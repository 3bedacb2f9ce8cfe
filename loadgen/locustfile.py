"""The open-loop Locust file: fires every request of a schedule at its time, whatever came before.

Runs only under ``locust -f loadgen/locustfile.py --headless`` as a subprocess of
:func:`loadgen.replay.replay`; scoretune never imports it (Locust monkey-patches the process with
gevent on import). The pattern is the "true open loop" one of the research notes (section 4,
pattern 4): one dispatcher greenlet per load process walks the precomputed send times and spawns one
greenlet per request without waiting for earlier responses; completions reach Locust's
``events.request`` hook, whose listener here records each request exactly (not Locust's rounded
statistics).

The plan (schedule, URLs, timeout, number of load processes, start epoch) is read from files by the
process that owns them — the local runner, or the master — through these environment variables:

- ``SCORETUNE_SCHEDULE``: the ``schedule.npz`` (``request_id``, ``t_s``, ``function_index``,
  ``payload_index``) with a ``schedule.json`` beside it (function names, URL and Host header per
  function, distinct payloads, concurrency);
- ``SCORETUNE_RECORDS_DIR``: where ``records-<worker index>.json`` files are written;
- ``SCORETUNE_TIMEOUT_S``: per-request timeout; ``SCORETUNE_WORKERS``: the number of workers;
- ``SCORETUNE_START_EPOCH`` (optional, > 0): the Unix time of t = 0. Without it the local runner
  starts the clock itself, and the master picks an epoch one second ahead when the test starts.

In distributed mode the master ships the plan to every worker in a custom message when the test
starts, and each worker sends its records back in another, so a worker needs nothing but the scoretune
package (the locust_loadgen role installs it) and the master's address (``locust -f locustfile.py --worker --master-host H``) and may run on
another machine (clocks synchronised, e.g. by NTP, since send times are absolute). Worker ``i``
takes the requests with ``request_id % workers == i``.

All times recorded are ``time.time()`` minus the epoch: ``sent_s`` is Locust's own request start time
(taken just before the request leaves), ``finished_s`` the time the request event fires.
"""

from __future__ import annotations

import io
import json
import logging
import os
import resource
import socket
import time
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.pool
import numpy as np
from locust import User, events, task
from locust.contrib.fasthttp import FastHttpSession
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from functions.atomic import write_atomic

log = logging.getLogger("scoretune.locustfile")

RECORDS_DIR = Path(os.environ.get("SCORETUNE_RECORDS_DIR", "."))
EPOCH_LEAD_S = 1.0
"""How far ahead of the test start the master puts t = 0, so every worker has the plan in time."""

# open loop needs a socket per in-flight request: lift the soft descriptor limit towards the hard one
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
_want = 65536 if _hard == resource.RLIM_INFINITY else min(65536, _hard)
if _soft < _want:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_want, _hard))

_plan: gevent.event.AsyncResult = gevent.event.AsyncResult()
_records: dict[str, list] = {
    k: [] for k in ("request_id", "sent_s", "finished_s", "status", "http_status", "node", "pod", "cold_start", "error",
                    "activation_id", "wait_s", "init_s", "duration_s")
}
_state: dict[str, Any] = {"index": 0, "written": False, "dispatching": False, "done_workers": 0}


def _load_plan() -> dict[str, Any]:
    """The plan from the files the parent wrote (local runner and master only)."""
    schedule = Path(os.environ["SCORETUNE_SCHEDULE"])
    meta = json.loads(schedule.with_suffix(".json").read_text())
    with np.load(schedule) as data:
        arrays = {k: data[k] for k in ("request_id", "t_s", "function_index", "payload_index")}
    return {
        **meta,
        "arrays": arrays,
        "timeout_s": float(os.environ.get("SCORETUNE_TIMEOUT_S", "30")),
        "workers": max(1, int(os.environ.get("SCORETUNE_WORKERS", "1"))),
        "epoch": float(os.environ.get("SCORETUNE_START_EPOCH", "0") or 0),
    }


def _pack(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as a message (msgpack carries bytes, not numpy arrays)."""
    buf = io.BytesIO()
    np.savez(buf, **plan["arrays"])
    return {**{k: v for k, v in plan.items() if k != "arrays"}, "arrays": buf.getvalue()}


def _unpack(data: dict[str, Any]) -> dict[str, Any]:
    with np.load(io.BytesIO(data["arrays"])) as arrays:
        return {**data, "arrays": {k: arrays[k] for k in arrays.files}}


def _is_timeout(exc: BaseException | None) -> bool:
    """A timeout, possibly wrapped (geventhttpclient raises RetriesExceeded(original=timeout))."""
    for _ in range(5):
        if exc is None:
            return False
        if isinstance(exc, TimeoutError | gevent.Timeout) or "timeout" in type(exc).__name__.lower():
            return True
        exc = getattr(exc, "original", None) or exc.__cause__ or exc.__context__
    return False


_ERRNO_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (ConnectionResetError, "connection reset by the server"),
    (ConnectionAbortedError, "connection aborted"),
    (BrokenPipeError, "connection closed by the server (broken pipe)"),
    (socket.gaierror, "cannot resolve the host name"),
)


def _reason(exc: BaseException | None, code: int | None, timeout_s: float) -> str | None:
    """Why a request failed, in words a reader of ``requests.parquet`` acts on: "connection
    refused", "HTTP 503", "timeout after 30 s"; None for a success. Locust wraps socket errors
    (geventhttpclient's RetriesExceeded(original=...)), so the chain is walked for the cause."""
    if exc is None:
        return None
    if _is_timeout(exc):
        return f"timeout after {timeout_s:g} s"
    if code:
        return f"HTTP {code}"
    e: BaseException | None = exc
    for _ in range(5):
        if e is None:
            break
        for kind, text in _ERRNO_REASONS:
            if isinstance(e, kind):
                return text
        if isinstance(e, OSError) and e.strerror:
            return str(e.strerror)
        e = getattr(e, "original", None) or e.__cause__ or e.__context__
    return f"{type(exc).__name__}: {exc}"[:200]


def _header(response, name: str) -> str | None:
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get(name)
        if value is None:
            value = headers.get(name.lower())
    except Exception:  # the headers of an ErrorResponse may be a bare object
        return None
    return None if value is None else str(value)


WHISK_STATUS = {1: "application error", 2: "action developer error", 3: "whisk internal error"}
"""An activation's ``response.statusCode`` (apache/openwhisk ActivationResponse.scala); 0 is success."""


def _activation(response: Any, code: int | None) -> dict[str, Any]:
    """What an OpenWhisk activation record (``blocking=true&result=false``) says: its id, the
    waitTime/initTime annotations and duration (ms -> s; initTime only on a cold start), the
    served-by facts the runtime put in its result, and the status to record. A 202 is the
    controller's blocking limit running out: a timeout (the activation may finish later)."""
    try:
        body = json.loads(getattr(response, "content", None) or b"{}")
    except (ValueError, TypeError):
        body = {}
    body = body if isinstance(body, dict) else {}
    notes = {a.get("key"): a.get("value") for a in body.get("annotations") or [] if isinstance(a, dict)}
    result = (body.get("response") or {}).get("result") or {}
    where = result.get("scoretune") if isinstance(result, dict) else None
    where = where if isinstance(where, dict) else {}

    def seconds(ms: Any) -> float | None:
        return float(ms) / 1000.0 if isinstance(ms, int | float) else None

    out: dict[str, Any] = {"activation_id": body.get("activationId"), "wait_s": seconds(notes.get("waitTime")),
                           "init_s": seconds(notes.get("initTime")), "duration_s": seconds(body.get("duration")),
                           "node": where.get("node"), "pod": where.get("pod"),
                           "cold": where.get("cold") if "cold" in where else (notes.get("initTime") is not None
                                                                              if notes else None),
                           "status": None, "error": None}
    whisk = (body.get("response") or {}).get("statusCode")
    if code == 202:
        out["status"], out["error"] = "timeout", "the controller's blocking wait ran out (HTTP 202)"
    elif isinstance(whisk, int) and whisk != 0:
        out["status"] = "error"
        said = result.get("error") if isinstance(result, dict) else None
        said = f": {str(said)[:200]}" if said else ""  # upstream's message: what the one fault rule reads
        out["error"] = f"activation statusCode {whisk} ({WHISK_STATUS.get(whisk, 'unknown')}){said}"
    return out


@events.request.add_listener
def _on_request(request_type, name, response_time, response_length, response=None, context=None,
                exception=None, start_time=None, url=None, **kwargs):
    """One record per scheduled request, taken from Locust's request event."""
    now = time.time()
    if not context or "request_id" not in context:
        return
    epoch = context["epoch"]
    code = getattr(response, "status_code", None) if response is not None else None
    code = int(code) if code else None
    if exception is None:
        status = "ok"
    else:
        status = "timeout" if _is_timeout(exception) else "error"
    cold_text = _header(response, "X-Scoretune-Cold-Start")
    cold = None if cold_text is None else cold_text.strip().lower() == "true"
    node, pod = _header(response, "X-Scoretune-Node"), _header(response, "X-Scoretune-Pod")
    error = _reason(exception, code, context.get("timeout_s", 0.0))
    act: dict[str, Any] = {}
    if context.get("answer") == "activation" and response is not None:
        act = _activation(response, code)
        node, pod, cold = act["node"], act["pod"], act["cold"]
        if act["status"] is not None:  # the activation's own verdict (202: a timeout; statusCode != 0: an error)
            status, error = act["status"], act["error"]
    r = _records
    r["request_id"].append(int(context["request_id"]))
    r["sent_s"].append((start_time if start_time else context["sent"]) - epoch)
    r["finished_s"].append(now - epoch)
    r["status"].append(status)
    r["http_status"].append(code)
    r["node"].append(node)
    r["pod"].append(pod)
    r["cold_start"].append(cold)
    r["error"].append(error)
    for key in ("activation_id", "wait_s", "init_s", "duration_s"):
        r[key].append(act.get(key))


def _write_records(index: int, records: dict[str, Any]) -> None:
    """``records-<index>.json``: the lists of every request, and ``epoch`` (the Unix time of t = 0,
    so the caller can align its own clock with the replay's when it let Locust pick it)."""
    write_atomic(RECORDS_DIR / f"records-{index}.json",
                 json.dumps({**records, "epoch": records.get("epoch", _state.get("epoch"))}))


def _process_facts() -> dict[str, Any]:
    """What a load process reports with its records: its host, its versions of Locust, NumPy and
    Python (a mismatch with the master voids the run), and its clock's offset from the master's,
    measured when the plan arrived (the master's send time against this clock; one-way network
    delay included, so an upper bound on a LAN)."""
    import platform

    import locust

    sent = _state.get("plan_sent_at")
    received = _state.get("plan_received_at")
    return {"host": socket.gethostname(), "locust": locust.__version__, "numpy": np.__version__,
            "python": platform.python_version(),
            "clock_offset_s": None if sent is None or received is None else float(received - sent)}


def _on_plan(msg: Any, **kwargs: Any) -> None:
    _state["plan_received_at"] = time.time()
    plan = _unpack(msg.data)
    _state["plan_sent_at"] = plan.get("sent_at")
    _plan.set(plan)


@events.init.add_listener
def _on_init(environment, **kwargs):
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("scoretune_plan", _on_plan)
        return
    plan = _load_plan()
    if isinstance(runner, MasterRunner):

        def records(msg, **kw):
            _write_records(int(msg.data["index"]), msg.data["records"])
            _state["done_workers"] += 1
            if _state["done_workers"] >= plan["workers"]:
                gevent.spawn_later(0.1, runner.quit)

        runner.register_message("scoretune_records", records)
    _plan.set(plan)


@events.test_start.add_listener
def _on_test_start(environment, **kwargs):
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        plan = _plan.get()
        if plan["epoch"] <= 0:
            plan["epoch"] = time.time() + EPOCH_LEAD_S
        plan["sent_at"] = time.time()
        runner.send_message("scoretune_plan", _pack(plan))


@events.quitting.add_listener
def _on_quitting(environment, **kwargs):
    # a local run stopped early (run-time limit): keep what was recorded
    runner = environment.runner
    if not isinstance(runner, MasterRunner | WorkerRunner) and _records["request_id"] and not _state["written"]:
        _write_records(0, _records)


class ScheduleUser(User):
    """One per load process: dispatches that process's slice of the schedule, open loop."""

    def _fire(self, plan: dict[str, Any], k: int, epoch: float) -> None:
        a = plan["arrays"]
        f = int(a["function_index"][k])
        name = plan["functions"][f]
        headers = {"X-Scoretune-Function": name, "Content-Type": "application/json"}
        if plan["hosts"][f]:
            headers["Host"] = plan["hosts"][f]
        headers.update(plan.get("headers") or {})  # the target's own (OpenWhisk: Basic auth with the lab's key)
        ctx = {"request_id": int(a["request_id"][k]), "epoch": epoch, "sent": time.time(), "timeout_s": plan["timeout_s"],
               "answer": plan.get("answer", "headers")}
        url = plan["urls"][f]
        try:
            with gevent.Timeout(plan["timeout_s"] + 1.0):
                self.session.request("POST", url, name=name, data=self.payloads[int(a["payload_index"][k])],
                                     headers=headers, context=ctx)
        except gevent.Timeout as exc:
            # the whole exchange overran the timeout (a trickling server): Locust never fired, so we do
            events.request.fire(request_type="POST", name=name, response_time=(time.time() - ctx["sent"]) * 1000,
                                response_length=0, response=None, context=ctx, exception=exc,
                                start_time=ctx["sent"], url=url)

    @task
    def dispatch(self) -> None:
        if _state["dispatching"]:  # a second user in this process has nothing to do
            raise StopUser()
        _state["dispatching"] = True
        runner = self.environment.runner
        worker = isinstance(runner, WorkerRunner)
        plan = _plan.get(timeout=120)
        index = runner.worker_index if worker else 0
        _state["index"] = index
        epoch = plan["epoch"] if plan["epoch"] > 0 else time.time() + 0.25
        _state["epoch"] = epoch
        self.payloads = [p.encode() for p in plan["payloads"]]
        self.session = FastHttpSession(
            base_url=None, request_event=self.environment.events.request, user=None,
            network_timeout=plan["timeout_s"], connection_timeout=plan["timeout_s"], max_retries=0,
            concurrency=int(plan.get("concurrency", 1000)), insecure=True,
        )
        a = plan["arrays"]
        t_s = a["t_s"]
        mine = np.flatnonzero(a["request_id"] % plan["workers"] == index)
        pool = gevent.pool.Group()
        clock = time.time
        for k in mine:
            delay = epoch + t_s[k] - clock()
            if delay > 0:
                gevent.sleep(delay)
            pool.spawn(self._fire, plan, int(k), epoch)
        pool.join(timeout=plan["timeout_s"] + 5.0)
        if worker:
            runner.send_message("scoretune_records", {"index": index, "records": {**_records, "epoch": epoch,
                                                                                 "process": _process_facts()}})
        else:
            _write_records(0, {**_records, "process": {**_process_facts(), "clock_offset_s": 0.0}})
            _state["written"] = True
            gevent.spawn_later(0.1, runner.quit)
        raise StopUser()
