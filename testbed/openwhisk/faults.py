"""One fault rule for OpenWhisk on every backend (issue 45, item 4): what voids a run and what is
scored, decided once here and applied by the simulator, the embedded lab and the kube backend.

The principle: **a failure of the platform voids the run** (rerun, never scored: it says nothing
about the profile), **a consequence of placement is scored** (a profile that packs a node until
the next pod cannot start must pay for it on every backend, or the tuner optimises a different
objective on each).

Every backend classifies a failed request by what upstream answers for it: the HTTP status of
the invocation and, in the activation record, its ``statusCode`` and ``result.error``. The
messages are apache/openwhisk's at ef725a6 (``http/ErrorResponse.scala`` ``Messages``;
``KubernetesContainer.create``, ``ContainerProxy``, ``ActivationResult.processRunResponseContent``):

- a pod not Ready within ``whisk.kubernetes.timeouts.run`` (Pending on full nodes, a slow pull, a
  node lost while it started) is ``KubernetesPodReadyTimeoutException``, which
  ``KubernetesContainer.create`` turns into ``WhiskContainerStartupError("Failed to run container
  with image 'I'.")``: statusCode 3;
- a container that died while it ran (an OOM kill, a crash) gives no response:
  ``Messages.abnormalRun`` or ``memoryExhausted``, statusCode 2 (``abnormalInitialization`` when it
  died in ``/init``); activations queued on a container whose cold start failed get
  ``whiskError(abnormalRun)``, statusCode 3 (``ContainerProxy.abortBuffered``);
- an image that cannot be pulled is ``Messages.imagePullError``, statusCode 2; a failed call to
  kube-apiserver is ``Messages.resourceProvisionError``, statusCode 3;
- 503 is the controller with no usable invoker, 429 its throttle, 202 its 60 s blocking wait.

An invoker turns unhealthy after more than 3 system errors (statusCode 3) among its last 10
activations (``InvokerSupervision.scala`` ``InvokerActor``), and the controller then answers 503
when none is left: after pod-start failures of the run itself, that is still the placement's
doing and is scored; without them it is the platform's and voids.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

RULE = "openwhisk-faults/1"
"""The rule's name, recorded in every OpenWhisk run's ``summary.json`` (``fault_rule.rule``)."""


class Verdict(StrEnum):
    SCORED = "scored"
    VOID = "void"


@dataclass(frozen=True)
class Fault:
    """One row of the rule: ``key`` (what summaries count), what upstream answers, the verdict and why."""

    key: str
    upstream: str
    verdict: Verdict
    why: str


POD_NOT_READY = "Failed to run container with image '{image}'."
"""``KubernetesContainer.create``'s message when the pod did not become Ready in time."""
ABNORMAL_RUN = "The action did not produce a valid response and exited unexpectedly."
ABNORMAL_INIT = "The action did not initialize and exited unexpectedly."
MEMORY_EXHAUSTED = "The action exhausted its memory and was aborted."
IMAGE_PULL = "Failed to pull container image '{image}'."
PROVISION = "Failed to provision resources to run the action."
NO_INVOKERS = "No invokers available."

