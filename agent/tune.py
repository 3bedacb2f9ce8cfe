"""The live tuning loop: one experiment of ``T`` steps on any Backend, logged step by step.

Layout of an experiment directory::

    config.json                the experiment's full config, seed, git revision and versions
    experiment.jsonl           one JSON line per *finished* step (appended and fsynced as it ends)
    runs/step-KKK/cand-R/      the run directories of step K (R = repeat); ref-R/ for paired
                               reference runs; *.void-N for voided runs kept for inspection
    best-scheduler-config.yaml the applied profile as a KubeSchedulerConfiguration
    summary.json, summary.md, tuning-curve.png
    restore.json               only after an abort: the profile re-applied and the state left

Resume (``resume=True``) reads ``config.json`` and the log, replays the logged steps into a fresh
tuner (each logged step is one ``suggest`` — to advance the tuner's state exactly as before — and
one ``tell`` with the *logged* action and metric), and continues with the first step that is not
in the log; a step that was interrupted half-way is rerun from scratch. No finished step is
repeated and none is lost.

Noise: each step runs its profile ``repeats`` times. With ``repeats > 1`` every candidate run is
paired with a reference run made right before it (same seed), and the step's improvement is a
paired Student-t interval (agent.stats). A run whose load generator was unhealthy (dispatch lag
beyond a bound, or a failed run) is void: it is rerun, up to ``max_reruns`` times, and never
scored.

With ``confirm = N`` (``make tune`` uses 3), a best profile that was measured unreplicated is
rerun N times after the T steps, each run paired with a reference run on a fresh seed, and only a
significant paired improvement counts (``confirmation.json``).

At the end the best profile is applied — unless it is not better than the reference (or, with
repeats, not *significantly* better), in which case the reference is applied: the loop never
leaves a cluster on a profile worse than the default. An experiment that stops early (any
exception, SIGINT, SIGTERM) re-applies the reference — or the best, once ``finish`` applied it —
on every backend before it exits (:func:`testbed.backend.restoring`) and records what it did in
``restore.json`` (``why``, ``restored``, the state the scheduler was left in); a second signal
during that restore aborts at once and says what the scheduler may still run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError, ExperimentLogError
from agent.metrics import DEFAULT_TIMEOUT_S, metric_from_requests
from agent.provenance import provenance
from agent.rewards import REWARDS, percent_improvement, reward
from agent.stats import (
    IMPROVEMENT,
    HealthBounds,
    mean_ci,
    paired_improvement,
    run_health,
    verdict,
)
from agent.tuners import Tuner

log = logging.getLogger(__name__)

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
    to judge it beyond the noise before applying it (measured backends, ``repeats == 1``)."""
    backend_options: dict[str, Any] = field(default_factory=dict)
    """How the backend was constructed beyond its name (the kube connection); kept for resume."""

    def __post_init__(self) -> None:
        for name in ("steps", "repeats", "seed", "max_reruns", "confirm"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise AgentError(f"{name} must be an integer, got {value!r}")
        for name in ("method", "backend", "cluster", "workload", "metric", "reward"):
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
        if not 0 <= self.seed <= MAX_SEED:
            raise AgentError(f"seed must be in 0..{MAX_SEED}, got {self.seed}")
        from agent.backends import BACKENDS
        from agent.tuners import METHODS

        if self.method not in METHODS:
            raise AgentError(f"unknown method {self.method!r}; valid: {list(METHODS)}")
        if self.backend not in (*BACKENDS, "auto"):
            raise AgentError(f"unknown backend {self.backend!r}; valid: {list(BACKENDS)}")
        from agent.metrics import METRICS

        if self.metric not in METRICS:
            raise AgentError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)}")
        if self.reward not in REWARDS:
            raise AgentError(f"unknown reward {self.reward!r}; valid: {list(REWARDS)}")
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


