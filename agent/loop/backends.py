"""Resolving ``scoretune tune``'s ``--backend``, ``--cluster`` and ``--workload`` into objects.

The agent only drives the :class:`~testbed.backend.Backend` protocol; this module knows how each
backend is constructed (imports are lazy, so the simulator never needs the Kubernetes client) and
where workloads come from: a Parquet file, the lab workload (``lab``), or a scenario of
``testbed.scenarios`` (which then also names the cluster).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from functions.platform import DEFAULT_PLATFORM, Platform

log = logging.getLogger(__name__)



class BackendName(StrEnum):
    """Where ``scoretune tune`` runs, by name (a typer option annotated ``BackendName`` lists them in
    ``--help``); the backends themselves implement :class:`testbed.backend.Backend`."""

    SIM = "sim"
    LOCAL = "local"
    KUBE = "kube"


BACKENDS: tuple[str, ...] = tuple(b.value for b in BackendName)
LAB_WORKLOAD = "lab"


@dataclass(frozen=True)
class KubeOptions:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    ingress_url: str | None = None
    cold_nodes: list[str] = field(default_factory=list)
    """Nodes whose function-image cache ``reset()`` purges before every step; every other node
    holds every function image (:class:`testbed.kube.backend.ImageState`)."""
    remote_workers: int = 0
    """Locust workers on other load-generator hosts the master waits for before every run."""
    master_bind_host: str = "127.0.0.1"
    """Where the Locust master listens: an address of this host the workers reach (remote workers)."""
    master_port: int = 5557
    """The master's port (the locust_loadgen role's ``locust_loadgen_master_port``)."""
    workers_wait_s: float = 60.0
    """How long the master waits for the workers before a run counts as failed (void, rerun)."""
    max_clock_offset_s: float = 0.1
    """A load process whose clock is further than this (s) from the master's voids the run
    (loadgen.replay.MAX_CLOCK_OFFSET_S; inf turns the check off)."""
    openwhisk_api: str | None = None
    """OpenWhisk: the API's URL (the chart's nginx NodePort, ``https://ADDRESS:31001``)."""
    openwhisk_auth: str | None = None
    """OpenWhisk: the file holding the guest key ``UUID:KEY`` (``.lab/openwhisk/auth.guest``)."""



def resolve_workload(workload: str, *, seed: int = 0) -> tuple[Any, str | None]:
    """``(Workload, cluster name or None)`` for a Parquet path, ``lab`` or a scenario name."""
    path = Path(workload)
    if path.suffix == ".parquet" or path.exists():
        from loadgen.workload import read_workload

        return read_workload(path), None
    if workload == LAB_WORKLOAD:
        from testbed.scenarios import LAB_CLUSTER, lab_workload

        return lab_workload(seed), LAB_CLUSTER
    from agent.objectives.sim import scenario_by_name

    scenario = scenario_by_name(workload)
    from testbed.scenarios import build_workload

    return build_workload(scenario), scenario.cluster


def make_backend(name: str, cluster: Any, *, seed: int = 0, kube: KubeOptions | None = None,
                 platform: Platform = DEFAULT_PLATFORM, runtime: str = "process", host_fit: str = "scale") -> Any:
    """A backend bound to ``cluster`` (a ClusterSpec; unused by ``kube``, which reads the real one)
    serving the functions with ``platform`` (on ``kube``, its entry's backend: testbed.platforms)."""
    if name == "sim":
        from testbed.sim import SimBackend, SimConfig

        return SimBackend(cluster, seed=seed, config=SimConfig(platform=platform))
    if name == "local":
        from testbed.local.backend import LocalBackend

        return LocalBackend(cluster, seed=seed, platform=platform, runtime=runtime, host_fit=host_fit)
    if name == "kube":
        from testbed.kube.backend import ImageState
        from testbed.platforms import platform_entry

        k = kube or KubeOptions()
        common = {"kubeconfig": k.kubeconfig, "context": k.context, "image_state": ImageState(cold_nodes=tuple(k.cold_nodes)),
                  "remote_workers": k.remote_workers, "master_bind_host": k.master_bind_host,
                  "master_port": k.master_port, "workers_wait_s": k.workers_wait_s,
                  "max_clock_offset_s": k.max_clock_offset_s}
        options = {"namespace": k.namespace, "ingress_url": k.ingress_url, "openwhisk_api": k.openwhisk_api,
                   "openwhisk_auth": k.openwhisk_auth}
        return platform_entry(platform).kube_backend_for(options, common)
    raise AgentError(f"unknown backend {name!r}; valid: {list(BACKENDS)}")


def embedded_default_backend(seed: int = 0, runtime: str = "process", host_fit: str = "scale") -> tuple[Any, str]:
    """``make tune``'s backend: the embedded lab when it starts on this machine, else the simulator
    with the same cluster (``lab-small``) and workload."""
    from testbed.cluster import load_cluster
    from testbed.scenarios import LAB_CLUSTER

    cluster = load_cluster(LAB_CLUSTER)
    try:
        backend = make_backend("local", cluster, seed=seed, runtime=runtime, host_fit=host_fit)
    except Exception as err:  # noqa: BLE001 - any failure to start the lab means "use the simulator"
        log.warning("the embedded lab did not start (%s); tuning on the simulator instead", err)
        return make_backend("sim", cluster, seed=seed), "sim"
    return backend, "local"
