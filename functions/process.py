"""Running function instances as local subprocesses: ``python -m functions.runtime`` on 127.0.0.1.

Shared by the tests, the runtime benchmark and any caller that wants a real instance without a
container (the embedded lab starts its own the same way). The caller owns the process and stops
it with :meth:`subprocess.Popen.terminate` (SIGTERM, which drains in-flight requests).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from functions.errors import FunctionsError

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_runtime(
    name: str,
    port: int,
    *,
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the runtime of function ``name`` on 127.0.0.1:``port``; ``env`` adds variables
    (``NODE_NAME``, ``CONTAINER_CONCURRENCY``)."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full_env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "functions.runtime",
            "--function",
            name,
            "--port",
            str(port),
            *(extra_args or []),
        ],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def get_json(port: int, path: str, *, timeout_s: float = 5.0) -> tuple[int, dict[str, Any]]:
    """``GET path`` on 127.0.0.1:``port`` -> (status, JSON body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> float:
    """Poll ``/readyz`` until 200; returns the seconds waited. Raises if the process exits."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            last = (err.strip().splitlines() or ["(no output)"])[-1]
            raise FunctionsError(f"runtime exited with status {proc.returncode}: {last}")
        try:
            if get_json(port, "/readyz", timeout_s=1.0)[0] == 200:
                return time.perf_counter() - start
        except OSError:
            pass
        time.sleep(0.005)
    raise FunctionsError(f"runtime on port {port} not ready after {timeout_s:g} s")


@contextlib.contextmanager
def serving(app: Any, *, start_timeout_s: float = 20.0) -> Iterator[int]:
    """An ASGI ``app`` on a real uvicorn server on 127.0.0.1, in a thread of this process (its
    lifespan run); yields the port and stops the server on exit. The tests' local servers: a
    function instance, a fake OpenWhisk controller."""
    import threading

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise FunctionsError(f"uvicorn did not start on 127.0.0.1:{port}")
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(start_timeout_s)
