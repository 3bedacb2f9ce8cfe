"""The one runtime that serves any handler of the suite over HTTP, following Knative's container
contract (knative/specs ``specs/serving/runtime-contract.md``, moved there from knative/serving's
``docs/runtime-contract.md``):

- listen on ``$PORT`` (Knative injects it, default 8080); ``POST /`` or ``POST /invoke`` runs the
  handler on the JSON body (an empty body means the spec's default payload; a body is merged over
  it), and answers with the handler's JSON result;
- ``GET /healthz`` is liveness (the process serves), ``GET /readyz`` readiness: 200 only once the
  handler module is imported and warmed, 503 before (and while draining);
- ``SIGTERM`` drains: uvicorn stops accepting and waits for in-flight requests to finish, as
  Knative's queue-proxy expects after its pre-stop drain;
- every response carries ``X-Scoretune-Node`` and ``X-Scoretune-Pod`` (env ``NODE_NAME`` and
  ``POD_NAME``, when set: the Downward API's ``spec.nodeName`` and ``metadata.name``) and
  ``X-Scoretune-Cold-Start`` ("true" for the first request this instance serves, else "false").

Handlers run off the event loop in worker threads, at most ``container concurrency`` at a time
(env ``CONTAINER_CONCURRENCY``, else the spec's value; 0 means unbounded, capped at Knative's
1000): excess requests wait for a slot, as they would in queue-proxy's breaker.

Start-up is kept short because a cold start pays for it: only this module, starlette, uvicorn,
PyYAML and the one handler are imported (not the pydantic spec parser or the kubernetes client).
Entry point: ``python -m functions.runtime --function NAME [--port P] [--host H]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from functions.errors import FunctionsError
from functions.payload import PayloadError
from functions.platform import PLATFORMS, Platform

log = logging.getLogger(__name__)

FUNCTIONS_DIR = Path(__file__).resolve().parent
PROTOCOLS = ("auto", *PLATFORMS)
"""What a runtime process serves: one platform's protocol, or ``auto``: both on one server (Knative posts to /, OpenWhisk's invoker to /init then /run), so one
image serves either platform."""
DEFAULT_PORT = 8080  # Knative's default user port (pkg/apis/serving/v1 DefaultUserPort)
MAX_CONCURRENCY = 1000  # Knative's upper bound on containerConcurrency (config-defaults max)
READY_WAIT_S = 300.0  # how long a request that arrives during warm-up waits for readiness

# BLAS/OpenMP pools pinned to one thread, as the image sets them (Dockerfile.j2): a request's CPU
# seconds are then seconds of one core, the unit of the spec's work.cpu_s.
SINGLE_THREAD_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}

NODE_HEADER = "X-Scoretune-Node"
POD_HEADER = "X-Scoretune-Pod"
COLD_START_HEADER = "X-Scoretune-Cold-Start"

Handler = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class RuntimeConfig:
    """What the runtime needs from a spec: the handler, its default payload, its concurrency."""

    name: str
    handler: str
    payload: dict[str, Any] = field(default_factory=dict)
    container_concurrency: int = 0


def _spec_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/spec.yaml"))


def load_runtime_config(name: str, root: Path = FUNCTIONS_DIR) -> RuntimeConfig:
    """Read the runtime's few fields from ``<root>/*/spec.yaml`` of function ``name``.

    The directory named like the function (``float-ops`` -> ``float_ops``) is tried first, so
    start-up reads one small file. Full validation is :func:`functions.spec.load_spec`'s job at
    build and test time; here only the fields used are checked.
    """
    guess = root / name.replace("-", "_") / "spec.yaml"
    candidates = [guess] + [p for p in _spec_files(root) if p != guess]
    for path in candidates:
        if not path.exists():
            continue
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, dict) or data.get("name") != name:
            continue
        handler = data.get("handler")
        if not isinstance(handler, str) or ":" not in handler:
            raise FunctionsError(f"{path}: field handler: must be 'module:function', got {handler!r}")
        payload = data.get("payload") or {}
        if not isinstance(payload, dict):
            raise FunctionsError(f"{path}: field payload: must be a mapping")
        cc = data.get("container_concurrency", 0)
        if not isinstance(cc, int) or not 0 <= cc <= MAX_CONCURRENCY:
            raise FunctionsError(f"{path}: field container_concurrency: must be 0..{MAX_CONCURRENCY}")
        return RuntimeConfig(name=name, handler=handler, payload=dict(payload), container_concurrency=cc)
    known = sorted(
        str(d.get("name"))
        for d in (yaml.safe_load(p.read_text()) for p in _spec_files(root))
        if isinstance(d, dict)
    )
    raise FunctionsError(f"unknown function {name!r}; known: {', '.join(known) or '(none)'}")


def import_handler(ref: str) -> tuple[Handler, Any]:
    """``module:function`` -> (the handler, its module)."""
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    try:
        handler = getattr(module, attr)
    except AttributeError:
        raise FunctionsError(f"handler {ref!r}: module {module_name} has no {attr!r}") from None
    if not callable(handler):
        raise FunctionsError(f"handler {ref!r} is not callable")
    return handler, module


def concurrency_from_env(config: RuntimeConfig, environ: dict[str, str] | None = None) -> int:
    """``CONTAINER_CONCURRENCY`` if set (as Knative sets it for queue-proxy), else the spec's."""
    environ = os.environ if environ is None else environ
    raw = environ.get("CONTAINER_CONCURRENCY")
    if raw is None or raw == "":
        return config.container_concurrency
    try:
        value = int(raw)
    except ValueError:
        raise FunctionsError(
            f"CONTAINER_CONCURRENCY must be an integer 0..{MAX_CONCURRENCY}, got {raw!r}"
        ) from None
    if not 0 <= value <= MAX_CONCURRENCY:
        raise FunctionsError(f"CONTAINER_CONCURRENCY must be an integer 0..{MAX_CONCURRENCY}, got {raw!r}")
    return value


