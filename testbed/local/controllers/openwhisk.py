"""The embedded lab on OpenWhisk: a controller and its invokers in one asyncio process, in front of
real action containers (the suite's runtime processes, speaking the action protocol).

The same decisions as the simulator's OpenWhisk (:mod:`testbed.sim.openwhisk`), made on real
processes and wall-clock time, through the REST API a real deployment answers:

- **API** (apache/openwhisk docs/rest_api.md, controller ``Actions.scala``): ``POST
  /api/v1/namespaces/{_|guest}/actions/NAME?blocking=true&result=false`` with Basic auth (the lab's
  guest key, ``<state>/openwhisk/auth.guest``, 0600) answers the activation record: 200 on
  success, 502 for an application or developer error (``statusCode`` 1, 2), 500 for a whisk
  error (3), 503 when no invoker is healthy, 202 with the id when the 60 s blocking wait runs out
  (the activation goes on and is then read with ``GET .../activations/ID``). ``GET
  .../actions`` lists the suite's actions, ``GET .../actions/NAME`` shows one, ``GET
  .../activations`` lists activations (newest first; ``limit``, ``skip``, ``since``, ``upto``,
  ``name``, ``docs``), ``GET /api/v1/namespaces`` the key's namespace, and ``GET /invokers`` the
  invokers' health, as the controller's own routes do; errors are ``{"error", "code"}``.
- **Controller**: the sharding balancer (:class:`testbed.openwhisk.balancer.Balancer`) picks the
  invoker: home invoker by hash, co-prime steps, memory slots, forced at random when all are full;
  invokers run one per node action pods may use (labelled ``openwhisk-role=invoker``, else every
  schedulable node), and an invoker whose node is lost is unhealthy.
- **Invoker**: its :class:`~testbed.openwhisk.pool.ContainerPool` takes the activation: a free
  warm container at once; else a new container, the least recently used idle ones removed first if
  memory is short; else it waits in the invoker's buffer. A new container is an action pod
  (:func:`functions.openwhisk_action.action_pod`: memory request = limit, no CPU request)
  scheduled by the lab's scheduler with the profile under test anywhere among the invoker nodes,
  started on its node's agent, seen Ready at the invoker's next 1 s poll of the pod, then
  ``POST /init`` and its activations' ``POST /run``. A pod not up within 60 s
  (``whisk.kubernetes.timeouts.run``) fails its activations with a whisk error (statusCode 3 and
  upstream's "Failed to run container with image" message; every failure carries upstream's message,
  so the one fault rule of :mod:`testbed.openwhisk.faults` judges the lab's runs as it judges the
  simulator's and a real cluster's: the backend applies it after each run, with the invokers'
  state ``run/end`` reports). A container idle for 10 minutes is removed.

The record carries ``waitTime`` (arrival to the container taking the activation), ``initTime``
(the cold start's ``/init``, with the handler's load time the agent measured while the pod came
up: the lab's agent answers once the handler is loaded), ``duration`` (init and run) and the
result, in which the action proxy names the node, pod and whether it was the container's first.
Each invoker's health is the controller's (:mod:`testbed.openwhisk.health`, as in the simulator):
more than 3 whisk errors among its last 10 activations make it unhealthy until health-test
actions succeed. Not modelled, as in the simulator: prewarm stem cells (a blackbox action never
takes one), the health-test action's own pod, invoker restarts, the activation store beyond this
process's memory, throttling.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientError, ClientTimeout, web

from functions.openwhisk_action import (
    ACTION_LOG_LIMIT_MB,
    INVOKER_ROLE,
    action_concurrency,
    action_memory_mb,
    container_name,
)
from functions.platform import Platform
from testbed.local.controllers.base import REMOVED, LabControl
from testbed.local.placement import action_pod_object
from testbed.local.routing import Instance
from testbed.local.state import LabState
from testbed.openwhisk.balancer import Balancer
from testbed.openwhisk.config import OpenWhiskConfig
from testbed.openwhisk.faults import ABNORMAL_INIT, ABNORMAL_RUN, IMAGE_PULL, NO_INVOKERS, POD_NOT_READY
from testbed.openwhisk.health import TEST_ACTION_PERIOD_S, InvokerHealth, Result
from testbed.openwhisk.pool import Container, ContainerPool, Placement

log = logging.getLogger(__name__)

BLOCKING_TIMEOUT_S = 60.0
"""The controller's longest wait for a blocking invocation (``Actions.scala``
``maxWaitForBlockingActivation``); then 202 with the activation id."""
ACTION_TIMEOUT_S = 60.0
"""The action's time limit (``TimeLimit`` default, 60 000 ms): a run still going then is a
developer error and its container is destroyed."""
IDLE_SCAN_S = 1.0
STATUS = {0: "success", 1: "application error", 2: "action developer error", 3: "whisk internal error"}
"""``response.status`` by ``statusCode`` (apache/openwhisk ActivationResponse.scala)."""


def status_code(http_status: int, body: dict[str, Any]) -> int:
    """An activation's statusCode from the container's ``/run`` answer, as upstream's
    ``ActivationResult.processRunResponseContent`` (apache/openwhisk ef725a6) decides it: 200
    without ``error`` is a success (0), 200 with ``error`` the action's own error (1, the
    container stays warm), any other status, no answer or a timeout a developer error (2, the
    container is destroyed)."""
    if http_status == 200:
        return 1 if "error" in body else 0
    return 2


HTTP_BY_CODE = {0: 200, 1: 502, 2: 502, 3: 500}
"""``Actions.scala``: success 200, application or container (developer) error 502, else 500."""
def api_error(status: int, message: str) -> web.Response:
    """An error as the controller answers it (``ErrorResponse``: the message and the request's
    transaction id as ``code``; apache/openwhisk ``common/scala/.../http/ErrorResponse.scala``)."""
    return web.json_response({"error": message, "code": uuid.uuid4().hex}, status=status)


def _refused() -> web.Response:
    return api_error(401, "The supplied authentication is invalid.")


NOT_FOUND = "The requested resource does not exist."
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 30, 200
"""Activations listed per page by default and at most (``Collection`` defaults; ``limit=0`` is the
maximum, as ``RestApiCommons.stringToListLimit`` reads it)."""


def list_window(query: Any) -> tuple[int, int, int | None, int | None] | str:
    """``(limit, skip, since, upto)`` of a list request's query, or the 400 message upstream gives
    (``RestApiCommons.stringToListLimit`` / ``stringToListSkip``, ``Messages``; since and upto are
    epoch milliseconds)."""
    def integer(name: str, default: int | None) -> int | None | str:
        raw = query.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            if name in ("since", "upto"):
                return f"The query parameter '{name}' was malformed:\nParameter is not a valid value for epoch seconds: {raw}"
            return f"The query parameter '{name}' was malformed:\nThe value '{raw}' is not an integer for activations."

    limit, skip = integer("limit", LIST_LIMIT_DEFAULT), integer("skip", 0)
    since, upto = integer("since", None), integer("upto", None)
    for v in (limit, skip, since, upto):
        if isinstance(v, str):
            return v
    assert isinstance(limit, int) and isinstance(skip, int)
    if not 0 <= limit <= LIST_LIMIT_MAX:
        return (f"The query parameter 'limit' was malformed:\nThe value '{limit}' is not in the range of 0 to "
                f"{LIST_LIMIT_MAX} for activations.")
    if skip < 0:
        return f"The query parameter 'skip' was malformed:\nThe value '{skip}' is not greater than or equal to 0 for activations."
    return (limit or LIST_LIMIT_MAX), skip, since, upto  # type: ignore[return-value]


@dataclass(eq=False)
class Activation:
    """One invocation, from the controller's receipt to its record."""

    id: str
    action: str
    params: dict[str, Any]
    arrival_s: float
    done: asyncio.Future
    invoker: int = -1
    started_s: float | None = None
    """When the invoker took it into a container (the end of ``waitTime``)."""
    init_ms: int | None = None
    record: dict[str, Any] | None = None