@dataclass(frozen=True)
class StepRecord:
    """One finished step, as logged (one JSON line)."""

    step: int
    action: list[float]
    setting: dict[str, Any]
    label: str
    metric: float
    samples: list[float]
    reference_samples: list[float]
    improvement_pct: float
    ci_low: float | None
    ci_high: float | None
    verdict: str
    reward: float | None
    run_dirs: list[str]
    voided: list[dict[str, str]]
    finished_at: float

    @classmethod
    def from_json(cls, line: str | bytes, *, file: Path, row: int) -> StepRecord:
        try:
            data = json.loads(line)
            record = cls(**data)
        except UnicodeDecodeError as err:
            raise ExperimentLogError(f"not UTF-8 text (byte {err.start})", file=file, row=row) from None
        except (json.JSONDecodeError, TypeError) as err:
            raise ExperimentLogError(f"not a step record: {err}", file=file, row=row) from None
        if not isinstance(record.step, int) or isinstance(record.step, bool) or record.step < 0:
            raise ExperimentLogError(f"not a step number: {record.step!r}", file=file, row=row, field="step")
        if not (isinstance(record.metric, int | float) and math.isfinite(record.metric)):
            raise ExperimentLogError(f"not a finite latency: {record.metric!r}", file=file, row=row, field="metric")
        if not (isinstance(record.action, list) and all(isinstance(x, int | float) for x in record.action)):
            raise ExperimentLogError("not a list of numbers", file=file, row=row, field="action")
        if not isinstance(record.setting, dict):
            raise ExperimentLogError("not a mapping", file=file, row=row, field="setting")
        return record


@dataclass(frozen=True)
class _Line:
    row: int
    start: int
    """Byte offset of the line in the file."""
    data: bytes
    terminated: bool


def _lines(raw: bytes) -> list[_Line]:
    lines, start, row = [], 0, 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        row += 1
        if end < 0:
            lines.append(_Line(row, start, raw[start:], False))
            break
        lines.append(_Line(row, start, raw[start:end], True))
        start = end + 1
    return lines


@dataclass(frozen=True)
class _ParsedLog:
    records: list[StepRecord]
    torn: _Line | None
    """The last line when it does not parse (a crash mid-write)."""
    keep: int
    """Bytes of the file that hold whole records (what is left after cutting a torn tail)."""
    size: int
    needs_newline: bool
    """The last record parses but lacks its newline (the crash came just before it)."""


def _parse_log(path: Path) -> _ParsedLog:
    """Parse the log; a line that does not parse anywhere but last is an error naming the file
    and line, and steps must run 0, 1, 2, ... without a gap or a repeat."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ExperimentLogError(f"cannot read: {err.strerror}", file=path) from None
    lines = _lines(raw)
    while lines and not lines[-1].data.strip(b" \t\r\x00"):
        lines.pop()  # trailing blank lines (or zeros a crash left in an allocated block)
    records: list[StepRecord] = []
    torn = None
    for i, line in enumerate(lines):
        if not line.data.strip():
            continue
        try:
            records.append(StepRecord.from_json(line.data, file=path, row=line.row))
        except ExperimentLogError:
            if i == len(lines) - 1:
                torn = line
                break
            raise
    for expected, rec in enumerate(records):
        if rec.step != expected:
            what = "is logged twice" if rec.step < expected else f"where step {expected} was expected"
            raise ExperimentLogError(f"step {rec.step} {what}", file=path, row=expected + 1, field="step")
    if torn is not None:
        keep, needs_newline = torn.start, False
    elif lines:
        last = lines[-1]
        keep, needs_newline = last.start + len(last.data) + int(last.terminated), not last.terminated
    else:
        keep, needs_newline = 0, False
    return _ParsedLog(records, torn, keep, len(raw), needs_newline)


def read_log(out_dir: Path) -> list[StepRecord]:
    """The finished steps of an experiment, in order; a torn last line (crash mid-write) is left
    out (read only: :func:`repair_log` cuts it from the file before a resume appends)."""
    path = Path(out_dir) / LOG_NAME
    if not path.exists():
        return []
    parsed = _parse_log(path)
    if parsed.torn is not None:
        log.warning("%s: line %d is torn (interrupted while writing); it is not a finished step", path,
                    parsed.torn.row)
    return parsed.records


def repair_log(out_dir: Path) -> list[StepRecord]:
    """Make the log end cleanly before anything is appended, durably: a torn last line is cut from
    the file (truncate + fsync), a last record that lacks only its newline gets it (it is a
    finished step: dropping it would measure it twice). Without this, the next record would be
    glued to the torn bytes and the log would not parse again."""
    path = Path(out_dir) / LOG_NAME
    if not path.exists():
        return []
    parsed = _parse_log(path)
    if parsed.keep < parsed.size or parsed.needs_newline:
        if parsed.torn is not None:
            log.warning("%s: cutting the torn last line %d (interrupted while writing)", path, parsed.torn.row)
        with path.open("r+b") as f:
            f.truncate(parsed.keep)
            if parsed.needs_newline:
                f.seek(parsed.keep)
                f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
    return parsed.records


def _append(out_dir: Path, record: StepRecord) -> None:
    path = out_dir / LOG_NAME
    with path.open("a") as f:
        f.write(json.dumps(asdict(record), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(out_dir)


def _fsync_dir(directory: Path) -> None:
    """Make a file's creation or rename durable (the directory entry), where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``path`` whole or not at all: a temp file beside it, fsynced, then ``os.replace``; a
    kill mid-write leaves the old file (or none), never half of one, and no temp file on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _timeout_s(summary: dict[str, Any]) -> float:
    """The client timeout failed requests count at: the replay's, else the default (30 s)."""
    replay = summary.get("backend_replay") or {}
    return float(replay.get("timeout_s") or summary.get("timeout_s") or DEFAULT_TIMEOUT_S)