class FunctionApp:
    """The state of one function instance: readiness, the concurrency slots, the first request."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        concurrency: int | None = None,
        node_name: str | None = None,
        pod_name: str | None = None,
    ) -> None:
        self.config = config
        self.concurrency = config.container_concurrency if concurrency is None else concurrency
        self.node_name = node_name
        self.pod_name = pod_name
        self.handler: Handler | None = None
        self.ready = threading.Event()  # loaded and warmed
        self.settled = threading.Event()  # loading finished, either way
        self.draining = False
        self.shutdown_requested: Callable[[], bool] = lambda: False  # serve() wires uvicorn's flag
        self.load_error: BaseException | None = None
        self.served = 0
        self.in_flight = 0  # accepted and not yet answered (waiting for a slot or running)
        self.running = 0  # inside the handler
        self._slots: anyio.CapacityLimiter | None = None
        self._threads: anyio.CapacityLimiter | None = None
        self.app = Starlette(
            routes=[
                Route("/", self.invoke, methods=["POST"]),
                Route("/invoke", self.invoke, methods=["POST"]),
                Route("/healthz", self.healthz, methods=["GET"]),
                Route("/readyz", self.readyz, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )

    # --- start-up ---------------------------------------------------------------------------
    def load(self) -> None:
        """Import the handler and warm it (its optional module-level ``warm()``); then ready."""
        started = time.perf_counter()
        try:
            handler, module = import_handler(self.config.handler)
            warm = getattr(module, "warm", None)
            if callable(warm):
                warm()
            self.handler = handler
        except BaseException as err:  # reported by /readyz and every request, never hidden
            self.load_error = err
            log.exception("function %s failed to load", self.config.name)
            self.settled.set()
            return
        self.ready.set()
        self.settled.set()
        log.info("function %s ready in %.3f s", self.config.name, time.perf_counter() - started)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # The container-concurrency semaphore; worker threads are a separate, larger pool so
        # that waiting for a slot never holds a thread.
        self._slots = anyio.CapacityLimiter(self.concurrency or MAX_CONCURRENCY)
        self._threads = anyio.CapacityLimiter(MAX_CONCURRENCY)
        loader = threading.Thread(target=self.load, name=f"load-{self.config.name}", daemon=True)
        loader.start()
        try:
            yield
        finally:
            self.draining = True

    # --- endpoints --------------------------------------------------------------------------
    def _headers(self, cold: bool | None) -> dict[str, str]:
        headers = {}
        if self.node_name:
            headers[NODE_HEADER] = self.node_name
        if self.pod_name:
            headers[POD_HEADER] = self.pod_name
        if cold is not None:
            headers[COLD_START_HEADER] = "true" if cold else "false"
        return headers

    async def healthz(self, request: Request) -> Response:
        """Liveness, with the instance's counters (the embedded lab and the tests read them)."""
        return JSONResponse(
            {
                "status": "ok",
                "function": self.config.name,
                "ready": self.ready.is_set(),
                "concurrency": self.concurrency,
                "in_flight": self.in_flight,
                "running": self.running,
                "served": self.served,
            },
            headers=self._headers(None),
        )

    async def readyz(self, request: Request) -> Response:
        if self.load_error is not None:
            return JSONResponse({"status": "failed", "error": repr(self.load_error)}, status_code=503)
        draining = self.draining or self.shutdown_requested()
        if draining or not self.ready.is_set():
            return JSONResponse({"status": "draining" if draining else "starting"}, status_code=503)
        return JSONResponse({"status": "ready", "function": self.config.name}, headers=self._headers(None))

    async def invoke(self, request: Request) -> Response:
        # The first request this instance serves is the cold one; counted before any await so
        # concurrent first requests cannot both claim it.
        cold = self.served == 0
        self.served += 1
        self.in_flight += 1
        try:
            return await self._invoke(request, self._headers(cold))
        finally:
            self.in_flight -= 1

    async def _invoke(self, request: Request, headers: dict[str, str]) -> Response:
        body = await request.body()
        try:
            overrides = json.loads(body) if body.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            return JSONResponse({"error": f"body is not JSON: {err}"}, status_code=400, headers=headers)
        if not isinstance(overrides, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400, headers=headers)
        status, result = await self.call(overrides)
        return JSONResponse(result, status_code=status, headers=headers)

    async def loaded(self) -> str | None:
        """Wait (up to READY_WAIT_S) until the handler's import has settled, without running it:
        None once it loaded, else why not (OpenWhisk's ``/init``)."""
        if not self.settled.is_set():
            await anyio.to_thread.run_sync(self.settled.wait, READY_WAIT_S)
        if self.handler is not None:
            return None
        return repr(self.load_error) if self.load_error is not None else "still loading"

    async def call(self, overrides: dict[str, Any]) -> tuple[int, Any]:
        """Run the handler on the spec's payload with ``overrides``: (HTTP status, JSON body), the
        body ``{"error": ...}`` unless 200. Both protocols (Knative's, OpenWhisk's /run) use it."""
        payload = {**self.config.payload, **overrides}
        if not self.settled.is_set():
            await anyio.to_thread.run_sync(self.settled.wait, READY_WAIT_S)
        if self.handler is None:
            return 503, {"error": f"function not loaded: {self.load_error!r}"}
        handler = self.handler
        assert self._slots is not None and self._threads is not None
        try:
            async with self._slots:
                self.running += 1
                try:
                    result = await anyio.to_thread.run_sync(handler, payload, limiter=self._threads)
                finally:
                    self.running -= 1
        except PayloadError as err:
            return 400, {"error": str(err)}
        except Exception as err:  # a handler failure is the request's 500, the instance lives on
            log.exception("function %s failed", self.config.name)
            return 500, {"error": f"{type(err).__name__}: {err}"}
        return 200, result