FAULTS: tuple[Fault, ...] = (
    Fault("application-error", "statusCode 1, the handler's own {\"error\": ...}; the container is kept",
          Verdict.SCORED, "the function's outcome on the node it ran on"),
    Fault("timeout", "HTTP 202: the controller's blocking wait (60 s) ran out", Verdict.SCORED,
          "a request that took too long where it was placed"),
    Fault("pod-not-ready", "statusCode 3, \"Failed to run container with image 'I'.\" (not Ready within "
          "whisk.kubernetes.timeouts.run)", Verdict.SCORED,
          "placement: a pod Pending on full nodes, a slow pull, a node lost while it started"),
    Fault("container-died", "statusCode 2, abnormalRun / abnormalInitialization / memoryExhausted; or 3, "
          "abnormalRun for activations queued on a failed cold start", Verdict.SCORED,
          "placement: an OOM kill or crash of a container packed where it does not fit"),
    Fault("invoker-unhealthy-after-pod-start-failures", "HTTP 503 \"No invokers available.\", or an invoker "
          "unhealthy after the run, in a run with pod-not-ready failures", Verdict.SCORED,
          "more than 3 of an invoker's last 10 activations were system errors its placements caused"),
    Fault("no-invoker", "HTTP 503 \"No invokers available.\" with no pod-start failure", Verdict.VOID,
          "the platform: no invoker was usable"),
    Fault("invoker-not-up", "an invoker down after the run, or unhealthy or unresponsive with no pod-start failure",
          Verdict.VOID, "the platform: an invoker failed"),
    Fault("throttled", "HTTP 429: the controller's invocation limits", Verdict.VOID,
          "the deployment's limits are below the workload"),
    Fault("image-pull-failed", "statusCode 2, \"Failed to pull container image 'I'.\"", Verdict.VOID,
          "the registry or the image, not where the pod went"),
    Fault("provision-failed", "statusCode 3, \"Failed to provision resources to run the action.\"",
          Verdict.VOID, "a call to kube-apiserver failed"),
    Fault("whisk-error", "statusCode 3 with any other message", Verdict.VOID,
          "the platform: a whisk internal error without a pod-start cause"),
    Fault("developer-error", "statusCode 2 with any other message (the runtime answered /init or /run with a "
          "non-200)", Verdict.VOID, "the suite's runtime broke, not the placement"),
    Fault("platform-pod-restarted", "a core pod (controller, invoker, Kafka, CouchDB, ...) restarted or moved; "
          "the lab's own runtime failed to start a container", Verdict.VOID,
          "the platform itself failed during the run"),
)
"""The rule, row by row (docs/lab.md's table is this one; a test keeps them equal)."""

BY_KEY: dict[str, Fault] = {f.key: f for f in FAULTS}
POD_START = "pod-not-ready"
_CONSEQUENCE = "invoker-unhealthy-after-pod-start-failures"

_STATUS_CODE = re.compile(r"statusCode (\d)")


def platform_key(fault: str) -> str:
    """The row a platform fault the backend saw falls under: an action pod whose image cannot be
    pulled is ``image-pull-failed`` (as the activations it failed would be), an invoker whose state
    could not be read ``invoker-not-up``, anything else (a core pod restarted, a container the
    runtime could not start, a pod stuck terminating) ``platform-pod-restarted``."""
    if any(k in fault for k in ("ImagePull", "ErrImagePull", "InvalidImageName")):
        return "image-pull-failed"
    if fault.startswith("invoker ") and "state" in fault:
        return "invoker-not-up"
    return "platform-pod-restarted"


def classify(http_status: Any, error: Any) -> str | None:
    """The fault key of one failed request, from its HTTP status and its error text (the
    activation's ``statusCode N`` and ``result.error`` as the load generator records them), or
    None for a request that did not fail in a way OpenWhisk answers. ``no-invoker`` is returned
    as such; whether it is a consequence is the run's question (:func:`judge`)."""
    text = "" if error is None or (isinstance(error, float) and error != error) else str(error)
    try:
        http = int(http_status) if http_status is not None and http_status == http_status else None
    except (TypeError, ValueError):
        http = None
    if http == 429:
        return "throttled"
    if http == 503:
        return "no-invoker"
    if http == 202:
        return "timeout"
    found = _STATUS_CODE.search(text)
    code = int(found.group(1)) if found else None
    if code == 1:
        return "application-error"
    if code == 2:
        if IMAGE_PULL.split("'")[0] in text:
            return "image-pull-failed"
        if any(m in text for m in (ABNORMAL_RUN, ABNORMAL_INIT, MEMORY_EXHAUSTED)):
            return "container-died"
        return "developer-error"
    if code == 3:
        if POD_NOT_READY.split("'")[0] in text:
            return "pod-not-ready"
        if ABNORMAL_RUN in text:
            return "container-died"
        if PROVISION in text:
            return "provision-failed"
        return "whisk-error"
    return None


