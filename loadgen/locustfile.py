"""The open-loop Locust file: fires every request of a schedule at its time, whatever came before.

Runs only under ``locust -f loadgen/locustfile.py --headless`` as a subprocess of
:func:`loadgen.replay.replay`; scoretune never imports it (Locust monkey-patches the process with
gevent on import). The pattern is the "true open loop" one of the research notes (section 4,
pattern 4): one dispatcher greenlet per load process walks the precomputed send times and spawns one
greenlet per request without waiting for earlier responses; completions reach Locust's
``events.request`` hook, whose listener here records each request exactly (not Locust's rounded
statistics).

Inputs come through environment variables set by the parent:

- ``SCORETUNE_SCHEDULE``: the ``schedule.npz`` (``request_id``, ``t_s``, ``function_index``,
  ``payload_index``) with a ``schedule.json`` beside it (function names, URL and Host header per
  function, distinct payloads, concurrency);
- ``SCORETUNE_RECORDS_DIR``: where each load process writes ``records-<index>.json``;
- ``SCORETUNE_TIMEOUT_S``: per-request timeout; ``SCORETUNE_WORKERS``: number of load processes
  (each takes the requests with ``request_id % workers == worker_index``);
- ``SCORETUNE_START_EPOCH`` (optional): the Unix time of t = 0, for workers on other machines with
  synchronised clocks. Without it the local runner starts the clock itself, and in distributed mode
  the master broadcasts an epoch one second ahead when the test starts, so master and workers agree.

All times recorded are ``time.time()`` minus the epoch: ``sent_s`` is Locust's own request start time
(taken just before the request leaves), ``finished_s`` the time the request event fires.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time
from pathlib import Path

import gevent
import gevent.event
import gevent.pool
import numpy as np
from locust import User, events, task
from locust.contrib.fasthttp import FastHttpSession
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

log = logging.getLogger("scoretune.locustfile")

SCHEDULE = Path(os.environ.get("SCORETUNE_SCHEDULE", "schedule.npz"))
RECORDS_DIR = Path(os.environ.get("SCORETUNE_RECORDS_DIR", "."))
TIMEOUT_S = float(os.environ.get("SCORETUNE_TIMEOUT_S", "30"))
WORKERS = max(1, int(os.environ.get("SCORETUNE_WORKERS", "1")))
FIXED_EPOCH = float(os.environ.get("SCORETUNE_START_EPOCH", "0") or 0)
EPOCH_LEAD_S = 1.0

# open loop needs a socket per in-flight request: lift the soft descriptor limit to the hard one
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _hard == resource.RLIM_INFINITY or _soft < _hard:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, _hard) if _hard != resource.RLIM_INFINITY else 65536, _hard))

_epoch = gevent.event.AsyncResult()
if FIXED_EPOCH > 0:
    _epoch.set(FIXED_EPOCH)
_records: dict[str, list] = {k: [] for k in ("request_id", "sent_s", "finished_s", "status", "http_status", "node", "cold_start")}
_state = {"index": 0, "written": False, "done_workers": 0, "expected": 0}


def _is_timeout(exc: BaseException | None) -> bool:
    """A timeout, possibly wrapped (geventhttpclient raises RetriesExceeded(original=timeout))."""
    for _ in range(5):
        if exc is None:
            return False
        if isinstance(exc, TimeoutError | gevent.Timeout) or "timeout" in type(exc).__name__.lower():
            return True
        exc = getattr(exc, "original", None) or exc.__cause__ or exc.__context__
    return False


def _header(response, name: str) -> str | None:
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        value = headers.get(name)
        if value is None:
            value = headers.get(name.lower())
    except Exception:  # headers of an ErrorResponse may be a bare object
        return None
    return None if value is None else str(value)


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
    cold = _header(response, "X-Scoretune-Cold-Start")
    r = _records
    r["request_id"].append(int(context["request_id"]))
    r["sent_s"].append((start_time if start_time else context["sent"]) - epoch)
    r["finished_s"].append(now - epoch)
    r["status"].append(status)
    r["http_status"].append(code)
    r["node"].append(_header(response, "X-Scoretune-Node"))
    r["cold_start"].append(None if cold is None else cold.strip().lower() == "true")


def _write_records() -> None:
    path = RECORDS_DIR / f"records-{_state['index']}.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_records))
    os.replace(tmp, path)
    _state["written"] = True


@events.init.add_listener
def _on_init(environment, **kwargs):
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("scoretune_epoch", lambda msg, **kw: _epoch.set(float(msg.data["epoch"])))
    if isinstance(runner, MasterRunner):
        _state["expected"] = WORKERS

        def done(msg, **kw):
            _state["done_workers"] += 1
            if _state["done_workers"] >= _state["expected"]:
                gevent.spawn_later(0.1, runner.quit)

        runner.register_message("scoretune_done", done)


@events.test_start.add_listener
def _on_test_start(environment, **kwargs):
    runner = environment.runner
    if isinstance(runner, MasterRunner) and FIXED_EPOCH <= 0:
        epoch = time.time() + EPOCH_LEAD_S
        runner.send_message("scoretune_epoch", {"epoch": epoch})


@events.quitting.add_listener
def _on_quitting(environment, **kwargs):
    if not isinstance(environment.runner, MasterRunner) and _records["request_id"] and not _state["written"]:
        _write_records()


class ScheduleUser(User):
    """One per load process: dispatches that process's slice of the schedule, open loop."""

    def __init__(self, environment) -> None:
        super().__init__(environment)
        meta = json.loads(SCHEDULE.with_suffix(".json").read_text())
        data = np.load(SCHEDULE)
        self.functions: list[str] = meta["functions"]
        self.urls: list[str] = meta["urls"]
        self.hosts: list[str | None] = meta["hosts"]
        self.payloads: list[bytes] = [p.encode() for p in meta["payloads"]]
        self.request_id = data["request_id"]
        self.t_s = data["t_s"]
        self.fidx = data["function_index"]
        self.pidx = data["payload_index"]
        self.session = FastHttpSession(
            base_url=None, request_event=environment.events.request, user=None,
            network_timeout=TIMEOUT_S, connection_timeout=TIMEOUT_S, max_retries=0,
            concurrency=int(meta.get("concurrency", 1000)), insecure=True,
        )

    def _fire(self, k: int, epoch: float) -> None:
        f = int(self.fidx[k])
        name = self.functions[f]
        headers = {"X-Scoretune-Function": name, "Content-Type": "application/json"}
        if self.hosts[f]:
            headers["Host"] = self.hosts[f]
        ctx = {"request_id": int(self.request_id[k]), "epoch": epoch, "sent": time.time()}
        try:
            with gevent.Timeout(TIMEOUT_S + 1.0):
                self.session.request("POST", self.urls[f], name=name, data=self.payloads[int(self.pidx[k])],
                                     headers=headers, context=ctx)
        except gevent.Timeout as exc:
            # the whole exchange overran the timeout (a trickling server): Locust never fired, so we do
            events.request.fire(request_type="POST", name=name, response_time=(time.time() - ctx["sent"]) * 1000,
                                response_length=0, response=None, context=ctx, exception=exc,
                                start_time=ctx["sent"], url=self.urls[f])

    @task
    def dispatch(self) -> None:
        runner = self.environment.runner
        index = runner.worker_index if isinstance(runner, WorkerRunner) else 0
        _state["index"] = index
        epoch = _epoch.get(timeout=120) if (FIXED_EPOCH > 0 or isinstance(runner, WorkerRunner)) else None
        if epoch is None:
            epoch = time.time() + 0.25
            _epoch.set(epoch)
        mine = np.flatnonzero(self.request_id % WORKERS == index)
        pool = gevent.pool.Group()
        clock = time.time
        for k in mine:
            delay = epoch + self.t_s[k] - clock()
            if delay > 0:
                gevent.sleep(delay)
            pool.spawn(self._fire, int(k), epoch)
        pool.join(timeout=TIMEOUT_S + 5.0)
        _write_records()
        (RECORDS_DIR / f"epoch-{index}.txt").write_text(repr(epoch))
        if isinstance(runner, WorkerRunner):
            runner.send_message("scoretune_done", {"index": index})
        else:
            gevent.spawn_later(0.1, runner.quit)
        raise StopUser()