def build_app(
    name: str,
    *,
    root: Path = FUNCTIONS_DIR,
    concurrency: int | None = None,
    node_name: str | None = None,
    environ: dict[str, str] | None = None,
) -> FunctionApp:
    """The instance for function ``name``, configured from its spec and the environment."""
    environ = dict(os.environ) if environ is None else environ
    config = load_runtime_config(name, root)
    if concurrency is None:
        concurrency = concurrency_from_env(config, environ)
    if node_name is None:
        node_name = environ.get("NODE_NAME") or None
    return FunctionApp(config, concurrency=concurrency, node_name=node_name, pod_name=environ.get("POD_NAME") or None)


def _server_class() -> type:
    """uvicorn's Server, but a drained SIGTERM/SIGINT ends the process with status 0.

    uvicorn (>= 0.29) re-raises a captured signal once it has shut down, so the process would
    die *by* SIGTERM after draining cleanly; a container runtime reads that as exit 143. The
    drain itself (stop accepting, finish in-flight requests, run the lifespan shutdown) is
    uvicorn's own ``handle_exit`` and is unchanged.
    """
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


KEEP_ALIVE_S = 90
"""How long an idle keep-alive connection stays open on the server side. uvicorn's default is 5 s,
shorter than the lab controller's client keeps idle connections (``FORWARD_KEEPALIVE_S``): a
request sent on a connection the server was closing at that moment failed as a 502 and marked a
healthy warm instance gone, a random error (counted at the 30 s timeout in the mean) and a random
cold start. The client must give up an idle connection first, as Go's servers (Knative's
queue-proxy) never close one on their own; 90 s is Go's ``http.Transport`` IdleConnTimeout."""


