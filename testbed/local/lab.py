"""Starting, inspecting and stopping the embedded lab (``scoretune testbed up/status/down``).

``up`` checks its inputs first (the cluster spec, the ingress port), picks the CPU enforcement
(:func:`testbed.local.cpu.detect`), writes the lab description into the state directory, starts
one node agent per node and then the controller, each in its own session with its log in
``<state>/logs``, and waits until the controller answers. Every process is recorded by pid (and
start time) as it starts, so ``down`` -- from this process or any other -- stops exactly those,
then removes the cgroups the lab created (:func:`testbed.local.teardown.down`, below the
controllers, which call it when their owner dies). If ``up`` fails half-way it tears down what it
started. The platform is looked up once in :mod:`testbed.platforms`: its settings, whether it
issues a guest key, and (for the backend) the request target of the handle.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests

from functions.errors import FunctionsError
from functions.platform import DEFAULT_PLATFORM, Platform, parse_platform
from loadgen.targets import Target
from testbed.cluster import ClusterSpec, cluster_to_dict, load_cluster
from testbed.errors import ClusterSpecError, InputError, TestbedError
from testbed.local import cpu
from testbed.local.capacity import DEFAULT_RESERVE_MILLI, HostFit, fit_host, scale_hardware
from testbed.local.probe import probe as host_probe
from testbed.local.state import LabState, record_for
from testbed.local.teardown import down
from testbed.platforms import platform_entry

log = logging.getLogger(__name__)

DEFAULT_CLUSTER = "lab-small"
DEFAULT_PORT = 8480
START_TIMEOUT_S = 60.0
REPO_ROOT = Path(__file__).resolve().parents[2]


def check_port_free(port: int) -> None:
    """A clear error, before anything starts, when the ingress port is out of range or taken."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InputError(f"must be a TCP port in 0..65535 (0: any free port), got {port!r}", field="--port")
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as err:
            raise TestbedError(
                f"port {port} on 127.0.0.1 is already in use ({err.strerror}); pick another with --port, or 0 for any"
            ) from None


def check_cluster(cluster: ClusterSpec) -> None:
    """Specs the lab cannot run: no schedulable node, or nodes too small to hold any process."""
    if all(n.unschedulable for n in cluster.nodes):
        raise ClusterSpecError("every node is unschedulable: no instance could ever run", file=cluster.path or "<cluster>")
    for i, n in enumerate(cluster.nodes):
        if n.cpu_milli < 10:
            raise ClusterSpecError(f"node {n.name}: cpu {n.cpu_milli}m is below the lab's 10m minimum", file=cluster.path or "<cluster>", field=f"nodes.{i}.cpu")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass(frozen=True)
class LabHandle:
    state_dir: Path
    url: str
    cpu_mode: cpu.CpuMode
    platform: Platform = DEFAULT_PLATFORM

    @property
    def guest_key(self) -> str | None:
        """The lab's API key (``UUID:KEY``), when its platform issues one (OpenWhisk's guest key)."""
        return LabState(self.state_dir).read_guest_key() if platform_entry(self.platform).guest_key else None

    @property
    def target(self) -> Target:
        """Where a replay sends the lab's requests, as its platform takes them."""
        return platform_entry(self.platform).lab_target(self.url, self.guest_key)

    @property
    def client(self) -> LabClient:
        return LabClient(self.url)


