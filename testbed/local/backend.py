"""``LocalBackend``: the Backend protocol over the embedded lab (real processes, real HTTP, Locust).

The backend either attaches to a lab already running in its state directory (``testbed up``) or
starts its own (and stops it in :meth:`close`). ``run`` checks the workload against the lab before
any load starts (unknown functions, functions that fit on no node), marks the run's start in the
controller, replays the workload open-loop with :func:`loadgen.replay.replay` against the ingress,
then collects the placements and lab events (a node lost mid-run) into the same run directory.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from functions.platform import DEFAULT_PLATFORM, Platform, parse_platform
from loadgen.results import RunResult, placements_table, write_run
from loadgen.workload import Workload
from testbed.cluster import ClusterSpec, load_cluster
from testbed.errors import InputError, TestbedError
from testbed.local import cpu, host
from testbed.local import lab as labmod
from testbed.local.state import LabState
from testbed.platforms import platform_entry

log = logging.getLogger(__name__)



RUN_LEAD_S = 3.0
"""How far ahead of the call a run's t = 0 is fixed: Locust starts in about a second here; the
rest is margin (a late start shows as dispatch lag, and voids the run, never skews it)."""

LAB_FAULTS = ("image pull failed", "instance did not start")
"""Reasons an instance failed that are the lab's, not the profile's (a registry or runtime that
broke): a run with one is void. An OOM kill or a crash of the function server is the profile's
outcome (a pod packed where it does not fit): its requests count as errors, as on the platform.
A node agent that stops answering is a node lost (``node_lost``): recorded, its requests errors,
the run kept, as before."""


def lab_faults(events: list[dict[str, Any]]) -> list[str]:
    """``node: reason`` of every instance the lab failed to start for a reason of its own."""
    return [f"{e.get('node')}: {e.get('reason')}" for e in events
            if e.get("event") == "instance_failed" and str(e.get("reason", "")).startswith(LAB_FAULTS)]


class LocalBackend:
    """Backend ``local``. ``cluster`` is a spec (or its path/name); ``state_dir`` the lab's state
    directory (a private temporary one by default, so a backend never collides with a running
    ``testbed up``); ``port`` the ingress port (0: any free one); ``platform`` what serves the
    functions: ``knative`` (the activator and the KPA; requests to the ingress) or ``openwhisk``
    (controller, invokers, container pools; blocking invocations through OpenWhisk's REST API with
    the lab's guest key). Attaching to a running lab takes its platform, which must match."""

    name = "local"

    def __init__(
        self,
        cluster: ClusterSpec | str | Path = labmod.DEFAULT_CLUSTER,
        *,
        state_dir: str | Path | None = None,
        port: int = 0,
        cpu_enforcement: str = "auto",
        seed: int = 0,
        timeout_s: float = 30.0,
        attach: bool = False,
        platform: str | Platform = DEFAULT_PLATFORM,
        runtime: str = "process",
        host_fit: str = "scale",
    ) -> None:
        self.cluster = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
        self.made_state_dir = state_dir is None  # ours to remove once the lab is down and all went well
        if state_dir is None:
            import tempfile

            state_dir = tempfile.mkdtemp(prefix="scoretune-local-")
        self.state_dir = Path(state_dir)
        self.timeout_s = timeout_s
        self.seed = seed
        self.profile: Any = None
        platform = parse_platform(platform)
        handle = labmod.running_lab(self.state_dir) if attach else None
        if handle is not None and handle.platform != platform:
            raise TestbedError(f"the lab running in {self.state_dir} serves the functions with {handle.platform}, "
                               f"not {platform}: `scoretune testbed down` it, or ask for {handle.platform}")
        self.owned = handle is None
        if handle is None:
            handle = labmod.up(
                self.cluster, state_dir=self.state_dir, port=port, cpu_enforcement=cpu_enforcement, seed=seed,
                owner_pid=os.getpid(), platform=platform, runtime=runtime, host_fit=host_fit,
            )
            log.info(
                "embedded lab up at %s (state in %s; it stops when this process exits, or with "
                "`scoretune testbed down --state-dir %s`)", handle.url, self.state_dir, self.state_dir,
            )
        self.handle = handle
        lab = LabState(self.state_dir).read_lab() or {}
        self.host_fit: dict[str, Any] | None = lab.get("host_fit")
        """How the lab was fitted to the host (:mod:`testbed.local.capacity`); None: a lab from before."""
        self.up_probe: dict[str, Any] | None = lab.get("probe")
        self.hardware_declared: dict[str, Any] | None = lab.get("hardware_declared")
        """The nodes' hidden hardware as its file declares it (before any fit to the host): what a
        study records so two studies of one cluster name can be told apart when the file changed."""
        self._harness: str | None = (lab.get("cpu") or {}).get("harness")
        self.platform = handle.platform
        self.client = handle.client
        self._closed = False

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def cpu_notice(self) -> str:
        return self.handle.cpu_mode.notice

    def apply(self, profile: Any) -> None:
        """Switch the lab scheduler's profile live (pods created from now on use it)."""
        from testbed.local.placement import profile_to_config_dict

        self.client.set_profile_config(profile_to_config_dict(profile), profile.scheduler_name)
        self.profile = profile

    def reset(self) -> None:
        """Every function to zero, image caches as in the spec, a fresh autoscaler and scheduler."""
        self.client.reset()

    def validate(self, workload: Workload) -> None:
        """Raise InputError before any load if the workload cannot run on this lab."""
        from functions.spec import discover_specs
        from testbed.local.placement import workload_problems
        from testbed.scheduler.config import default_profile

        profile = self.profile if self.profile is not None else default_profile()
        problems = workload_problems(self.cluster, discover_specs(), workload.functions, profile,
                                     platform_entry(self.platform).pod)
        if problems:
            raise InputError("; ".join(problems), file=workload.metadata.get("file", workload.name), field="function")

    @property
    def scale(self) -> float:
        """The factor the lab's CPU and request rate were scaled by to fit the host (1.0: not)."""
        return float((self.host_fit or {}).get("factor", 1.0))

    def prepare_workload(self, workload: Workload, seed: int | None) -> Workload:
        """The workload a run replays: a share :attr:`scale` of each function's requests (the
        scaled lab's rate), arrivals redrawn within their intervals by ``seed``."""
        from loadgen.workload import redraw_arrivals, subset
        from testbed.local.capacity import thin_mask

        if self.scale < 1.0:
            workload = subset(workload, thin_mask(workload.frame["function"].to_numpy(), self.scale),
                              lab_scale=self.scale)
        return redraw_arrivals(workload, seed)

    def run(self, workload: Workload, out_dir: Path, *, seed: int = 0) -> RunResult:
        from loadgen.replay import replay
        from testbed.local import probe
        from testbed.scheduler.config import profile_record

        if len(workload) == 0:
            raise InputError("the workload has no requests", file=workload.name)
        self.validate(workload)
        declared = len(workload)
        workload = self.prepare_workload(workload, seed)
        out_dir = Path(out_dir).resolve()  # Locust runs in its own working directory
        probed = probe.probe(self.state_dir)
        # t = 0 is fixed RUN_LEAD_S ahead, so the controller can align its autoscaler's clock to
        # the run's arrivals; the replay reports the t = 0 it used, and the controller's placements
        # and events are read relative to that same instant
        started = self.client.begin_run(time.time() + RUN_LEAD_S)
        info = {
            "backend": self.name,
            "seed": seed,
            "cluster": self.cluster.name,
            "cpu_enforcement": self.handle.cpu_mode.mode,
            "platform": str(self.platform),
            "profile": profile_record(self.profile),
            "lab_scale": {"factor": self.scale, "requests_declared": declared, "requests_replayed": len(workload),
                          "host_fit": self.host_fit},
            "arrivals": workload.metadata.get("arrivals_redrawn"),
        }
        before = host.sample()
        result = replay(workload, self.handle.target, out_dir, timeout_s=self.timeout_s, info=info,
                        child_setup=cpu.entering(self._harness), start_epoch=started)
        during = host.between(before, host.sample())
        t0 = (result.summary.get("replay") or {}).get("start_epoch") or started
        failed, failure = result.failed, result.summary.get("failure")
        try:
            end = self.client.end_run(t0)
        except TestbedError as err:
            end = {"placements": [], "events": [{"event": "controller_unreachable", "error": str(err)}]}
        if not self.client.healthy():
            # the lab itself stopped (its controller died or tore the lab down): whatever the
            # requests measured is the lab's failure, not the profile's; the run is void
            failed = True
            failure = "; ".join(x for x in (failure, f"the lab's controller at {self.url} stopped answering "
                                                      "during the run") if x)
        placements = placements_table(end["placements"])
        events = end.get("events", [])
        summary = dict(result.summary)
        for key in ("count", "ok", "errors", "timeouts", "cold_starts", "failed", "failure"):
            summary.pop(key, None)
        summary = {k: v for k, v in summary.items() if not k.startswith(("latency_", "dispatch_", "late_"))}
        summary["lab_events"] = events
        # what the machine under the lab did meanwhile (steal, CPU pressure), and its speed just before
        summary["host"] = {**during, "probe": probed,
                           "drift": probe.drift(probed, self.up_probe) if self.up_probe else {}}
        summary["nodes_lost"] = sorted({e["node"] for e in events if e.get("event") == "node_lost"})
        faults = lab_faults(events)
        if faults:
            failed = True
            failure = "; ".join(x for x in (failure, f"the lab failed to start a pod: {faults[0]}"
                                            + (f" (and {len(faults) - 1} more)" if len(faults) > 1 else "")) if x)
        rule = platform_entry(self.platform).fault_rule
        if rule is not None:  # the platform's one fault rule, as the simulator and the kube backend apply it
            judged = rule(result.requests, end.get("invokers"), [f"the lab failed to start a pod: {f}" for f in faults])
            summary["fault_rule"] = judged.record()
            if judged.void_observed:
                failed = True
                failure = "; ".join(x for x in (failure, "void: " + "; ".join(judged.void_observed)) if x)
        return write_run(out_dir, result.requests, placements, info=summary, failed=failed, failure=failure)

    def close(self, *, failed: bool = False) -> None:
        """Stop the lab this backend started. Its private state directory (only the lab's logs are
        left once the lab is down) is removed unless the work ``failed``: then the logs stay for a
        post-mortem and the log says where. Left behind after every clean run, those directories
        piled up in the temporary directory, one per experiment."""
        if self._closed:
            return
        self._closed = True
        self.client.close()
        if not self.owned:
            return
        labmod.down(self.state_dir)
        if not self.made_state_dir:
            return
        if failed:
            log.warning("the lab's logs are kept in %s", self.state_dir / "logs")
        else:
            import shutil

            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(failed=exc_type is not None)

    def __del__(self) -> None:  # a forgotten close must not leave processes behind
        try:
            if not self._closed and self.owned:
                labmod.down(self.state_dir)
        except Exception:
            pass


__all__ = ["LabState", "LocalBackend"]