def serve(
    name: str,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    graceful_timeout_s: float = 30.0,
    log_level: str = "warning",
    protocol: str = "auto",
) -> None:
    """Serve function ``name`` until SIGTERM/SIGINT, then drain in-flight requests and exit.
    ``protocol``: ``knative`` (POST / with the payload), ``openwhisk`` (the action proxy's /init
    and /run, :mod:`functions.openwhisk`) or ``auto``, both."""
    import uvicorn

    if protocol not in PROTOCOLS:
        raise FunctionsError(f"--protocol {protocol!r}: one of {', '.join(PROTOCOLS)}")
    instance = build_app(name)
    app = instance.app
    if protocol != Platform.KNATIVE:
        from functions.openwhisk import ActionProxy

        proxy = ActionProxy(instance)
        if protocol == "openwhisk":
            app = proxy.app
        else:
            app.router.routes.extend(r for r in proxy.app.routes if getattr(r, "path", "") in ("/init", "/run"))
    if port is None:
        port = int(os.environ.get("PORT", DEFAULT_PORT))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(graceful_timeout_s),
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = _server_class()(config)
    instance.shutdown_requested = lambda: bool(server.should_exit)
    log.info("serving %s on http://%s:%d", name, host, port)
    asyncio.run(server.serve())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m functions.runtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--function", required=True, help="function name, as in its spec (e.g. float-ops)")
    parser.add_argument("--port", type=int, default=None, help="port (default: $PORT, else 8080)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 inside a container)")
    parser.add_argument("--graceful-timeout", type=float, default=30.0, help="seconds to drain on SIGTERM")
    parser.add_argument("--log-level", default=os.environ.get("SCORETUNE_LOG_LEVEL", "warning"))
    parser.add_argument("--protocol", default=os.environ.get("SCORETUNE_PROTOCOL", "auto"),
                        help="knative (POST /), openwhisk (the action proxy: POST /init, POST /run) or auto "
                             "(both); default: $SCORETUNE_PROTOCOL, else auto")
    args = parser.parse_args(argv)
    for key, value in SINGLE_THREAD_ENV.items():  # before the handler (and numpy) is imported
        os.environ.setdefault(key, value)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        serve(
            args.function,
            host=args.host,
            port=args.port,
            graceful_timeout_s=args.graceful_timeout,
            log_level=args.log_level,
            protocol=args.protocol,
        )
    except FunctionsError as err:
        parser.exit(2, f"error: {err}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