RESUMABLE_CHANGES = ("steps", "max_reruns")
"""Config fields a resume may change: more steps continue the experiment; the rerun budget of
void runs judges no measurement. Everything else defines what was measured."""
RESUMABLE_BACKEND_OPTIONS = ("kubeconfig", "ingress_url")
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


StepCallback = Callable[[StepRecord, list[StepRecord]], None]
StartCallback = Callable[[int, WeightSetting], None]


class Experiment:
    """Runs (or resumes) one tuning experiment on ``backend``."""

    def __init__(
        self,
        config: ExperimentConfig,
        backend: Any,
        workload: Any,
        tuner: Tuner,
        out_dir: Path,
        *,
        on_start: StartCallback | None = None,
        on_step: StepCallback | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.workload = workload
        self.tuner = tuner
        self.codec: ActionCodec = getattr(tuner, "codec", None) or ActionCodec()
        self.out_dir = Path(out_dir)
        self.on_start = on_start
        self.on_step = on_step
        self.records: list[StepRecord] = []
        self._applied: Any = None
        """The profile ``finish`` applied (the fallback of an abort after it), else None."""

    # -- setup and resume ---------------------------------------------------------------------------
    def _prepare(self, resume: bool) -> None:
        cfg_path = self.out_dir / CONFIG_NAME
        if resume:
            saved = ExperimentConfig.load(self.out_dir)
            self.records = repair_log(self.out_dir)
            conflicts = resume_conflicts(saved, self.config, recorded_steps=len(self.records) - 1)
            if conflicts:
                name, was, now = conflicts[0]
                raise ExperimentLogError(
                    f"the experiment was run with {name} = {was!r}; it cannot be resumed with {now!r}",
                    file=cfg_path, field=name,
                )
            if saved != self.config:  # only what may change (more steps, rerun budget, kube address)
                data = json.loads(cfg_path.read_text(encoding="utf-8"))
                data.update({k: v for k, v in self.config.to_dict().items() if k != "provenance"})
                write_atomic(cfg_path, json.dumps(data, indent=2, sort_keys=True) + "\n")
            for rec in self.records:
                if rec.step > 0:
                    self.tuner.suggest()
                self.tuner.tell(np.asarray(rec.action, dtype=np.float32), rec.metric)
            log.info("resuming %s after %d finished step(s)", self.out_dir, len(self.records))
        else:
            if self.out_dir.exists() and not self.out_dir.is_dir():
                raise AgentError(f"{self.out_dir}: not a directory (--out names the experiment directory)")
            if (self.out_dir / LOG_NAME).exists() and read_log(self.out_dir):
                raise AgentError(f"{self.out_dir} already holds an experiment; use --resume or another --out")
            self.out_dir.mkdir(parents=True, exist_ok=True)
            data = self.config.to_dict()
            data["provenance"] = provenance()
            write_atomic(cfg_path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    # -- one measured run ---------------------------------------------------------------------------
    def _measure(self, setting: WeightSetting, run_dir: Path, seed: int) -> tuple[float, list[dict[str, str]]]:
        profile = setting.to_profile()
        voided: list[dict[str, str]] = []
        for attempt in range(self.config.max_reruns + 1):
            if run_dir.exists():
                shutil.rmtree(run_dir)
            self.backend.reset()
            self.backend.apply(profile)
            # A ScoretuneError from the backend (a profile or cluster it cannot run: ConfigError,
            # InfeasibleClusterError) is the input's fault, not the load generator's: it propagates
            # at once and is never voided and rerun.
            result = self.backend.run(self.workload, run_dir, seed=seed)
            reason = run_health(result.summary, self.config.health)
            if reason is None:
                return metric_from_requests(result.requests, self.config.metric, _timeout_s(result.summary)), voided
            if self.config.backend in DETERMINISTIC_BACKENDS:
                # the simulator has no load generator to be unhealthy: the same inputs would fail
                # the same way on every rerun, so say what is wrong instead of retrying
                raise AgentError(
                    f"{run_dir}: the {self.config.backend} run cannot be scored ({reason}); it is deterministic, "
                    f"so a rerun would fail the same way: check the cluster ({self.config.cluster or 'none'}) "
                    f"and the workload ({self.config.workload})"
                )
            void_dir = run_dir.with_name(f"{run_dir.name}.void-{attempt + 1}")
            if void_dir.exists():
                shutil.rmtree(void_dir)
            run_dir.rename(void_dir)
            voided.append({"run_dir": str(void_dir.relative_to(self.out_dir)), "reason": reason})
            log.warning("void run %s (%s); rerunning", void_dir, reason)
        raise AgentError(
            f"{run_dir}: {self.config.max_reruns + 1} runs in a row were void (last: {voided[-1]['reason']}); "
            "the load generator or the lab is unhealthy"
        )

    def _run_step(self, step: int, action: np.ndarray) -> StepRecord:
        setting = self.codec.decode(action)
        step_dir = self.out_dir / "runs" / f"step-{step:03d}"
        if step_dir.exists():  # an interrupted attempt at this step: start it over
            shutil.rmtree(step_dir)
        if self.on_start:
            self.on_start(step, setting)
        samples: list[float] = []
        ref_samples: list[float] = []
        run_dirs: list[str] = []
        voided: list[dict[str, str]] = []
        paired = step > 0 and self.config.repeats > 1
        for r in range(self.config.repeats):
            seed = self.config.seed + r
            if paired:
                m, v = self._measure(self.codec.reference(), step_dir / f"ref-{r}", seed)
                ref_samples.append(m)
                voided += v
                run_dirs.append(str((step_dir / f"ref-{r}").relative_to(self.out_dir)))
            m, v = self._measure(setting, step_dir / f"cand-{r}", seed)
            samples.append(m)
            voided += v
            run_dirs.append(str((step_dir / f"cand-{r}").relative_to(self.out_dir)))
        if step == 0:
            ref_samples = list(samples)
        elif not paired:
            ref_samples = list(self.records[0].samples)
        metric = float(np.mean(samples))
        if paired or step == 0:
            interval = paired_improvement(ref_samples, samples)
        else:  # unpaired: the step's runs against the step-0 reference runs
            interval = _welch_improvement(ref_samples, samples)
        deterministic = self.config.backend in DETERMINISTIC_BACKENDS
        history = [rec.metric for rec in self.records]
        return StepRecord(
            step=step,
            action=[float(x) for x in np.asarray(action, dtype=np.float64)],
            setting=setting.to_dict(),
            label=setting.label(),
            metric=metric,
            samples=samples,
            reference_samples=ref_samples,
            improvement_pct=percent_improvement(float(np.mean(ref_samples)), metric),
            ci_low=interval.low,
            ci_high=interval.high,
            verdict="reference" if step == 0 else verdict(interval, deterministic=deterministic),
            reward=None if step == 0 else reward(self.config.reward, history, metric),
            run_dirs=run_dirs,
            voided=voided,
            finished_at=time.time(),
        )

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, *, resume: bool = False) -> dict[str, Any]:
        from testbed.backend import restoring

        self._prepare(resume)
        with restoring(self.backend, self._fallback, on_restore=self._record_restore):
            return self._loop()

    def _fallback(self) -> Any:
        return self._applied if self._applied is not None else self.codec.reference().to_profile()

    def _record_restore(self, record: dict[str, Any]) -> None:
        """Say, in the experiment directory and on the log, what an aborted experiment left behind."""
        record = {**record, "at": time.time(), "steps_recorded": len(self.records)}
        try:
            write_atomic(self.out_dir / RESTORE_NAME, json.dumps(record, indent=2, sort_keys=True) + "\n")
        except OSError as err:
            log.error("cannot write %s: %s", self.out_dir / RESTORE_NAME, err)
        how = "restored" if record.get("restored") else "could NOT restore"
        log.warning("experiment stopped (%s): %s the %s profile; %s", record.get("why"), how,
                    "applied" if self._applied is not None else "reference", record.get("state"))

    def _loop(self) -> dict[str, Any]:
        reference_action = self.codec.reference_action()
        for step in range(len(self.records), self.config.steps + 1):
            action = reference_action if step == 0 else self.tuner.suggest()
            record = self._run_step(step, np.asarray(action, dtype=np.float32))
            _append(self.out_dir, record)
            self.records.append(record)
            self.tuner.tell(np.asarray(record.action, dtype=np.float32), record.metric)
            log.debug("step %d/%d: %s -> %.4f s (%+.2f %%)", step, self.config.steps, record.label,
                     record.metric, record.improvement_pct)
            if self.on_step:
                self.on_step(record, self.records)
        return self.finish()

    def _confirm(self, best: StepRecord) -> dict[str, Any]:
        """Rerun the best profile ``confirm`` times, each right after a reference run with the same
        seed, and judge the paired improvement (kept in ``confirmation.json``; a finished
        confirmation is reused on resume, an interrupted one is redone)."""
        path = self.out_dir / "confirmation.json"
        if path.exists():
            try:
                saved = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                saved = None  # written atomically, so only a hand-edited file; redo it
            if (isinstance(saved, dict) and saved.get("best_step") == best.step
                    and len(saved.get("samples", [])) == self.config.confirm):
                return saved
        setting = _setting(best.setting)
        confirm_dir = self.out_dir / "runs" / "confirm"
        if confirm_dir.exists():
            shutil.rmtree(confirm_dir)
        refs: list[float] = []
        cands: list[float] = []
        voided: list[dict[str, str]] = []
        for r in range(self.config.confirm):
            seed = self.config.seed + 1000 + r  # fresh seeds: not the ones the search was scored on
            if self.on_start:
                self.on_start(self.config.steps + 1 + r, setting)
            m, v = self._measure(self.codec.reference(), confirm_dir / f"ref-{r}", seed)
            refs.append(m)
            voided += v
            m, v = self._measure(setting, confirm_dir / f"cand-{r}", seed)
            cands.append(m)
            voided += v
        interval = paired_improvement(refs, cands)
        result = {
            "best_step": best.step,
            "reference_samples": refs,
            "samples": cands,
            "improvement_pct": interval.mean,
            "ci_low": interval.low,
            "ci_high": interval.high,
            "verdict": verdict(interval),
            "voided": voided,
        }
        write_atomic(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
        log.info("confirmation of step %d: %s -> %s", best.step, format_ci(interval.mean, interval.low, interval.high),
                 result["verdict"])
        return result

    def finish(self) -> dict[str, Any]:
        """Apply and export the best profile; write summary.json, summary.md, tuning-curve.png."""
        from testbed.scheduler.config import config_for_profile, dump_config_yaml

        records = self.records
        if len(records) < self.config.steps + 1:
            raise AgentError(f"the experiment has {len(records) - 1} of {self.config.steps} steps; resume it first")
        ref = records[0]
        best = min(records, key=lambda r: (r.metric, r.step))
        deterministic = self.config.backend in DETERMINISTIC_BACKENDS
        confirmation = None
        if (self.config.confirm > 0 and not deterministic and best.step > 0 and best.metric < ref.metric
                and best.verdict != IMPROVEMENT):
            confirmation = self._confirm(best)
        # Apply the best only when it beats the reference beyond the noise.
        trusted = best.step > 0 and best.metric < ref.metric and (
            best.verdict == IMPROVEMENT
            or (confirmation is not None and confirmation["verdict"] == IMPROVEMENT)
            or (self.config.repeats == 1 and deterministic)
        )
        applied = best if trusted else ref
        applied_setting = _setting(applied.setting)
        profile = applied_setting.to_profile()
        self.backend.apply(profile)
        self._applied = profile
        write_atomic(self.out_dir / BEST_CONFIG_NAME, dump_config_yaml(config_for_profile(profile)))
        if confirmation is not None:
            call = confirmation["verdict"]
        elif best.verdict == IMPROVEMENT or (deterministic and best.step > 0 and best.metric < ref.metric):
            call = IMPROVEMENT
        elif best.step == 0:
            call = "no improvement found"
        else:
            call = best.verdict
        summary = {
            "method": self.config.method,
            "backend": self.config.backend,
            "cluster": self.config.cluster,
            "workload": self.config.workload,
            "steps": self.config.steps,
            "repeats": self.config.repeats,
            "metric": self.config.metric,
            "reference_metric": ref.metric,
            "best_metric": best.metric,
            "improvement_pct": percent_improvement(ref.metric, best.metric),
            "improvement_ci_pct": [confirmation["ci_low"], confirmation["ci_high"]] if confirmation
            else [best.ci_low, best.ci_high],
            "confirmation": confirmation,
            "verdict": call,
            "best_step": best.step,
            "best_weights": best.setting["weights"],
            "best_strategy": best.setting["strategy"],
            "best_shape": best.setting["shape"],
            "best_label": best.label,
            "applied_step": applied.step,
            "applied_label": applied.label,
            "voided_runs": sum(len(r.voided) for r in records),
            "metrics": [r.metric for r in records],
        }
        write_atomic(self.out_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        write_atomic(self.out_dir / "summary.md", summary_markdown(summary, records))
        plot_tuning_curve(records, self.out_dir / "tuning-curve.png", title=f"{self.config.method} on {self.config.backend}")
        return summary


def _setting(data: dict[str, Any]) -> WeightSetting:
    return WeightSetting(
        weights=data["weights"],
        strategy=data["strategy"],
        shape=tuple(tuple(p) for p in data["shape"]) if data["shape"] else None,
    )


def _welch_improvement(reference: list[float], candidate: list[float]):
    """Unpaired interval of ``100 (mean_ref - c) / mean_ref`` over the candidate runs, widened by the
    reference's own uncertainty (the two sample variances add, as in Welch's t)."""
    from agent.stats import Interval

    ref = float(np.mean(reference))
    imp = [100.0 * (ref - c) / ref for c in candidate]
    ci_c = mean_ci(imp)
    ci_r = mean_ci([100.0 * (ref - r) / ref for r in reference])
    if ci_c.low is None or ci_r.low is None:
        return ci_c
    half = float(np.hypot(ci_c.mean - ci_c.low, ci_r.mean - ci_r.low))
    return Interval(ci_c.mean, ci_c.mean - half, ci_c.mean + half, ci_c.n)


PLUGIN_ABBREVIATIONS = {
    "TaintToleration": "TT",
    "NodeAffinity": "NA",
    "NodeResourcesFit": "NRF",
    "PodTopologySpread": "PTS",
    "InterPodAffinity": "IPA",
    "NodeResourcesBalancedAllocation": "NRBA",
    "ImageLocality": "IL",
    "VolumeBinding": "VB",
}
"""Short names of the score plugins (their capitals) for labels that must fit an 80-column line."""
STRATEGY_ABBREVIATIONS = {"LeastAllocated": "LA", "MostAllocated": "MA", "RequestedToCapacityRatio": "RTCR"}


def _abbreviation(name: str, table: dict[str, str]) -> str:
    return table.get(name) or "".join(c for c in name if c.isupper()) or name


def compact_label(setting: dict[str, Any] | WeightSetting) -> str:
    """A setting in a few dozen characters, e.g. ``TT=3 NA=2 NRF=1 PTS=2 IPA=2 NRBA=1 IL=off LA``:
    plugin and strategy abbreviations (see :func:`label_legend`), spaces between weights so a
    terminal wraps between them and never inside a name."""
    data = setting.to_dict() if isinstance(setting, WeightSetting) else setting
    parts = [f"{_abbreviation(p, PLUGIN_ABBREVIATIONS)}={'off' if w is None else w}" for p, w in data["weights"].items()]
    strategy = _abbreviation(data["strategy"], STRATEGY_ABBREVIATIONS)
    if data.get("shape"):
        strategy += "[" + ",".join(f"{u}:{v}" for u, v in data["shape"]) + "]"
    return " ".join([*parts, strategy])


def label_legend(width: int = 78) -> list[str]:
    """The abbreviations of :func:`compact_label`, as lines of at most ``width`` characters."""
    from testbed.scheduler.config import SCORE_PLUGINS

    items = [f"{_abbreviation(p, PLUGIN_ABBREVIATIONS)} {p}" for p in SCORE_PLUGINS]
    items += [f"{a} {s}" for s, a in STRATEGY_ABBREVIATIONS.items()]
    lines, line = [], ""
    for item in items:
        candidate = f"{line}, {item}" if line else item
        if len(candidate) > width and line:
            lines.append(line + ",")
            line = item
        else:
            line = candidate
    return [*lines, line] if line else lines


def format_ci(mean: float | None, low: float | None, high: float | None, *, digits: int = 1) -> str:
    """``+32.4 % [1.8, 63.1]``: an improvement and its interval, rounded (no interval: the mean)."""
    if mean is None or not math.isfinite(mean):
        return "–"
    text = f"{mean:+.{digits}f} %"
    if low is not None and high is not None:
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return text


def md_cell(text: str) -> str:
    """``text`` safe in a GitHub Markdown table cell: ``|`` escaped (GFM splits cells on every
    unescaped ``|``, even inside a code span), newlines as spaces."""
    return text.replace("|", "\\|").replace("\n", " ")


def summary_markdown(summary: dict[str, Any], records: list[StepRecord]) -> str:
    conf = summary.get("confirmation")
    lines = [
        f"# Tuning experiment: {summary['method']} on {summary['backend']}",
        "",
        f"- cluster: `{summary['cluster']}`, workload: `{summary['workload']}`, metric: {summary['metric']} latency",
        f"- reference (default weights): {summary['reference_metric']:.4f} s; best: {summary['best_metric']:.4f} s "
        f"at step {summary['best_step']} ({summary['improvement_pct']:+.2f} %, {summary['verdict']})",
        f"- applied and exported: step {summary['applied_step']} (`{BEST_CONFIG_NAME}`)",
        *([f"- confirmation ({len(conf['samples'])} paired reruns of step {conf['best_step']}): "
           f"{format_ci(conf['improvement_pct'], conf['ci_low'], conf['ci_high'])} -> {conf['verdict']}"] if conf else []),
        "",
        "| step | profile | latency (s) | vs reference | 95 % CI | verdict |",
        "|---:|---|---:|---:|---|---|",
    ]
    for r in records:
        ci = "" if r.ci_low is None or r.ci_high is None else f"[{r.ci_low:+.1f}, {r.ci_high:+.1f}]"
        lines.append(f"| {r.step} | `{md_cell(r.label)}` | {r.metric:.4f} | {r.improvement_pct:+.2f} % | {ci} "
                     f"| {md_cell(r.verdict)} |")
    return "\n".join(lines) + "\n"


def plot_tuning_curve(records: list[StepRecord], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [r.step for r in records]
    metrics = [r.metric for r in records]
    best = np.minimum.accumulate(metrics)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.axhline(records[0].metric, color="grey", linestyle="--", label="reference (default weights)")
    ax.plot(steps, metrics, "o", color="tab:blue", alpha=0.6, label="run")
    ax.step(steps, best, where="post", color="tab:red", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole runs: no tick at 2.5
    ax.set_xlabel("step")
    ax.set_ylabel("latency (s)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)


def save_figure_atomic(fig: Any, path: Path) -> None:
    """``fig.savefig(path)`` through a temp file beside it (no half-written PNG after a kill)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format=path.suffix.lstrip(".") or "png")
    write_atomic(path, buffer.getvalue())
