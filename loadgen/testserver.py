"""A small, fast HTTP/1.1 server on 127.0.0.1 to replay against: for tests and ``bench replay``.

asyncio with keep-alive and no framework, so one core serves thousands of requests per second and
the load generator, not the server, is what a benchmark measures. Behaviour is set per function
(the ``X-Scoretune-Function`` request header, as the embedded lab routes): a delay, a status code,
or a hang (never answer, to exercise timeouts). Every response carries ``X-Scoretune-Node`` and
``X-Scoretune-Cold-Start`` (the first request of each function is "cold"), and the server records
the arrival time, function and Host header of every request, which is how tests check that load is open-loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)


@dataclass
class Behaviour:
    delay_s: float = 0.0
    status: int = 200
    hang: bool = False


@dataclass
class ReplayTestServer:
    """Start with :meth:`start` (a background thread with its own event loop), stop with :meth:`stop`."""

    default: Behaviour = field(default_factory=Behaviour)
    per_function: dict[str, Behaviour] = field(default_factory=dict)
    node: str = "node-a"
    arrivals: list[tuple[float, str, str]] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._seen: set[str] = set()
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                now = time.time()
                lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                fn = headers.get("x-scoretune-function", "")
                self.arrivals.append((now, fn, headers.get("host", "")))
                b = self.per_function.get(fn, self.default)
                if b.hang:
                    await asyncio.sleep(3600)
                if b.delay_s:
                    await asyncio.sleep(b.delay_s)
                cold = fn not in self._seen
                self._seen.add(fn)
                body = b'{"ok": true}'
                writer.write(
                    (
                        f"HTTP/1.1 {b.status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                        f"X-Scoretune-Node: {self.node}\r\nX-Scoretune-Cold-Start: {'true' if cold else 'false'}\r\n\r\n"
                    ).encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # server shutting down
        finally:
            writer.close()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop

        async def main() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, backlog=2048)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            async with self._server:
                await self._server.serve_forever()

        try:
            loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass
        finally:
            loop.close()

    def start(self) -> ReplayTestServer:
        self._thread = threading.Thread(target=self._run, name="replay-test-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            loop = self._loop

            def shutdown() -> None:
                for task in asyncio.all_tasks(loop):
                    task.cancel()

            loop.call_soon_threadsafe(shutdown)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ReplayTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
