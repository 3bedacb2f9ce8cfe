"""The suite's functions as OpenWhisk actions: the action proxy protocol around the same handlers.

apache/openwhisk ``docs/actions-new.md`` ("Action Interface"): a web server on port 8080 with
``POST /init`` (called once per container with ``{"value": {"name", "main", "code", "binary"}}``;
200 when ready, any other status an initialisation error ``{"error": ...}``; a second call is an
error) and ``POST /run`` (``{"value": <parameters>, "namespace", "action_name", "activation_id",
"deadline", "api_key", ...}``; 200 with the result, a JSON object, or another status with
``{"error": ...}``). The handler is built into the image, so ``/init`` carries no code to load:
it records the action's name and waits until the handler has loaded -- it never runs it (a real
pod is Ready before its imports finish, so ``/init`` nearly always arrives during the load).

Errors follow upstream's table (apache/openwhisk ``ActivationResult.processRunResponseContent``
at ef725a6, and the actionloop proxy of openwhisk-runtime-go, ``runHandler.go``): an exception or
a refused payload in the *handler* is the action's own error -- ``/run`` answers **200** with
``{"error": ...}`` (statusCode 1, application error; the container stays warm) -- while a failure
of the *proxy* (not initialised, a body that is not JSON, a result that is not an object, a
handler that never loaded) is a non-200 (statusCode 2, developer error; the invoker destroys the
container). After each activation the proxy
writes OpenWhisk's end-of-activation markers to stdout and stderr, which the invoker's log
collection waits for (``XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX``).

The node and pod that served an activation, and whether it was the container's first (cold), are
returned in the result under ``"scoretune"``: an OpenWhisk client sees the result, not the HTTP
headers of the container (the invoker sets ``NODE_NAME`` and ``POD_NAME`` from
``whisk.kubernetes.field-ref-environment``).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

END_MARKER = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"
"""The last log line of an activation on stdout and stderr (invoker: DockerContainer.ActivationSentinel)."""


class Instance(Protocol):
    """What the proxy uses of :class:`functions.runtime.FunctionApp`."""

    node_name: str | None
    pod_name: str | None
    served: int
    in_flight: int

    async def call(self, overrides: dict[str, Any]) -> tuple[int, Any]: ...
    async def loaded(self) -> str | None: ...
    async def readyz(self, request: Request) -> Response: ...
    async def healthz(self, request: Request) -> Response: ...
    def _lifespan(self, app: Starlette) -> contextlib.AbstractAsyncContextManager[None]: ...


class ActionProxy:
    """One action container: initialised once, then any number of (non-overlapping) activations."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.action: str | None = None
        self.app = Starlette(
            routes=[
                Route("/init", self.init, methods=["POST"]),
                Route("/run", self.run, methods=["POST"]),
                Route("/healthz", instance.healthz, methods=["GET"]),
                Route("/readyz", instance.readyz, methods=["GET"]),
            ],
            lifespan=instance._lifespan,
        )

    @staticmethod
    async def _json(request: Request) -> dict[str, Any] | None:
        try:
            body = json.loads(await request.body() or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return body if isinstance(body, dict) else None

    async def init(self, request: Request) -> Response:
        if self.action is not None:
            return JSONResponse({"error": "Cannot initialize the action more than once."}, status_code=403)
        body = await self._json(request)
        value = body.get("value") if body is not None else None
        if not isinstance(value, dict):
            return JSONResponse({"error": "init: the body must be {\"value\": {...}}"}, status_code=400)
        self.action = str(value.get("name") or "")
        loaded = await self.instance.loaded()  # waits for the import to settle; never runs the handler
        if loaded is not None:
            self.action = None
            return JSONResponse({"error": f"the function did not load: {loaded}"}, status_code=502)
        return JSONResponse({"ok": True})

    async def run(self, request: Request) -> Response:
        if self.action is None:
            return JSONResponse({"error": "the action is not initialised (POST /init first)"}, status_code=502)
        body = await self._json(request)
        value = body.get("value", {}) if body is not None else None
        if not isinstance(value, dict):
            return JSONResponse({"error": "run: the body must be {\"value\": {...}}"}, status_code=400)
        cold = self.instance.served == 0
        self.instance.served += 1
        self.instance.in_flight += 1
        try:
            status, result = await self.instance.call(value)
        finally:
            self.instance.in_flight -= 1
            for stream in (sys.stdout, sys.stderr):
                print(END_MARKER, file=stream, flush=True)
        where = {"node": self.instance.node_name, "pod": self.instance.pod_name, "cold": cold,
                 "activation_id": body.get("activation_id") if body else None}
        if status == 503:  # the handler never loaded: the container is broken (developer error)
            return JSONResponse(result, status_code=502)
        if status != 200:  # the handler refused the payload or raised: the action's error (application error)
            return JSONResponse({"error": result.get("error", "the action failed"), "scoretune": where})
        if not isinstance(result, dict):
            return JSONResponse({"error": "the function's result is not a JSON object"}, status_code=502)
        return JSONResponse({**result, "scoretune": where})


__all__ = ["END_MARKER", "ActionProxy"]
