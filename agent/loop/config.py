"""A live experiment's definition (``config.json``) and what a resume may change of it.

Layout of an experiment directory::

    config.json                the experiment's full config, seed, git revision and versions
    experiment.jsonl           one JSON line per *finished* step (agent.loop.log)
    runs/step-KKK/cand-R/      the run directories of step K (R = repeat); ref-R/ for paired
                               reference runs; *.void-N for voided runs kept for inspection
    best-scheduler-config.yaml the applied profile as a KubeSchedulerConfiguration
    summary.json, summary.md, tuning-curve.png
    restore.json               only after an abort: the profile re-applied and the state left
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import AgentError, ExperimentLogError
from agent.rl.rewards import REWARDS
from agent.stats import HealthBounds
from functions.errors import InputError
from functions.platform import DEFAULT_PLATFORM, Platform, parse_platform

LOG_NAME = "experiment.jsonl"
CONFIG_NAME = "config.json"
RESTORE_NAME = "restore.json"
BEST_CONFIG_NAME = "best-scheduler-config.yaml"
DETERMINISTIC_BACKENDS = ("sim",)
MAX_STEPS = 10_000
MAX_REPEATS = 100
MAX_RERUNS = 100
MAX_CONFIRM = 100
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that defines one tuning experiment (written to ``config.json``)."""

    method: str
    backend: str
    cluster: str
    workload: str
    steps: int = 10
    metric: str = "mean"
    repeats: int = 1
    seed: int = 0
    policy: str | None = None
    reward: str = "best"
    max_reruns: int = 3
    health: HealthBounds = field(default_factory=HealthBounds)
    confirm: int = 0
    """After the T steps, rerun the best profile this many times, each paired with a reference run,
    to judge it beyond the noise before applying it (measured backends, ``repeats == 1``); with
    ``confirm_mde``, at most this many."""
    confirm_mde: float = 0.0
    """> 0: size the confirmation from the measured noise (Stein's two stages,
    ``agent.loop.confirmation``) so an improvement of this many percent is detectable, with at
    most ``confirm`` pairs; 0: exactly ``confirm`` pairs."""
    fault_wait_s: float = 30.0
    """How long to wait after the lab failed to prepare a step (a node not Ready, a cache that
    would not purge, a rollout rolled back: testbed.errors.LabFault) before trying it again; at
    most ``max_reruns`` retries, like a void run."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """How the backend was constructed beyond its name (the kube connection); kept for resume."""
    platform: Platform = DEFAULT_PLATFORM
    """What serves the functions: Knative Serving or OpenWhisk (``testbed.platforms``)."""
    host_drift: float = 1.5
    """Pause the experiment when the host's probes (``testbed.local.probe``) move beyond this ratio
    of its first run's (``agent.loop.hostcheck``); 0: never."""
    host_fit: str = "scale"
    """The embedded lab on a host smaller than the cluster: ``scale`` it down by one factor,
    ``refuse`` it, or ``off`` (as declared, over-subscribed) (``testbed.local.capacity``)."""
    runtime: str = "process"
    """How the embedded lab's nodes run pods (``local`` and ``auto`` backends): ``process``,
    ``containers`` (real images, runc, shaped links) or ``auto`` (containers when they work)."""
    anchor_every: int = 0
    """> 0: every this many steps, run the reference once beside the step's candidate (an
    anchor, in a seeded order), report how far the reference moved from step 0, and tell the
    tuner latencies divided by that drift (``agent.loop.anchors``); 0: no anchors. Needs
    ``repeats == 1`` (paired steps measure the reference beside every candidate already)."""

    def __post_init__(self) -> None:
        for name in ("steps", "repeats", "seed", "max_reruns", "confirm", "anchor_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise AgentError(f"{name} must be an integer, got {value!r}")
        for name in ("method", "backend", "cluster", "workload", "metric", "reward", "platform", "runtime"):
            if not isinstance(getattr(self, name), str):
                raise AgentError(f"{name} must be a string, got {getattr(self, name)!r}")
        if self.policy is not None and not isinstance(self.policy, str):
            raise AgentError(f"policy must be a path or null, got {self.policy!r}")
        if not isinstance(self.backend_options, dict):
            raise AgentError(f"backend_options must be a mapping, got {self.backend_options!r}")
        if not 1 <= self.steps <= MAX_STEPS:
            raise AgentError(f"steps must be in 1..{MAX_STEPS}, got {self.steps}")
        if not 1 <= self.repeats <= MAX_REPEATS:
            raise AgentError(f"repeats must be in 1..{MAX_REPEATS}, got {self.repeats}")
        if not 0 <= self.max_reruns <= MAX_RERUNS:
            raise AgentError(f"max_reruns must be in 0..{MAX_RERUNS}, got {self.max_reruns}")
        if not 0 <= self.confirm <= MAX_CONFIRM:
            raise AgentError(f"confirm must be in 0..{MAX_CONFIRM}, got {self.confirm}")
        if (not isinstance(self.confirm_mde, int | float) or isinstance(self.confirm_mde, bool)
                or not 0.0 <= self.confirm_mde <= 1000.0):
            raise AgentError(f"confirm_mde must be a percentage in 0..1000 (0: no two-stage design), got {self.confirm_mde!r}")
        if not 0 <= self.anchor_every <= MAX_STEPS:
            raise AgentError(f"anchor_every must be in 0..{MAX_STEPS} (0: no anchors), got {self.anchor_every}")
        if self.anchor_every and self.repeats > 1:
            raise AgentError(f"anchor_every needs repeats 1: with repeats {self.repeats} every candidate run is "
                             "already paired with a reference run")
        if self.anchor_every and self.backend in DETERMINISTIC_BACKENDS:
            raise AgentError(f"anchor_every needs a measured backend: the {self.backend} backend is deterministic, "
                             "its reference never drifts")
        if not 0 <= self.seed <= MAX_SEED:
            raise AgentError(f"seed must be in 0..{MAX_SEED}, got {self.seed}")
        from agent.loop.backends import BACKENDS
        from agent.tuners.factory import METHODS

        if self.method not in METHODS:
            raise AgentError(f"unknown method {self.method!r}; valid: {list(METHODS)}")
        if self.backend not in (*BACKENDS, "auto"):
            raise AgentError(f"unknown backend {self.backend!r}; valid: {list(BACKENDS)}")
        from agent.metrics import METRICS

        if self.metric not in METRICS:
            raise AgentError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)}")
        try:
            object.__setattr__(self, "platform", parse_platform(self.platform))
        except InputError as err:
            raise AgentError(err.detail) from None
        if self.host_fit not in ("scale", "refuse", "off"):
            raise AgentError(f"unknown host fit {self.host_fit!r}; valid: scale, refuse, off")
        if self.runtime not in ("process", "containers", "auto"):
            raise AgentError(f"unknown lab runtime {self.runtime!r}; valid: process, containers, auto")
        if self.reward not in REWARDS:
            raise AgentError(f"unknown reward {self.reward!r}; valid: {list(REWARDS)}")
        hd = self.host_drift
        if isinstance(hd, bool) or not (isinstance(hd, int | float) and math.isfinite(hd) and (hd == 0 or hd > 1)):
            raise AgentError(f"host_drift must be 0 (no check) or a ratio above 1, got {hd!r}")
        wait = self.fault_wait_s
        if isinstance(wait, bool) or not (isinstance(wait, int | float) and math.isfinite(wait) and 0 <= wait <= 3600):
            raise AgentError(f"fault_wait_s must be a number of seconds in [0, 3600], got {wait!r}")
        lag, late = self.health.max_dispatch_lag_p99_s, self.health.max_late_share
        if not (isinstance(lag, int | float) and math.isfinite(lag) and lag > 0):
            raise AgentError(f"max_dispatch_lag_p99_s must be a positive number of seconds, got {lag!r}")
        if not (isinstance(late, int | float) and math.isfinite(late) and 0 <= late <= 1):
            raise AgentError(f"max_late_share must be a share in [0, 1], got {late!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, *, file: Path | None = None) -> ExperimentConfig:
        if not isinstance(data, dict):
            raise ExperimentLogError(f"not an experiment config: a JSON {type(data).__name__}, not an object", file=file)
        data = dict(data)
        data.pop("provenance", None)
        health = data.pop("health", {})
        if not isinstance(health, dict):
            raise ExperimentLogError("not a mapping", file=file, field="health")
        try:
            return cls(**data, health=HealthBounds(**health))
        except TypeError as err:
            raise ExperimentLogError(f"not an experiment config: {err}", file=file) from err
        except AgentError as err:
            raise ExperimentLogError(str(err), file=file) from err

    @classmethod
    def load(cls, out_dir: Path) -> ExperimentConfig:
        """The config of the experiment in ``out_dir``, its paths resolved (see :func:`resolve_path`)."""
        path = Path(out_dir) / CONFIG_NAME
        if Path(out_dir).exists() and not Path(out_dir).is_dir():
            raise ExperimentLogError("not an experiment directory", file=out_dir)
        if not path.is_file():
            raise ExperimentLogError("no experiment to resume (config.json is missing)", file=path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ExperimentLogError(f"not UTF-8 text (byte {err.start})", file=path) from None
        except json.JSONDecodeError as err:
            raise ExperimentLogError(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})",
                                     file=path) from None
        except OSError as err:
            raise ExperimentLogError(f"cannot read: {err.strerror}", file=path) from None
        config = cls.from_dict(data, file=path)
        return dataclasses.replace(
            config,
            cluster=resolve_path(config.cluster, out_dir),
            workload=resolve_path(config.workload, out_dir),
            policy=resolve_path(config.policy, out_dir) if config.policy else None,
        )

    def with_absolute_paths(self) -> ExperimentConfig:
        """The config with every file it names (cluster, workload, policy) made absolute, so that
        ``--resume`` works from any working directory; names (``lab-small``, ``lab``) stay names."""
        return dataclasses.replace(
            self, cluster=absolute_if_file(self.cluster), workload=absolute_if_file(self.workload),
            policy=absolute_if_file(self.policy) if self.policy else None,
        )


