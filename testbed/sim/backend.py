"""``SimBackend`` (the Backend protocol over the simulator) and ``evaluate``, the in-memory fast path
training uses: one weight vector in, the run's summary out, no disk."""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from functions.errors import InputError
from functions.spec import FunctionSpec, discover_specs
from loadgen.results import RunResult, write_run
from loadgen.where import where_time_went
from loadgen.workload import Workload
from testbed.cluster import ClusterSpec, load_cluster
from testbed.platforms import platform_entry
from testbed.sim.engine import SimConfig
from testbed.sim.progress import Progress
from testbed.sim.results import fast_summary, placements_frame, requests_frame

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def suite_specs() -> dict[str, FunctionSpec]:
    """The function suite (``functions/*/spec.yaml``), parsed once per process."""
    return discover_specs()


@lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """The code a run came from (git commit, versions): what a result records so it can be told apart."""
    import numba
    import numpy

    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = None
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("scoretune")
    except PackageNotFoundError:
        own = None
    return {"git_revision": rev, "versions": {"scoretune": own, "numpy": numpy.__version__, "numba": numba.__version__}}


def simulate(
    cluster: ClusterSpec,
    workload: Workload,
    profile: Any,
    *,
    seed: int = 0,
    functions: Mapping[str, FunctionSpec] | None = None,
    config: SimConfig | None = None,
    kube_version: str = "1.36",
    progress: Callable[[float, float], None] | None = None,
):
    """Run one simulation and return its :class:`~testbed.sim.engine.SimOutput` (``progress``: see
    :meth:`Simulation.run`)."""
    specs = dict(functions) if functions is not None else suite_specs()
    model = platform_entry((config or SimConfig()).platform, field="--platform").simulation_class()
    sim = model(cluster, specs, workload, profile, seed=seed, config=config, kube_version=kube_version)
    return sim.run(progress=progress)


def evaluate(
    cluster: ClusterSpec,
    workload: Workload,
    profile: Any,
    *,
    seed: int = 0,
    functions: Mapping[str, FunctionSpec] | None = None,
    config: SimConfig | None = None,
    kube_version: str = "1.36",
    progress: Callable[[float, float], None] | None = None,
    where: bool = False,
) -> dict[str, Any]:
    """The summary ``loadgen.results.summarize`` would give for this run, without writing anything.

    Adds ``timeout_s``, ``seed``, ``cluster``, ``workload``, ``backend`` and the simulator's own
    counts (``pods_created``, ``events``). Deterministic: same inputs and seed, same numbers.
    ``where``: add the per-node breakdown a written run carries (``loadgen.where``; costs the tables).
    """
    cfg = config or SimConfig()
    out = simulate(cluster, workload, profile, seed=seed, functions=functions, config=cfg, kube_version=kube_version,
                   progress=progress)
    summary = fast_summary(out)
    summary.update(
        {
            "backend": "sim",
            "platform": str(cfg.platform),
            "seed": seed,
            "timeout_s": cfg.timeout_s,
            "cluster": cluster.name,
            "workload": workload.name,
            "pods_created": len(out.pods),
            "events": out.events,
            "sim_end_s": out.sim_end_s,
        }
    )
    if where:
        summary["where"] = where_time_went(requests_frame(out), placements_frame(out))
    return summary


def _check_run_dir(out_dir: Path) -> None:
    """The run directory must be a directory or creatable as one."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory; give a run directory to write", file=out_dir, field="--out")
    for parent in out_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"cannot create the run directory: {parent} is a file", file=out_dir, field="--out")
            break


class SimBackend:
    """Backend ``sim``: the simulator behind the Backend protocol (``testbed/backend.py``).

    Each ``run`` starts from the reset state (every function at zero unless its min-scale keeps it
    up, image caches as in the cluster spec), so runs differ only by profile, workload and seed.
    ``progress=True`` shows a run that takes more than a few wall seconds on stderr (``sim run``
    does; a caller with its own progress display, such as the tuning loop, leaves it off).
    """

    name = "sim"

    def __init__(
        self,
        cluster: ClusterSpec | str | Path,
        functions: Mapping[str, FunctionSpec] | None = None,
        *,
        seed: int = 0,
        kube_version: str = "1.36",
        config: SimConfig | None = None,
        progress: bool = False,
    ) -> None:
        self.cluster = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
        self.progress = progress
        self.functions = dict(functions) if functions is not None else suite_specs()
        self.seed = seed
        self.kube_version = kube_version
        self.config = config or SimConfig()
        self.profile: Any = None

    def apply(self, profile: Any) -> None:
        self.profile = profile

    def reset(self) -> None:
        """Nothing persists between simulated runs, so every run already starts reset."""

    def run(self, workload: Workload, out_dir: Path, *, seed: int | None = None) -> RunResult:
        """Simulate ``workload`` with the applied profile (the default profile if none) and write
        the run directory. ``seed`` None uses the backend's own seed."""
        run_seed = self.seed if seed is None else seed
        from testbed.scheduler.config import default_profile

        if self.profile is None:
            self.profile = default_profile()
        out_dir = Path(out_dir)
        _check_run_dir(out_dir)  # before simulating: a bad --out should not cost a whole run
        bar = Progress(f"sim run of {workload.name} on {self.cluster.name}") if self.progress else None
        with bar if bar is not None else contextlib.nullcontext():
            if bar is not None:
                bar.phase("simulating")
            out = simulate(
                self.cluster, workload, self.profile, seed=run_seed, functions=self.functions,
                config=self.config, kube_version=self.kube_version, progress=bar,
            )
            if bar is not None:
                bar.phase("writing the run directory")
            return self._write(out_dir, out, workload, run_seed)

    def _write(self, out_dir: Path, out: Any, workload: Workload, run_seed: int) -> RunResult:
        from testbed.scheduler.config import profile_record

        info: dict[str, Any] = {
            "backend": "sim",
            "platform": str(self.config.platform),
            "seed": run_seed,
            "timeout_s": self.config.timeout_s,
            "cluster": self.cluster.name,
            "cluster_nodes": len(self.cluster.nodes),
            "workload": workload.name,
            "workload_metadata": workload.metadata,
            "kube_version": self.kube_version,
            "pods_created": len(out.pods),
            "events": out.events,
            "sim_end_s": out.sim_end_s,
            # every Profile renders (that is config_for_profile's contract); a failure here is a bug to see
            "profile": profile_record(self.profile),
            **provenance(),
        }
        requests = requests_frame(out)
        failed, failure = False, None
        rule = platform_entry(self.config.platform).fault_rule
        if rule is not None:  # the platform's one fault rule, as the embedded lab and kube apply it
            judged = rule(requests, None, [])
            info["fault_rule"] = judged.record()
            if judged.void_observed:
                failed, failure = True, "void: " + "; ".join(judged.void_observed)
        # a summary left by an earlier run would describe the new tables if writing them failed
        (out_dir / "summary.json").unlink(missing_ok=True)
        return write_run(out_dir, requests, placements_frame(out), info=info, failed=failed, failure=failure)

    def close(self, *, failed: bool = False) -> None:
        """The simulator holds no resources."""
