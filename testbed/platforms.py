"""The one place a platform becomes its pieces: what Knative or OpenWhisk is to the simulator, the
embedded lab, the kube backend and the load generator.

Each platform is one :class:`PlatformEntry` of :data:`REGISTRY`: the simulator's model, the embedded
lab's controller and the kube backend, named by import path and loaded on first use (as Ray Tune's
``SEARCH_ALG_IMPORT`` and Python's entry points name their plugins), and the small pieces every
backend shares: the pod the platform creates for a function (what the scheduler must fit), the
request target a replay sends to, whether the lab issues an API key, the settings it takes. Every
caller asks :func:`platform_entry` once and uses what it gets; nobody else tests which platform it
is. A third platform (OpenFaaS, Fission) is one entry here, its modules, and its name in
:class:`functions.platform.Platform`.

Because the big pieces are named rather than imported, this module sits low in ``testbed`` (on
``functions``, ``loadgen``, ``cluster`` and ``openwhisk`` only): the simulator, the lab and the
kube backend look their platform up here without an arrow back up (tests/test_layout.py), and
tests/testbed/test_platforms.py loads every name.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.platform import DEFAULT_PLATFORM, PLATFORMS, Platform, parse_platform
from functions.spec import FunctionSpec
from loadgen.targets import IngressTarget, OpenWhiskTarget, Target
from testbed.cluster import ClusterSpec
from testbed.errors import InputError


def load(reference: str) -> Any:
    """``"package.module:Name"`` -> the object it names."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class PlatformEntry:
    """What one platform is to every backend (see the module docstring)."""

    platform: Platform
    title: str
    simulation: str
    """The simulator's model: a class taking ``(cluster, specs, workload, profile, *, seed,
    config, kube_version)`` with ``run(progress=)``."""
    lab_controller: str
    """The embedded lab's controller: a :class:`testbed.local.controllers.base.LabControl`."""
    kube_backend: str
    """The Backend on a real cluster: a class with ``from_options(platform options, common options)``."""
    pod: Callable[[FunctionSpec, str, str | None, ClusterSpec], tuple[dict[str, Any], str]]
    """``(spec, name, scheduler, cluster) -> (the Pod as Kubernetes takes it, what it asks for)``:
    the pod the platform creates for one instance of a function."""
    lab_target: Callable[[str, str | None], Target]
    """``(the lab's URL, its guest key) -> the request target`` of a replay on the embedded lab."""
    lab_hint: Callable[[str, Path], list[str]]
    """How a user sends a request to the embedded lab by hand (``testbed up`` prints it)."""
    guest_key: bool
    """The embedded lab issues an API key for it (``<state>/openwhisk/auth.guest``)."""
    check_settings: Callable[[Mapping[str, Any]], None]
    """Checks the deployment settings a lab takes (``lab up --openwhisk``); none for Knative."""
    fault_rule: Callable[..., Any] | None = None
    """The platform's one fault rule over a finished run, applied the same way by the simulator,
    the embedded lab and the kube backend: ``(requests table, invokers' state after the run or
    None, platform faults seen) -> a Judgement`` (``.void``, ``.record()`` for ``summary.json``).
    None: each backend's own checks decide (Knative)."""

    def simulation_class(self) -> type:
        return load(self.simulation)

    def lab_controller_class(self) -> type:
        return load(self.lab_controller)

    def kube_backend_for(self, options: Mapping[str, Any], common: Mapping[str, Any]) -> Any:
        """The kube backend of this platform from the CLI's options (``agent.loop.backends``)."""
        return load(self.kube_backend).from_options(options, common)


# --- Knative ------------------------------------------------------------------------------------------
def _revision_pod(spec: FunctionSpec, name: str, scheduler: str | None, cluster: ClusterSpec) -> tuple[dict[str, Any], str]:
    from functions.knative import revision_pod

    what = f"cpu request {spec.cpu_request_milli}m + queue-proxy, memory request {spec.memory_request_bytes} bytes"
    return revision_pod(spec, scheduler_name=scheduler, name=name), what


def _knative_hint(url: str, key_file: Path) -> list[str]:
    return [f"send requests with the header X-Scoretune-Function: NAME to {url}/, e.g.",
            f"  curl -s -X POST -H 'X-Scoretune-Function: float-ops' -d '{{}}' {url}/"]


