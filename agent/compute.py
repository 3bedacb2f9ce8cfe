"""Where the heavy jobs run: this machine's process pool (the default) or a Ray cluster.

The evaluation grid (methods x scenarios x seeds x budgets), its 500-run oracle searches and the
noisy protocol's truth runs are tasks: a picklable function and its argument. :func:`run_tasks`
runs them serially, on a process pool of ``jobs`` workers, or on Ray (``ray="auto"`` starts one on
this machine; an address joins a running cluster), says which finished as they finish, and returns
the results **in task order** whatever order they finished in, so a grid gives the same tables on
every engine. On Ray a task whose worker dies (a lost node, a killed process) is rerun, up to
:data:`RAY_RETRIES` times; an error a task raises itself is not retried (it would fail again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

from agent.errors import AgentError, ScoretuneError

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
RAY_RETRIES = 3
CONNECT_TIMEOUT_S = 5.0
LOCAL_RAY = "auto"
_connected: dict[str, str] = {}
"""The address this process joined (Ray allows one cluster per process)."""


@dataclass(frozen=True)
class Compute:
    """How to run a batch of tasks: ``jobs`` processes here, or Ray (``ray``: ``auto`` or an address)."""

    jobs: int = 1
    ray: str | None = None

    def describe(self) -> str:
        if self.ray:
            return "a local Ray" if self.ray == LOCAL_RAY else f"the Ray cluster at {self.ray}"
        return f"{self.jobs} worker process(es)" if self.jobs > 1 else "this process"


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], compute: Compute = Compute(),
              on_done: Callable[[int, R], None] | None = None) -> list[R]:
    """``[fn(t) for t in tasks]`` on ``compute``; ``on_done(index, result)`` as each finishes."""
    results: list[Any] = [None] * len(tasks)

    def finished(i: int, result: R) -> None:
        results[i] = result
        if on_done is not None:
            on_done(i, result)

    if compute.ray:
        _ray_map(fn, tasks, compute, finished)
    elif compute.jobs > 1 and len(tasks) > 1:
        _pool_map(fn, tasks, compute.jobs, finished)
    else:
        for i, t in enumerate(tasks):
            finished(i, fn(t))
    return results


def _leave_interrupts_to_the_parent() -> None:
    """A worker's initializer: Ctrl-C reaches the whole process group and the CLI turns SIGTERM into
    KeyboardInterrupt; in a worker either would only fail its current task and let it take the
    next. The parent decides: it cancels what is queued and terminates its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _pool_map(fn: Callable[[T], R], tasks: Sequence[T], jobs: int, finished: Callable[[int, Any], None]) -> None:
    """Tasks on ``jobs`` worker processes. An interrupt (Ctrl-C, SIGTERM, an error reporting a
    result) stops the pool at once: the executor's own exit would wait for every queued task --
    hours of an evaluation, its results never reported -- so queued tasks are cancelled and the
    workers terminated before the exception goes on."""
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_leave_interrupts_to_the_parent)
    try:
        futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        for future in as_completed(futures):
            finished(futures[future], future.result())
    except BaseException:
        workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=10)
        raise
    pool.shutdown(wait=True)


def connect_ray(address: str, *, num_cpus: int | None = None) -> Any:
    """The ``ray`` module, initialised: ``auto`` starts a Ray on this machine (``num_cpus`` of it),
    an address joins that cluster. An address nothing answers at, or a missing ``ray``, is one
    :class:`AgentError` line, never a long hang or a traceback."""
    try:
        import ray
    except ImportError:
        raise AgentError("--ray needs Ray: pip install 'scoretune[ray]' (on every machine of the cluster)") from None
    if address != LOCAL_RAY:
        host, port = _host_port(address)
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as err:
            raise AgentError(f"--ray {address}: no Ray cluster answers there ({err.strerror or err}); start one "
                             "with `ray start --head` (docs/ray.md)") from None
    if ray.is_initialized():
        if address == LOCAL_RAY or address == _connected.get("address"):
            return ray  # this process's Ray (a local one serves "auto")
        ray.shutdown()  # another cluster was asked for
    try:
        if address == LOCAL_RAY:
            ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
        else:
            with _quiet_stderr():  # Ray's C++ client prints its retries there; our line says what failed
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise AgentError(f"--ray {address}: cannot start or join Ray ({type(err).__name__}: {first})") from None
    _connected["address"] = address
    return ray


def _host_port(address: str) -> tuple[str, int]:
    """``ray://host:10001`` (Ray Client) or ``host:6379`` (the head's GCS) as (host, port)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise AgentError(f"--ray {address!r}: expected auto, HOST:PORT or ray://HOST:PORT")
    return host, int(port)


def _ray_map(fn: Callable[[T], R], tasks: Sequence[T], compute: Compute, finished: Callable[[int, R], None]) -> None:
    ray = connect_ray(compute.ray or LOCAL_RAY, num_cpus=compute.jobs if compute.ray == LOCAL_RAY else None)
    remote = ray.remote(max_retries=RAY_RETRIES, retry_exceptions=False)(fn)
    index = {remote.remote(t): i for i, t in enumerate(tasks)}
    pending = list(index)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as err:
                cause = getattr(err, "cause", None)
                if isinstance(cause, ScoretuneError):
                    raise cause from None  # the task's own one-line error
                raise AgentError(f"a task failed on Ray: {type(cause or err).__name__}: {cause or err}") from None
            except ray.exceptions.RayError as err:  # retries spent, the cluster gone
                raise AgentError(f"Ray lost a task after {RAY_RETRIES} retries ({type(err).__name__})") from None
            finished(index[ref], result)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for the block (C++ code writes there, not to sys.stderr)."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
