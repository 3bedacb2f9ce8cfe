"""Where a replay sends its requests and how it reads the answers: one target per platform.

A replay holds a target as Locust's runners hold a user class: it asks the target for each
function's URL and Host header, the headers every request carries, and the name of the answer's
format the locustfile decodes (``headers``: the served-by facts in ``X-Scoretune-*`` headers;
``activation``: an OpenWhisk activation record). The replay itself never asks which platform it
is talking to; :mod:`testbed.platforms` hands each backend the target of its platform.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from functions.platform import Platform
from loadgen.errors import InputError

OPENWHISK_ACTION_PATH = "/api/v1/namespaces/_/actions/{function}?blocking=true&result=false"
"""apache/openwhisk docs/rest_api.md: a blocking invocation in the key's own namespace (``_``),
answered with the whole activation record (``result=false``: its annotations and duration too)."""


@dataclass(frozen=True)
class IngressTarget:
    """Knative's ingress (or any HTTP front): one URL for every function (the function in the
    ``X-Scoretune-Function`` header, the Host from ``host_template``, e.g.
    ``"{function}.default.example.com"``), or a URL per function."""

    urls: str | Mapping[str, str]
    host_template: str | None = None
    platform: Platform = Platform.KNATIVE
    answer: str = "headers"

    def routes(self, functions: Sequence[str]) -> tuple[str | Mapping[str, str], str | None]:
        """What :func:`loadgen.replay.resolve_targets` checks: the URL(s) and the Host template."""
        return self.urls, self.host_template

    def headers(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class OpenWhiskTarget:
    """OpenWhisk's REST API: each request a blocking invocation of the action named after the
    function (:data:`OPENWHISK_ACTION_PATH`) with Basic ``auth`` (``UUID:KEY``), recorded from its
    activation record."""

    base_url: str
    auth: str
    platform: Platform = Platform.OPENWHISK
    answer: str = "activation"

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str):
            raise InputError("OpenWhisk takes one API base URL, not a map of URLs", field="targets")
        if not self.auth or ":" not in self.auth:
            raise InputError("OpenWhisk needs its API key as UUID:KEY (.lab/openwhisk/auth.guest)", field="auth")

    def routes(self, functions: Sequence[str]) -> tuple[dict[str, str], None]:
        base = self.base_url.rstrip("/")
        return {f: base + OPENWHISK_ACTION_PATH.format(function=f) for f in functions}, None

    def headers(self) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(self.auth.encode()).decode()}


Target = IngressTarget | OpenWhiskTarget
"""What :func:`loadgen.replay.replay` sends requests to."""


def as_target(targets: Any, host_template: str | None = None) -> Target:
    """A target as given, or the ingress target of a URL (or ``{function: url}``) and a Host template."""
    if isinstance(targets, IngressTarget | OpenWhiskTarget):
        if host_template is not None:
            raise InputError("a host template goes into the target, not beside it", field="host_template")
        return targets
    return IngressTarget(targets, host_template)


__all__ = ["OPENWHISK_ACTION_PATH", "IngressTarget", "OpenWhiskTarget", "Target", "as_target"]