@dataclass(frozen=True)
class Judgement:
    """What the rule made of one run: failed requests counted by fault key, the invokers found not
    ``up`` after it (with the fault each counts as), and why the run is void (empty: scored)."""

    counts: dict[str, int]
    invokers: dict[str, str]
    void_observed: list[str]
    """Why the requests or the invokers void the run."""
    platform: list[str]
    """The platform faults the backend saw (each voids)."""

    @property
    def void(self) -> list[str]:
        return [*self.void_observed, *(f"{f} ({platform_key(f)}: {BY_KEY[platform_key(f)].why})" for f in self.platform)]

    def record(self) -> dict[str, Any]:
        """``summary.json``'s ``fault_rule``."""
        return {"rule": RULE, "verdict": Verdict.VOID.value if self.void else Verdict.SCORED.value,
                "counts": dict(sorted(self.counts.items())), "invokers": dict(sorted(self.invokers.items())),
                "void": list(self.void)}


def judge(requests: Iterable[tuple[Any, Any]], *, invokers: Mapping[str, str] | None = None,
          platform_faults: Iterable[str] = ()) -> Judgement:
    """Apply the rule to one run: ``requests`` are (HTTP status, error text) of its failed
    requests, ``invokers`` the controller's state of each invoker after the run (``up``, ``down``,
    ``unhealthy``, ``unresponsive``; None: not known), ``platform_faults`` what the backend saw of
    the platform failing (a core pod restarted, the lab's runtime failing a container), each one
    line."""
    counts: Counter[str] = Counter()
    for http, error in requests:
        key = classify(http, error)
        if key is not None:
            counts[key] += 1
    start_failures = counts[POD_START] > 0
    if counts["no-invoker"] and start_failures:
        counts[_CONSEQUENCE] += counts.pop("no-invoker")
    void = [f"{n} request(s): {key} ({BY_KEY[key].why})" for key, n in sorted(counts.items())
            if n and BY_KEY[key].verdict is Verdict.VOID]
    seen: dict[str, str] = {}
    for name, state in sorted((invokers or {}).items()):
        if state == "up":
            continue
        if start_failures and state in ("unhealthy", "unresponsive"):
            seen[name] = f"{state}: {_CONSEQUENCE}"
            continue
        seen[name] = f"{state}: invoker-not-up"
        void.append(f"{name}: the invoker is {state} after the run (invoker-not-up: {BY_KEY['invoker-not-up'].why})")
    return Judgement({k: v for k, v in counts.items() if v}, seen, void, list(platform_faults))


def judge_run(requests: Any, invokers: Mapping[str, str] | None = None,
              platform_faults: Iterable[str] = ()) -> Judgement:
    """:func:`judge` over a run's requests table (``status``, ``http_status``, ``error``): what every
    backend calls with the table it writes."""
    if len(requests) == 0 or "status" not in requests:
        return judge([], invokers=invokers, platform_faults=platform_faults)
    failed = requests[requests["status"] != "ok"]
    http = failed["http_status"].tolist() if "http_status" in failed else [None] * len(failed)
    errors = failed["error"].tolist() if "error" in failed else [None] * len(failed)
    return judge(zip(http, errors, strict=True), invokers=invokers, platform_faults=platform_faults)


def markdown_table() -> str:
    """The rule as docs/lab.md shows it."""
    rows = ["| fault | upstream's answer | verdict | why |", "|---|---|---|---|"]
    rows += [f"| `{f.key}` | {f.upstream} | **{f.verdict.value}** | {f.why} |" for f in FAULTS]
    return "\n".join(rows)


__all__ = ["ABNORMAL_INIT", "ABNORMAL_RUN", "BY_KEY", "FAULTS", "IMAGE_PULL", "MEMORY_EXHAUSTED", "NO_INVOKERS",
           "POD_NOT_READY", "PROVISION", "RULE", "Fault", "Judgement", "Verdict", "classify", "judge", "judge_run",
           "platform_key",
           "markdown_table"]