def absolute_if_file(value: str) -> str:
    """``value`` as an absolute path when it names an existing file, else unchanged (a name)."""
    return str(Path(value).resolve()) if value and Path(value).is_file() else value


def resolve_path(value: str, out_dir: Path) -> str:
    """A path stored in ``config.json``: absolute as is; a relative one is relative to the
    experiment directory when it exists there (a moved experiment), else to the working directory
    (configs written before paths were made absolute); names (no such file) stay names."""
    if not value or Path(value).is_absolute():
        return value
    beside = Path(out_dir) / value
    if beside.exists():
        return str(beside.resolve())
    return absolute_if_file(value)



RESUMABLE_CHANGES = ("steps", "max_reruns", "host_drift")
"""Config fields a resume may change: more steps continue the experiment; the rerun budget of
void runs judges no measurement. Everything else defines what was measured."""
RESUMABLE_BACKEND_OPTIONS = ("kubeconfig", "ingress_url", "openwhisk_api", "openwhisk_auth")
"""How to reach the same cluster may change (a moved kubeconfig, a new node address); which
cluster and namespace were measured may not."""


def resume_conflicts(saved: ExperimentConfig, given: ExperimentConfig, *, recorded_steps: int = 0
                     ) -> list[tuple[str, Any, Any]]:
    """``(field, stored value, given value)`` for every way ``given`` contradicts the stored
    experiment: any field but :data:`RESUMABLE_CHANGES`, and ``steps`` fewer than already recorded."""
    conflicts = []
    for f in dataclasses.fields(ExperimentConfig):
        was, now = getattr(saved, f.name), getattr(given, f.name)
        if f.name in RESUMABLE_CHANGES or was == now:
            continue
        if f.name == "backend_options":
            keys = sorted((set(was) | set(now)) - set(RESUMABLE_BACKEND_OPTIONS))
            conflicts += [(k, was.get(k), now.get(k)) for k in keys if was.get(k) != now.get(k)]
            continue
        conflicts.append((f.name, was, now))
    if given.steps < recorded_steps:
        conflicts.append(("steps", saved.steps, given.steps))
    return conflicts