@dataclass
class _Action:
    name: str
    memory_mb: int
    concurrency: int


class WhiskController(LabControl):
    """The lab on OpenWhisk (see the module docstring)."""

    platform = Platform.OPENWHISK

    def __init__(self, state: LabState) -> None:
        super().__init__(state)
        self.ow = OpenWhiskConfig(**(self.lab.get("openwhisk") or {}))  # checked by lab.up
        key = state.read_guest_key()
        if key is None:
            raise SystemExit(f"no OpenWhisk key in {state.guest_key_file}")
        self.key = key
        label, value = INVOKER_ROLE
        labelled = [n.name for n in self.cluster.nodes if n.labels.get(label) == value]
        self.affinity = bool(labelled)  # the chart's user-pod-node-affinity, as testbed.platforms.invoker_affinity
        self.invoker_nodes = labelled or [n.name for n in self.cluster.nodes if not n.unschedulable]
        self.actions = {name: _Action(name, action_memory_mb(spec), action_concurrency(spec))
                        for name, spec in self.specs.items()}
        self.n_invokers = self.ow.invokers or max(1, len(self.invoker_nodes))
        self.activations: dict[str, Activation] = {}
        self._freed = asyncio.Event()
        self._reset_functions()

    # --- state ------------------------------------------------------------------------------
    def _reset_functions(self) -> None:
        ow = self.ow
        self._started_ms = int(time.time() * 1000)
        self.balancer = Balancer(self.n_invokers, ow.user_memory_mb, managed_fraction=ow.managed_fraction,
                                 blackbox_fraction=ow.blackbox_fraction, controllers=ow.controllers, seed=self.seed)
        self.pools = [ContainerPool(ow.user_memory_mb) for _ in range(self.n_invokers)]
        self.waiting: dict[Container, list[Activation]] = {}
        """Activations waiting for a container that is still starting."""
        self.activations = {}
        self.history = []
        self.events = []
        self.health = [InvokerHealth() for _ in range(self.n_invokers)]
        """Each invoker's health as the controller judges it from its results (testbed.openwhisk.health)."""
        for i in range(self.n_invokers):
            self.balancer.healthy[i] = self.node_ready.get(self._invoker_node(i), True)

    def _record_health(self, inv: int, code: int) -> None:
        """One completed activation in the invoker's health: a whisk error (3) is a system error.
        An invoker that turns unhealthy takes no activations and is sent health-test actions (at
        once, after each success, and every minute), which succeed while its node is up."""
        if not 0 <= inv < len(self.health):
            return
        h = self.health[inv]
        was = h.state
        if h.record(Result.SYSTEM_ERROR if code == 3 else Result.SUCCESS):
            self._spawn(self._health_test(inv, h))
        if h.state is not was:
            node_up = self.node_ready.get(self._invoker_node(inv), True)
            self.balancer.healthy[inv] = h.usable and node_up
            log.warning("invoker%d is %s (%d system errors among its last %d activations)", inv, h.state,
                        sum(1 for r in h.buffer if r is Result.SYSTEM_ERROR), len(h.buffer))
            if not h.usable:
                self._spawn(self._health_ticks(inv, h))

    async def _health_test(self, inv: int, h: InvokerHealth) -> None:
        await asyncio.sleep(self.ow.health_test_s)
        if h is self.health[inv] and self.node_ready.get(self._invoker_node(inv), True):  # not reset meanwhile
            self._record_health(inv, 0)

    async def _health_ticks(self, inv: int, h: InvokerHealth) -> None:
        while True:
            await asyncio.sleep(TEST_ACTION_PERIOD_S)
            if h is not self.health[inv] or h.usable:
                return
            self._spawn(self._health_test(inv, h))

    def _invoker_node(self, invoker: int) -> str:
        return self.invoker_nodes[invoker % len(self.invoker_nodes)] if self.invoker_nodes else ""

    def _abandon_all(self) -> None:
        """Every activation not answered yet ends as a whisk error (buffered, waiting for a container
        or running: the agents kill the containers), without touching the balancer the reset
        replaces; every container is removed, so no task of the old state binds, runs or drains."""
        for act in self.activations.values():
            self._complete(act, 3, {"error": "the lab was reset"}, release=False)
        for pool in self.pools:
            pool.buffer.clear()
            for c in pool.containers():
                c.removed = True
                if isinstance(c.payload, Instance):
                    c.payload.state = "gone"
        self.waiting.clear()

    def _loops(self) -> list:
        return [self._idle_loop()]

    # --- controller ---------------------------------------------------------------------------
    def _authorised(self, request: web.Request) -> bool:
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return False
        return hmac.compare_digest(given, self.key)

    async def invoke(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return _refused()
        name = request.match_info["action"]
        action = self.actions.get(name)
        if action is None or request.match_info["namespace"] not in ("_", self.ow.namespace):
            return api_error(404, NOT_FOUND)
        try:
            params = await request.json() if request.can_read_body else {}
        except ValueError:
            return api_error(400, "The request content was malformed.")
        if not isinstance(params, dict):
            return api_error(400, "The request content was malformed.")
        act = Activation(uuid.uuid4().hex, name, params, time.time(), asyncio.get_running_loop().create_future())
        chosen = self.balancer.publish(self.ow.namespace, name, action.memory_mb, action.concurrency)
        if chosen is None:  # LoadBalancerException: no invoker is healthy
            return api_error(503, NO_INVOKERS)
        act.invoker = chosen[0]
        self.activations[act.id] = act
        placed = self.pools[act.invoker].run(act, name, action.memory_mb, action.concurrency, act.arrival_s)
        if placed is not None:
            self._place(act, act.invoker, placed)
        headers = {"x-openwhisk-activation-id": act.id}
        if request.query.get("blocking", "false") != "true":
            return web.json_response({"activationId": act.id}, status=202, headers=headers)
        try:
            record = await asyncio.wait_for(asyncio.shield(act.done), BLOCKING_TIMEOUT_S)
        except TimeoutError:
            return web.json_response({"activationId": act.id}, status=202, headers=headers)
        code = int(record["response"]["statusCode"])
        body = record["response"]["result"] if request.query.get("result") == "true" else record
        return web.json_response(body, status=HTTP_BY_CODE[code], headers=headers)

    def _complete(self, act: Activation, code: int, result: dict[str, Any], *, end_s: float | None = None,
                  release: bool = True) -> None:
        """The activation's record, its answer, and its balancer slots back."""
        if act.done.done():
            return
        end = time.time() if end_s is None else end_s
        start = act.started_s if act.started_s is not None else end
        action = self.actions[act.action]
        notes: list[dict[str, Any]] = [
            {"key": "path", "value": f"{self.ow.namespace}/{act.action}"},
            {"key": "waitTime", "value": int(round((start - act.arrival_s) * 1000))},
            {"key": "kind", "value": "blackbox"},
            {"key": "timeout", "value": False},
            {"key": "limits", "value": {"concurrency": action.concurrency, "logs": ACTION_LOG_LIMIT_MB, "memory": action.memory_mb,
                                        "timeout": int(ACTION_TIMEOUT_S * 1000)}},
        ]
        if act.init_ms is not None:
            notes.append({"key": "initTime", "value": act.init_ms})
        act.record = {
            "namespace": self.ow.namespace, "name": act.action, "version": "0.0.1", "subject": self.ow.namespace,
            "activationId": act.id, "start": int(start * 1000), "end": int(end * 1000),
            "duration": int(round((end - start) * 1000)), "statusCode": code,
            "response": {"status": STATUS[code], "statusCode": code, "success": code == 0, "result": result},
            "annotations": notes, "logs": [], "publish": False,
        }
        if release and act.invoker >= 0:
            self.balancer.release(act.invoker, self.ow.namespace, act.action, action.memory_mb, action.concurrency)
            self._record_health(act.invoker, code)
        act.done.set_result(act.record)

    # --- invoker ------------------------------------------------------------------------------
    def _place(self, act: Activation, inv: int, placed: Placement) -> None:
        for victim in placed.removed:
            self._remove_container(victim)
        c = placed.container
        if placed.state in ("cold", "recreated"):
            self._new_container(inv, c)
            self.waiting[c] = [act]
            self._spawn(self._provision(inv, c))
        elif placed.state == "warming":
            self.waiting.setdefault(c, []).append(act)
        else:
            self._spawn(self._execute(inv, c, act))

    def _new_container(self, inv: int, c: Container) -> None:
        name = container_name(inv, c.seq, self.ow.namespace, c.action)
        inst = Instance(id=f"{name}-{self.seed}-{uuid.uuid4().hex[:6]}", function=c.action, pod_name=name,
                        slots=c.max_concurrent, created_s=time.time())
        self._record(inst)
        c.payload = inst

    def _image(self, inst: Instance) -> str:
        return self.specs[inst.function].image

    def _not_ready(self, inst: Instance, why: str) -> str:
        """Upstream's answer to a pod that did not become Ready (KubernetesContainer.create turns
        KubernetesPodReadyTimeoutException into this message, statusCode 3), with the lab's reason."""
        return f"{POD_NOT_READY.format(image=self._image(inst))} ({inst.pod_name}: {why})"

    def _pod(self, inv: int, inst: Instance) -> Any:
        return action_pod_object(self.specs[inst.function], inst.pod_name, self.placer.profile.scheduler_name,
                                 node_affinity=self.affinity, invoker=f"invoker{inv}")

    async def _provision(self, inv: int, c: Container) -> None:
        """Schedule, start, see Ready at the next poll, ``/init``; then run what waited for it."""
        inst: Instance = c.payload
        deadline = inst.created_s + self.ow.pod_start_timeout_s
        pod = self._pod(inv, inst)
        attempt = 0
        while True:
            if c.removed:  # removed (or the lab reset) while it waited: it must not take a node
                return
            if self._bind(inst, pod):
                break
            now = time.time()
            if now >= deadline:
                self._fail(inv, c, 3, self._not_ready(inst, f"could not be scheduled within "
                                                            f"{self.ow.pod_start_timeout_s:.0f} s"))
                return
            backoff = min(10.0, 2.0 ** attempt)  # the scheduler's backoff (1 s doubling, at most 10 s)
            attempt += 1
            freed = self._freed
            try:
                await asyncio.wait_for(freed.wait(), min(backoff, deadline - now))
            except TimeoutError:
                pass
        failure = await self._start_on_agent(inst, timeout_s=max(1.0, deadline - time.time()))
        if failure == REMOVED or c.removed:
            return
        if failure is not None:
            pull = str(failure).startswith("image pull failed")
            self._fail(inv, c, 2 if pull else 3,
                       IMAGE_PULL.format(image=self._image(inst)) + f" ({inst.pod_name}: {failure})" if pull
                       else self._not_ready(inst, f"failed to start: {failure}"))
            return
        up = time.time()
        seen = self.ow.seen_ready(inst.created_s, up)
        if seen > deadline:
            self._fail(inv, c, 3, self._not_ready(inst, f"not Ready within {self.ow.pod_start_timeout_s:.0f} s"))
            return
        await asyncio.sleep(max(0.0, seen - time.time()))
        if c.removed:
            return
        inst.ready_s = seen
        waiting = self.waiting.get(c, [])
        if waiting:  # the first waits until /init starts; the others queued during the cold init
            # (concurrency > 1) start when their own run does (ContainerProxy "Run during cold
            # init" buffers them and runs them after /init): their waitTime includes /init
            waiting[0].started_s = seen
        status, body, init_s = await self._call(inst, "init", {"value": {"name": c.action, "main": "main",
                                                                           "code": "", "binary": False}})
        if c.removed:
            return
        if status != 200:  # ActivationResult.processInitResponseContent: a developer error either way
            self._fail(inv, c, 2, ABNORMAL_INIT if status == 0 else f"the action did not initialise: "
                                                                    f"{body.get('error', status)}")
            return
        init_ms = int(round(((inst.init_s or 0.0) + init_s) * 1000))
        if waiting:
            waiting[0].init_ms = init_ms
        inst.state = "ready"
        self.pools[inv].ready(c)
        for act in self.waiting.pop(c, []):
            self._spawn(self._execute(inv, c, act))

    async def _call(self, inst: Instance, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        """POST to the container: (HTTP status, JSON body, seconds); status 0 when the connection
        failed, -1 when the action's time limit ran out."""
        assert self.session is not None
        t0 = time.time()
        try:
            async with self.session.post(f"{inst.url}/{path}", json=body,
                                         timeout=ClientTimeout(total=ACTION_TIMEOUT_S)) as r:
                status = r.status
                try:
                    data = await r.json(content_type=None)
                except ValueError:
                    data = None
        except TimeoutError:
            return -1, {"error": f"The action exceeded its time limits of {int(ACTION_TIMEOUT_S * 1000)} milliseconds."}, \
                time.time() - t0
        except (ClientError, OSError):
            return 0, {"error": ABNORMAL_RUN}, time.time() - t0
        return status, data if isinstance(data, dict) else {"error": f"not a JSON object: {data!r}"[:200]}, time.time() - t0

    async def _execute(self, inv: int, c: Container, act: Activation) -> None:
        inst: Instance = c.payload
        if act.started_s is None:
            act.started_s = time.time()
        action = f"/{self.ow.namespace}/{act.action}"
        status, body, _ = await self._call(inst, "run", {
            "value": act.params, "namespace": self.ow.namespace, "action_name": action, "activation_id": act.id,
            "deadline": str(int((time.time() + ACTION_TIMEOUT_S) * 1000))})
        end = time.time()
        code, result = status_code(status, body), body
        self.pools[inv].done(c, end)
        self._complete(act, code, result, end_s=end)
        if code == 2 and not c.removed:  # a broken container is destroyed (ContainerProxy)
            self.pools[inv].fail(c)
            self._remove_container(c)
        self._drain(inv)

    def _fail(self, inv: int, c: Container, code: int, message: str) -> None:
        for act in self.waiting.pop(c, []):
            self._complete(act, code, {"error": message})
        inst = c.payload
        if isinstance(inst, Instance) and inst.failure is None:
            inst.failure = message
        self.pools[inv].fail(c)
        self._remove_container(c)
        self._drain(inv)

    def _remove_container(self, c: Container) -> None:
        c.removed = True
        inst = c.payload
        if not isinstance(inst, Instance):
            return
        was = inst.state
        if self._release(inst):
            if was in ("starting", "ready"):
                self._spawn(self._delete_on_agent(inst))
            self._freed.set()
            self._freed = asyncio.Event()

    def _drain(self, inv: int) -> None:
        for act, placed in self.pools[inv].drain_buffer(time.time()):
            self._place(act, inv, placed)

    async def _idle_loop(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SCAN_S)
            now = time.time()
            for inv, pool in enumerate(self.pools):
                expired = [c for c in list(pool.free) if pool.expire(c, now, self.ow.idle_timeout_s)]
                for c in expired:
                    self._remove_container(c)
                if expired:
                    self._drain(inv)

    def _lose_instances(self, node: str) -> int:
        lost = 0
        for inv, pool in enumerate(self.pools):
            if self._invoker_node(inv) == node:
                self.balancer.healthy[inv] = False
            for c in pool.containers():
                inst = c.payload
                if isinstance(inst, Instance) and inst.node == node:
                    inst.failure = "node lost"
                    lost += 1
                    if c in self.waiting:
                        self._fail(inv, c, 3, self._not_ready(inst, f"node {node} was lost while it started"))
                    else:  # activations running there fail on their own (the connection drops)
                        pool.fail(c)
                        self._remove_container(c)
        return lost

    # --- API ----------------------------------------------------------------------------------
    def invokers(self) -> dict[str, str]:
        """``GET /invokers``: ``up``, ``unhealthy`` (its results, testbed.openwhisk.health) or
        ``down`` (its node lost)."""
        def state(i: int) -> str:
            if self.balancer.healthy[i]:
                return "up"
            return "down" if not self.node_ready.get(self._invoker_node(i), True) else str(self.health[i].state)

        return {f"invoker{i}/{i}": state(i) for i in range(self.n_invokers)}

    def _action_doc(self, a: Any, *, full: bool) -> dict[str, Any]:
        """An action as ``GET .../actions[/NAME]`` shows it (``WhiskActionMetaData``; ``exec`` only
        on the single action): a blackbox action whose image is the suite function's."""
        doc: dict[str, Any] = {
            "namespace": self.ow.namespace, "name": a.name, "version": "0.0.1", "publish": False,
            "annotations": [{"key": "exec", "value": "blackbox"}, {"key": "scoretune.io/function", "value": a.name}],
            "limits": {"memory": a.memory_mb, "concurrency": a.concurrency, "timeout": int(ACTION_TIMEOUT_S * 1000),
                       "logs": ACTION_LOG_LIMIT_MB},
            "updated": self._started_ms,
        }
        if full:
            doc["exec"] = {"kind": "blackbox", "image": f"scoretune/{a.name}", "binary": False}
            doc["parameters"] = []
        return doc

    def _add_routes(self, routes: web.RouteTableDef) -> None:
        base = "/api/v1/namespaces/{namespace}"

        @routes.post(base + "/actions/{action}")
        async def invoke(request: web.Request) -> web.StreamResponse:
            return await self.invoke(request)

        @routes.get(base + "/actions")
        async def listing(request: web.Request) -> web.Response:
            if not self._authorised(request):
                return _refused()
            return web.json_response([self._action_doc(a, full=False)
                                      for a in sorted(self.actions.values(), key=lambda a: a.name)])

        @routes.get(base + "/actions/{action}")
        async def get_action(request: web.Request) -> web.Response:
            if not self._authorised(request):
                return _refused()
            a = self.actions.get(request.match_info["action"])
            return api_error(404, NOT_FOUND) if a is None else web.json_response(self._action_doc(a, full=True))

        @routes.get(base + "/activations")
        async def activations(request: web.Request) -> web.Response:
            """Newest first, ``limit``/``skip``/``since``/``upto``/``name``, the result and logs only
            with ``docs=true`` (``WhiskActivationsApi.list``)."""
            if not self._authorised(request):
                return _refused()
            window = list_window(request.query)
            if isinstance(window, str):
                return api_error(400, window)
            limit, skip, since, upto = window
            name = request.query.get("name")
            docs = request.query.get("docs", "false") == "true"
            records = [a.record for a in self.activations.values() if a.record is not None
                       and (name is None or a.record["name"] == name)
                       and (since is None or a.record["start"] >= since) and (upto is None or a.record["start"] <= upto)]
            records.reverse()  # received last first, so that equal starts keep newest first
            records.sort(key=lambda r: r["start"], reverse=True)
            page = records[skip:skip + limit]
            if not docs:
                page = [{k: v for k, v in r.items() if k not in ("response", "logs")} for r in page]
            return web.json_response(page)

        @routes.get("/api/v1/namespaces")
        async def namespaces(request: web.Request) -> web.Response:
            if not self._authorised(request):
                return _refused()
            return web.json_response([self.ow.namespace])

        @routes.get(base + "/activations/{id}")
        async def activation(request: web.Request) -> web.Response:
            if not self._authorised(request):
                return _refused()
            act = self.activations.get(request.match_info["id"])
            if act is None or act.record is None:
                return api_error(404, NOT_FOUND)
            return web.json_response(act.record)

        @routes.get("/invokers")
        async def invokers(request: web.Request) -> web.Response:
            return web.json_response(self.invokers())

    async def ingress(self, request: web.Request) -> web.StreamResponse:
        return api_error(404, NOT_FOUND)

    def _run_end_facts(self) -> dict[str, Any]:
        """The invokers' state after the run: the fault rule voids a run that left one not up
        without pod-start failures of its own (testbed.openwhisk.faults)."""
        return {"invokers": self.invokers()}

    def _platform_status(self) -> dict[str, Any]:
        instances = [
            {"id": c.payload.id, "pod": c.payload.pod_name, "function": c.action, "node": c.payload.node,
             "state": c.payload.state, "active": c.active, "invoker": inv, "url": c.payload.url}
            for inv, pool in enumerate(self.pools) for c in sorted(pool.containers(), key=lambda c: c.seq)
            if isinstance(c.payload, Instance)
        ]
        return {"instances": instances, "invokers": self.invokers(),
                "buffered": sum(len(p.buffer) for p in self.pools)}


__all__ = ["BLOCKING_TIMEOUT_S", "WhiskController"]
