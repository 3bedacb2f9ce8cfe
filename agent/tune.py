"""The live tuning loop: one experiment of ``T`` steps on any Backend, logged step by step.

Layout of an experiment directory::

    config.json                the experiment's full config, seed, git revision and versions
    experiment.jsonl           one JSON line per *finished* step (appended and fsynced as it ends)
    runs/step-KKK/cand-R/      the run directories of step K (R = repeat); ref-R/ for paired
                               reference runs; *.void-N for voided runs kept for inspection
    best-scheduler-config.yaml the applied profile as a KubeSchedulerConfiguration
    summary.json, summary.md, tuning-curve.png

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
leaves a cluster on a profile worse than the default.
"""

from __future__ import annotations

import json
import logging
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
BEST_CONFIG_NAME = "best-scheduler-config.yaml"
DETERMINISTIC_BACKENDS = ("sim",)


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
        if self.steps < 1:
            raise AgentError(f"steps must be >= 1, got {self.steps}")
        if self.repeats < 1:
            raise AgentError(f"repeats must be >= 1, got {self.repeats}")
        if self.metric not in ("mean", "p50", "p95", "p99"):
            raise AgentError(f"unknown metric {self.metric!r}; valid: mean, p50, p95, p99")
        if self.reward not in REWARDS:
            raise AgentError(f"unknown reward {self.reward!r}; valid: {list(REWARDS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, file: Path | None = None) -> ExperimentConfig:
        data = dict(data)
        data.pop("provenance", None)
        health = HealthBounds(**data.pop("health", {}))
        try:
            return cls(**data, health=health)
        except TypeError as err:
            raise ExperimentLogError(f"not an experiment config: {err}", file=file) from err


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
    def from_json(cls, line: str, *, file: Path, row: int) -> StepRecord:
        try:
            return cls(**json.loads(line))
        except (json.JSONDecodeError, TypeError) as err:
            raise ExperimentLogError(f"not a step record: {err}", file=file, row=row) from err


def read_log(out_dir: Path) -> list[StepRecord]:
    """The finished steps of an experiment, in order; a torn last line (crash mid-write) is dropped."""
    path = out_dir / LOG_NAME
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    records: list[StepRecord] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(StepRecord.from_json(line, file=path, row=i))
        except ExperimentLogError:
            if i == len(lines):
                log.warning("%s: dropping the torn last line %d (interrupted while writing)", path, i)
                break
            raise
    for expected, rec in enumerate(records):
        if rec.step != expected:
            raise ExperimentLogError(f"step {rec.step} where step {expected} was expected", file=path, row=expected + 1)
    return records


def _append(out_dir: Path, record: StepRecord) -> None:
    path = out_dir / LOG_NAME
    with path.open("a") as f:
        f.write(json.dumps(asdict(record), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _timeout_s(summary: dict[str, Any]) -> float:
    """The client timeout failed requests count at: the replay's, else the default (30 s)."""
    replay = summary.get("backend_replay") or {}
    return float(replay.get("timeout_s") or summary.get("timeout_s") or DEFAULT_TIMEOUT_S)


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

    # -- setup and resume ---------------------------------------------------------------------------
    def _prepare(self, resume: bool) -> None:
        cfg_path = self.out_dir / CONFIG_NAME
        if resume:
            if not cfg_path.exists():
                raise ExperimentLogError("no experiment to resume here", file=cfg_path)
            saved = ExperimentConfig.from_dict(json.loads(cfg_path.read_text()), file=cfg_path)
            if saved != self.config:
                raise ExperimentLogError(
                    "the experiment config differs from the one being resumed", file=cfg_path, field="config"
                )
            self.records = read_log(self.out_dir)
            for rec in self.records:
                if rec.step > 0:
                    self.tuner.suggest()
                self.tuner.tell(np.asarray(rec.action, dtype=np.float32), rec.metric)
            log.info("resuming %s after %d finished step(s)", self.out_dir, len(self.records))
        else:
            if (self.out_dir / LOG_NAME).exists() and read_log(self.out_dir):
                raise AgentError(f"{self.out_dir} already holds an experiment; use --resume or another --out")
            self.out_dir.mkdir(parents=True, exist_ok=True)
            data = self.config.to_dict()
            data["provenance"] = provenance()
            cfg_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    # -- one measured run ---------------------------------------------------------------------------
    def _measure(self, setting: WeightSetting, run_dir: Path, seed: int) -> tuple[float, list[dict[str, str]]]:
        profile = setting.to_profile()
        voided: list[dict[str, str]] = []
        for attempt in range(self.config.max_reruns + 1):
            if run_dir.exists():
                shutil.rmtree(run_dir)
            self.backend.reset()
            self.backend.apply(profile)
            result = self.backend.run(self.workload, run_dir, seed=seed)
            reason = run_health(result.summary, self.config.health)
            if reason is None:
                return metric_from_requests(result.requests, self.config.metric, _timeout_s(result.summary)), voided
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
        self._prepare(resume)
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
            saved = json.loads(path.read_text())
            if saved.get("best_step") == best.step and len(saved.get("samples", [])) == self.config.confirm:
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
        path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        log.info("confirmation of step %d: %+.2f %% [%s, %s] -> %s", best.step, interval.mean, interval.low,
                 interval.high, result["verdict"])
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
        (self.out_dir / BEST_CONFIG_NAME).write_text(dump_config_yaml(config_for_profile(profile)))
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
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        (self.out_dir / "summary.md").write_text(summary_markdown(summary, records))
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


def summary_markdown(summary: dict[str, Any], records: list[StepRecord]) -> str:
    lines = [
        f"# Tuning experiment: {summary['method']} on {summary['backend']}",
        "",
        f"- cluster: `{summary['cluster']}`, workload: `{summary['workload']}`, metric: {summary['metric']} latency",
        f"- reference (default weights): {summary['reference_metric']:.4f} s; best: {summary['best_metric']:.4f} s "
        f"at step {summary['best_step']} ({summary['improvement_pct']:+.2f} %, {summary['verdict']})",
        f"- applied and exported: step {summary['applied_step']} (`{BEST_CONFIG_NAME}`)",
        *([f"- confirmation ({len(c['samples'])} paired reruns of step {c['best_step']}): {c['improvement_pct']:+.2f} % "
           f"[{c['ci_low']}, {c['ci_high']}] -> {c['verdict']}"] if (c := summary.get("confirmation")) else []),
        "",
        "| step | profile | latency (s) | vs reference | 95 % CI | verdict |",
        "|---:|---|---:|---:|---|---|",
    ]
    for r in records:
        ci = "" if r.ci_low is None else f"[{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
        lines.append(f"| {r.step} | `{r.label}` | {r.metric:.4f} | {r.improvement_pct:+.2f} % | {ci} | {r.verdict} |")
    return "\n".join(lines) + "\n"


def plot_tuning_curve(records: list[StepRecord], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r.step for r in records]
    metrics = [r.metric for r in records]
    best = np.minimum.accumulate(metrics)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.axhline(records[0].metric, color="grey", linestyle="--", label="reference (default weights)")
    ax.plot(steps, metrics, "o", color="tab:blue", alpha=0.6, label="run")
    ax.step(steps, best, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("step")
    ax.set_ylabel("latency (s)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