def _no_settings(settings: Mapping[str, Any]) -> None:
    if settings:
        raise InputError(f"Knative takes no deployment settings here, got {sorted(settings)}", field="openwhisk")


# --- OpenWhisk ----------------------------------------------------------------------------------------
def invoker_affinity(cluster: ClusterSpec) -> bool:
    """Whether action pods require invoker nodes: when the cluster labels any (the chart's
    ``user-pod-node-affinity``), else they may go anywhere."""
    from functions.openwhisk_action import INVOKER_ROLE

    key, value = INVOKER_ROLE
    return any(n.labels.get(key) == value for n in cluster.nodes)


def _action_pod(spec: FunctionSpec, name: str, scheduler: str | None, cluster: ClusterSpec) -> tuple[dict[str, Any], str]:
    from functions.openwhisk_action import action_memory_mb, action_pod

    pod = action_pod(spec, name=name, invoker="invoker0", scheduler_name=scheduler,
                     node_affinity=invoker_affinity(cluster))
    return pod, f"an action pod of {action_memory_mb(spec)} MB, no cpu request"


def _openwhisk_target(url: str, key: str | None) -> Target:
    if key is None:
        raise InputError(f"the OpenWhisk lab at {url} has no guest key", field="auth")
    return OpenWhiskTarget(url, key)


def _openwhisk_hint(url: str, key_file: Path) -> list[str]:
    return [f"invoke actions through OpenWhisk's REST API with the guest key in {key_file}, e.g.",
            f"  curl -s -u \"$(cat {key_file})\" -X POST -H 'Content-Type: application/json' -d '{{}}' "
            f"'{url}/api/v1/namespaces/_/actions/float-ops?blocking=true'"]


def _openwhisk_settings(settings: Mapping[str, Any]) -> None:
    from testbed.openwhisk.config import OpenWhiskConfig

    known = {f.name for f in dataclasses.fields(OpenWhiskConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise InputError(f"unknown OpenWhisk setting(s) {unknown}; known: {sorted(known)}", field="openwhisk")
    OpenWhiskConfig(**settings)  # its own checks, as one line naming the field


def _openwhisk_fault_rule(requests: Any, invokers: Mapping[str, str] | None = None,
                          platform_faults: Any = ()) -> Any:
    from testbed.openwhisk.faults import judge_run

    return judge_run(requests, invokers, platform_faults)


REGISTRY: dict[Platform, PlatformEntry] = {
    Platform.KNATIVE: PlatformEntry(
        platform=Platform.KNATIVE, title="Knative Serving (activator and KPA)",
        simulation="testbed.sim.engine:Simulation",
        lab_controller="testbed.local.controllers.knative:Controller",
        kube_backend="testbed.kube.backend:KubeBackend",
        pod=_revision_pod, lab_target=lambda url, key: IngressTarget(url), lab_hint=_knative_hint,
        guest_key=False, check_settings=_no_settings,
    ),
    Platform.OPENWHISK: PlatformEntry(
        platform=Platform.OPENWHISK, title="OpenWhisk (controller, invokers and their container pools)",
        simulation="testbed.sim.openwhisk:OpenWhiskSimulation",
        lab_controller="testbed.local.controllers.openwhisk:WhiskController",
        kube_backend="testbed.kube.openwhisk_backend:OpenWhiskBackend",
        pod=_action_pod, lab_target=_openwhisk_target, lab_hint=_openwhisk_hint,
        guest_key=True, check_settings=_openwhisk_settings, fault_rule=_openwhisk_fault_rule,
    ),
}
assert set(REGISTRY) == set(Platform), "every platform name has its entry"


def platform_entry(platform: str | Platform, *, field: str = "platform", file: str | None = None) -> PlatformEntry:
    """The entry of ``platform`` (a name is checked once, here: one line naming the choices)."""
    return REGISTRY[parse_platform(platform, field=field, file=file)]


__all__ = ["DEFAULT_PLATFORM", "PLATFORMS", "REGISTRY", "Platform", "PlatformEntry", "invoker_affinity", "load",
           "parse_platform", "platform_entry"]
