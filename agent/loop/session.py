"""One place that builds a live experiment: an :class:`~agent.loop.config.ExperimentConfig` in, the
workload, the tuner, the backend and a ready :class:`~agent.loop.experiment.Experiment` out.

``scoretune tune`` parses its options into a config and calls :func:`open_session`; ``lab-table``
calls it for every experiment of its table, in its own process. As Optuna's ``create_study`` and
Ray Tune's ``Tuner`` are the library's way in, with a CLI that only parses, the order of what is
built (and what fails first) is decided here once: the workload and its functions, the cluster, the
tuner (a broken policy fails before a lab starts), then the backend; the twin of a live cluster
without a spec waits for the backend's Node objects.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from agent.loop.config import ExperimentConfig
from functions.atomic import write_atomic
from functions.errors import ScoretuneError


@dataclass
class Session:
    """A live experiment, built: what it runs, where, with which tuner. ``close`` stops the backend
    (a lab the backend started goes with it)."""

    config: ExperimentConfig
    backend: Any
    workload: Any
    tuner: Any
    out: Path
    notes: list[str]
    """What a user should know before the first run (every function's placement is forced, the
    live cluster could not be read), for the caller to show."""

    def run(self, *, resume: bool = False, on_start: Callable[[int, Any], None] | None = None,
            on_step: Callable[[Any, list[Any]], None] | None = None) -> dict[str, Any]:
        """The experiment to its end (or from where ``out`` stopped, with ``resume``); the summary.
        The backend is closed afterwards, whatever happened; the twin's refits go to
        ``twin-fits.json``."""
        from agent.loop.experiment import Experiment

        failed = True
        try:
            summary = Experiment(self.config, self.backend, self.workload, self.tuner, self.out,
                                 on_start=on_start, on_step=on_step).run(resume=resume)
            failed = False
        finally:
            self.close(failed=failed)
        if self.fits:
            write_atomic(self.out / "twin-fits.json", json.dumps(self.fits, indent=1, sort_keys=True) + "\n")
        return summary

    @property
    def fits(self) -> list[dict[str, Any]]:
        """The twin's refits, one per run (a resume recomputes them from the same runs); empty for
        every other tuner."""
        return list(getattr(self.tuner, "fits", None) or [])

    def close(self, *, failed: bool = False) -> None:
        self.backend.close(failed=failed)


def open_session(config: ExperimentConfig, out: Path) -> Session:
    """Build the experiment ``config`` describes, writing into ``out`` (see the module docstring).
    Raises a :class:`ScoretuneError` naming what is wrong before any run; nothing is left running
    when it does."""
    from agent.actions import ActionCodec
    from agent.loop.backends import KubeOptions, embedded_default_backend, make_backend, resolve_workload
    from agent.objectives.sim import workload_context
    from agent.objectives.view import user_view
    from agent.tuners.factory import TWIN_METHODS, make_tuner
    from testbed.cluster import load_cluster

    wl, scenario_cluster = resolve_workload(config.workload, seed=config.seed)
    if config.backend != "kube" and Path(config.workload).exists():  # kube: the deployed Services decide
        from functions.spec import check_suite_functions

        check_suite_functions(wl.functions, file=config.workload)
    cluster_name = config.cluster or scenario_cluster
    if not cluster_name and config.backend != "kube":
        raise AgentError("--cluster is required for this workload (it names no cluster)")
    spec = load_cluster(cluster_name) if cluster_name else None
    context_facts = workload_context(spec, wl) if spec is not None else {}
    live_twin = config.method in TWIN_METHODS and spec is None

    def build(cluster: Any) -> Any:
        return make_tuner(config.method, ActionCodec(), seed=config.seed,
                          policy=Path(config.policy) if config.policy else None, steps=config.steps,
                          context=context_facts,
                          view=user_view(cluster, wl, config.metric, platform=config.platform)
                          if cluster is not None else None)

    tuner = None if live_twin else build(spec)
    if config.backend == "auto":
        be, chosen = embedded_default_backend(seed=config.seed, runtime=config.runtime, host_fit=config.host_fit)
        config = dataclasses.replace(config, backend=chosen, cluster=cluster_name)
    else:
        be = make_backend(config.backend, spec, seed=config.seed, kube=KubeOptions(**config.backend_options)
                          if config.backend_options else None, platform=config.platform, runtime=config.runtime,
                          host_fit=config.host_fit)
        config = dataclasses.replace(config, cluster=cluster_name or "")
    try:
        live = _live_cluster(be, out) if tuner is None else None
        if tuner is None:
            tuner = build(live)
        notes = _placement_notes(spec if spec is not None else live, be, wl, out)
    except BaseException:
        be.close(failed=True)
        raise
    return Session(config, be, wl, tuner, out, notes)


def _placement_notes(cluster: Any, be: Any, wl: Any, out: Path) -> list[str]:
    """Said before the first run: no weight can move any pod (every function fits one node), or
    the live cluster could not be read to tell."""
    from testbed.sim.scheduling import forced_placement_note

    if cluster is None and callable(getattr(be, "snapshot_cluster", None)):  # kube: the live nodes
        try:
            cluster = be.snapshot_cluster(out / "cluster-view")
        except ScoretuneError as err:
            return [f"could not read the cluster to check its placements: {err}"]
    note = forced_placement_note(cluster, wl.functions) if cluster is not None else None
    return [note] if note else []


def _live_cluster(be: Any, out: Path) -> Any:
    """The cluster as the live API shows it (the kube backend's Node objects through the importer),
    what the twin of a cluster without a spec starts from; ``out/cluster-view/`` keeps the objects."""
    snapshot = getattr(be, "snapshot_cluster", None)
    if not callable(snapshot):
        raise AgentError("method 'twin' needs the cluster: --cluster SPEC, or the kube backend's live nodes")
    return snapshot(out / "cluster-view")


__all__ = ["Session", "open_session"]