class LabClient:
    """The controller's control API over HTTP (blocking; the backend's side)."""

    def __init__(self, url: str, *, timeout_s: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = requests.Session()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            r = self._http.request(method, f"{self.url}/_lab/{path}", json=body, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise TestbedError(f"lab controller at {self.url} does not answer: {err}") from None
        data = r.json()
        if r.status_code >= 400:
            raise TestbedError(f"lab controller: {path}: {data.get('error', r.text)}")
        return data

    def status(self) -> dict[str, Any]:
        return self._call("GET", "status")

    def healthy(self) -> bool:
        try:
            return self._http.get(f"{self.url}/_lab/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def set_profile_config(self, config: dict[str, Any], scheduler_name: str | None = None) -> None:
        self._call("POST", "profile", {"config": config, "scheduler_name": scheduler_name})

    def reset(self) -> None:
        self._call("POST", "reset", {})

    def begin_run(self, t0: float | None = None) -> float:
        """Mark the run's start: ``t0`` (the replay's fixed t = 0) or now; returns it."""
        return float(self._call("POST", "run/begin", {"t0": t0} if t0 is not None else {})["t0"])

    def end_run(self, t0: float) -> dict[str, Any]:
        return self._call("POST", "run/end", {"t0": t0})

    def close(self) -> None:
        self._http.close()


def harness_group(state: LabState) -> str | None:
    """The cgroup the lab's harness runs in (None under duty cycling: no groups)."""
    lab = state.read_lab() or {}
    return (lab.get("cpu") or {}).get("harness")


def _spawn(state: LabState, role: str, name: str, args: list[str]) -> Any:
    logf = open(state.log_path(name), "ab")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        stdin=subprocess.DEVNULL,
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        env=env,
        cwd=str(REPO_ROOT),
        preexec_fn=cpu.entering(harness_group(state)),
    )
    logf.close()
    rec = record_for(role, name.removeprefix(f"{role}-"), proc.pid)
    state.add_proc(rec)
    return rec


def running_lab(state_dir: str | Path | None = None) -> LabHandle | None:
    """The lab running in ``state_dir``, if its controller is alive and answers."""
    state = LabState(state_dir)
    lab = state.read_lab()
    ctrl = state.live_procs("controller")
    port = state.read_port("controller")
    if lab is None or not ctrl or port is None:
        return None
    mode = cpu.CpuMode(lab["cpu"]["mode"], lab["cpu"]["base"], lab["cpu"]["reason"])
    return LabHandle(state.root, f"http://127.0.0.1:{port}", mode,
                     parse_platform(lab.get("platform", DEFAULT_PLATFORM), field="platform", file=str(state.lab_file)))


def harness_weight_milli(hardware: dict[str, Any], host_fit: HostFit | None) -> int:
    """The harness group's weight, in the millicores it stands for: its reserve's share of the
    host against the nodes' weights as they are. On a lab fitted to its host that is the reserve;
    on one run over-subscribed (``--host-fit off``) the nodes' weights add up to more than the
    host, and a weight of the bare reserve starved the load generator (an A/A on
    lab-hidden-neighbour voided four attempts in a row for dispatch lag), so it grows with them."""
    reserve = host_fit.reserve_milli if host_fit is not None else DEFAULT_RESERVE_MILLI
    capacity = host_fit.capacity_milli if host_fit is not None else 0
    nodes = sum(h.cpu_milli for h in hardware.values())
    if capacity <= 0 or nodes <= capacity:
        return reserve
    return int(round(reserve * nodes / capacity))


def prepare(
    spec: ClusterSpec,
    state: LabState,
    *,
    port: int = 0,
    cpu_enforcement: str = "auto",
    seed: int = 0,
    profile_config: dict[str, Any] | None = None,
    owner_pid: int | None = None,
    platform: Platform = DEFAULT_PLATFORM,
    openwhisk: dict[str, Any] | None = None,
    runtime: tuple[str, str] = ("process", "default"),
    hardware: tuple[dict[str, Any], str | None] | None = None,
    host_fit: HostFit | None = None,
) -> cpu.CpuMode:
    """Pick the CPU enforcement, create the lab cgroup, write ``lab.json`` (and, for OpenWhisk, a
    fresh guest key). With ``owner_pid`` the controller tears the whole lab down once that process
    is gone (a backend that crashed). ``runtime``: (kind, why it was chosen); ``hardware``: the
    nodes' hidden hardware and its file (None: what the spec implies); ``host_fit``: how the
    cluster was fitted to the host (:mod:`testbed.local.capacity`; None: as it is)."""
    from testbed.local import hardware as hw

    hw_nodes, hw_file = hardware if hardware is not None else (hw.defaults(spec), None)
    declared = hw.to_dict(hw_nodes)
    if host_fit is not None:
        hw_nodes = scale_hardware(hw_nodes, host_fit.factor)
    mode = cpu.detect("auto" if runtime[0] == "containers" and cpu_enforcement == "auto" else cpu_enforcement)
    if runtime[0] == "containers" and mode.mode == "duty-cycle":
        raise TestbedError(f"the container runtime needs cgroup CPU quotas, and {mode.reason}")
    log.info("%s", mode.notice)
    state.ensure()
    lab_group = f"scoretune-lab-{uuid.uuid4().hex[:8]}"
    harness = None
    if mode.mode != "duty-cycle":
        try:
            path = cpu.CgroupLimiter.make_lab_group(mode, lab_group)
            state.add_cgroup(str(path))
            harness = str(cpu.CgroupLimiter.make_harness_group(mode, lab_group, harness_weight_milli(hw_nodes, host_fit)))
            state.add_cgroup(harness)
        except OSError as err:
            log.warning("cannot create the lab cgroup (%s); falling back to duty cycling", err.strerror)
            mode = cpu.CpuMode("duty-cycle", None, f"creating {lab_group} failed: {err.strerror}")
    state.write_lab(
        {
            "cluster": cluster_to_dict(spec),
            "cluster_name": spec.name,
            "cluster_file": str(spec.path) if spec.path else "<cluster>",
            "cpu": {"mode": mode.mode, "base": mode.base, "reason": mode.reason, "lab_group": lab_group, "notice": mode.notice,
                    "harness": harness},
            "host_fit": host_fit.to_dict() if host_fit is not None else None,
            "hardware_declared": declared,
            "port": port,
            "seed": seed,
            "profile": profile_config,
            "platform": str(platform),
            "openwhisk": openwhisk or {},
            "runtime": {"kind": runtime[0], "reason": runtime[1]},
            "hardware": hw.to_dict(hw_nodes),
            "probe": host_probe(state.root),  # the host's speed as the lab came up (testbed.local.probe)
            "hardware_file": hw_file,
            "started_at": time.time(),
            "started_by": os.getpid(),
            "owner": asdict(record_for("owner", "owner", owner_pid)) if owner_pid else None,
            "starter": asdict(record_for("starter", "starter", os.getpid())),  # vouches for the lab while it comes up
        }
    )
    if platform_entry(platform).guest_key:
        state.write_guest_key()
    return mode


def start_agents(spec: ClusterSpec, state: LabState) -> dict[str, int]:
    """One agent process per node; returns node -> agent port once every agent listens."""
    recs = []
    for n in spec.nodes:
        args = ["testbed.local.node_agent", "--state-dir", str(state.root.resolve()), "--node", n.name]
        recs.append((n.name, _spawn(state, "agent", f"agent-{n.name}", args)))
    return {name: state.wait_port(f"agent-{name}", rec, START_TIMEOUT_S) for name, rec in recs}


def start_controller(state: LabState, port: int, mode: cpu.CpuMode, platform: Platform = DEFAULT_PLATFORM) -> LabHandle:
    ctrl = _spawn(state, "controller", "controller", ["testbed.local.controllers", "--state-dir", str(state.root.resolve()), "--port", str(port)])
    bound = state.wait_port("controller", ctrl, START_TIMEOUT_S)
    handle = LabHandle(state.root, f"http://127.0.0.1:{bound}", mode, platform)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not handle.client.healthy():
        if time.monotonic() > deadline or not ctrl.alive():
            raise RuntimeError(f"the controller does not answer; see {state.log_path('controller')}")
        time.sleep(0.05)
    return handle


def up(
    cluster: str | Path | ClusterSpec = DEFAULT_CLUSTER,
    *,
    state_dir: str | Path | None = None,
    port: int = DEFAULT_PORT,
    cpu_enforcement: str = "auto",
    profile_config: dict[str, Any] | None = None,
    seed: int = 0,
    owner_pid: int | None = None,
    platform: str | Platform = DEFAULT_PLATFORM,
    openwhisk: dict[str, Any] | None = None,
    runtime: str = "process",
    hardware: str | Path | None = None,
    image_cache: Path | None = None,
    host_fit: str = "scale",
    reserve_milli: int = DEFAULT_RESERVE_MILLI,
) -> LabHandle:
    """Start the lab and return once its controller answers; raises before starting anything on
    bad input (a spec that cannot run, a taken port, a lab already running in ``state_dir``, an
    unknown platform). ``platform``: ``knative`` (activator and KPA) or ``openwhisk`` (controller,
    invokers and their container pools, behind OpenWhisk's REST API); ``openwhisk``: fields of
    :class:`testbed.openwhisk.config.OpenWhiskConfig` that differ from the deployment the role
    makes (checked here, before anything starts). ``runtime``: ``process`` (instances are local
    processes), ``containers`` (real images, runc pods, shaped links; needs root and Debian's
    packages) or ``auto`` (containers when they work); ``hardware``: a hardware file (default: the
    cluster's shipped one, if any; :mod:`testbed.local.hardware`); ``host_fit``: ``scale`` a
    cluster bigger than the host (less ``reserve_milli`` for the harness) down to it, or
    ``refuse`` it (:mod:`testbed.local.capacity`)."""
    from testbed.local import hardware as hw
    from testbed.local.containers import tools

    entry = platform_entry(platform)
    platform = entry.platform
    entry.check_settings(openwhisk or {})
    spec = cluster if isinstance(cluster, ClusterSpec) else load_cluster(cluster)
    check_cluster(spec)
    hardware_nodes = hw.load_hardware(spec, hardware)
    fitted = fit_host(spec.name, hardware_nodes[0], fit=host_fit, reserve_milli=reserve_milli)
    log.info("%s", fitted.notice)
    if runtime not in tools.RUNTIMES:
        raise InputError(f"must be one of {', '.join(tools.RUNTIMES)}, got {runtime!r}", field="--runtime")
    try:
        chosen = tools.choose(runtime)
    except RuntimeError as err:
        raise TestbedError(f"--runtime containers: {err}") from None
    log.info("lab runtime: %s (%s)", *chosen)
    state = LabState(state_dir)
    if running_lab(state.root) is not None:
        raise TestbedError(f"a lab is already running in {state.root}; `scoretune testbed down` first")
    if state.procs():
        down(state.root)  # leftovers of a lab that died: clean them before starting anew
    check_port_free(port)
    mode = prepare(
        spec, state, port=port, cpu_enforcement=cpu_enforcement, seed=seed, profile_config=profile_config,
        owner_pid=owner_pid, platform=platform, openwhisk=openwhisk, runtime=chosen, hardware=hardware_nodes,
        host_fit=fitted,
    )
    try:
        if chosen[0] == "containers":
            _containers_up(spec, state, hw.from_dict(state.read_lab()["hardware"]), image_cache)
        start_agents(spec, state)
        handle = start_controller(state, port, mode, platform)
    except (RuntimeError, TimeoutError, OSError, FunctionsError) as err:
        logs = "\n".join(f"--- {p.name}\n{_tail(p)}" for p in sorted(state.logs_dir.glob("*.log")) if p.stat().st_size)
        down(state.root)
        raise TestbedError(f"the lab did not start: {err}\n{logs}") from None
    except BaseException:  # a TestbedError of the bring-up, an interrupt: nothing may stay (its cgroup included)
        down(state.root)
        raise
    return handle


def _containers_up(spec: ClusterSpec, state: LabState, hardware: dict[str, Any], image_cache: Path | None) -> None:
    """Build (or find) the images, then the network and registry; ``lab.json`` records each first."""
    from testbed.local.containers import bringup

    images, layout = bringup.build(image_cache)

    def record(block: dict[str, Any]) -> None:
        lab = state.read_lab() or {}
        lab["containers"] = block
        state.write_lab(lab)

    lab = state.read_lab() or {}
    bringup.bring_up(spec, state, lab["cpu"]["lab_group"].rsplit("-", 1)[-1], hardware, images, layout, record)


def status(state_dir: str | Path | None = None) -> dict[str, Any]:
    """The running lab's view (nodes, instances, placement), or the recorded processes' liveness."""
    state = LabState(state_dir)
    lab = state.read_lab()
    if lab is None:
        return {"running": False, "state_dir": str(state.root)}
    procs = [{"role": r.role, "name": r.name, "pid": r.pid, "alive": r.alive()} for r in state.procs()]
    handle = running_lab(state.root)
    out: dict[str, Any] = {"running": handle is not None, "state_dir": str(state.root), "processes": procs, "cpu": lab["cpu"]}
    if handle is not None:
        out["url"] = handle.url
        try:
            out.update(handle.client.status())
        except TestbedError as err:
            out["error"] = str(err)
    return out


__all__ = ["LabClient", "LabHandle", "down", "running_lab", "status", "up"]
