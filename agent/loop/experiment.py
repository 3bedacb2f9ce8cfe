"""The live tuning experiment: ``T`` steps on any Backend, logged step by step, resumable.

Each step applies a profile, replays the workload and measures latency; the tuner is driven by
:func:`agent.tuners.drive.drive`, the loop the in-memory evaluation runs too. Resume
(``resume=True``) reads ``config.json`` and the log, hands the logged steps to the loop as told
(one ``suggest`` and one ``tell`` each, so the tuner's state is rebuilt exactly), and continues with
the first step not in the log; a step interrupted half-way is rerun; no finished step is repeated or lost.

Noise: each step runs its profile ``repeats`` times. With ``repeats > 1`` every candidate run is
paired with a reference run made right before it (same seed), and the step's improvement is a
paired Student-t interval (agent.stats). A run whose load generator was unhealthy (dispatch lag
beyond a bound, or a failed run), or a step the lab could not prepare (testbed.errors.LabFault,
retried after ``fault_wait_s``), is void: retried up to ``max_reruns`` times, never scored.

The profile applied at the end is the tuner's own choice (:func:`agent.tuners.applied.applied_setting`,
the rule the evaluation scores: the lowest mean measurement, or the tuner's recommendation),
applied only when it beats the reference beyond the noise: with ``confirm = N`` (``make tune``
uses 3) a candidate measured unreplicated is judged in N randomized interleaved pairs against the
reference (:mod:`agent.loop.confirmation`: a seeded order per pair, one seed per pair, a void
voids its pair), and only a significant paired improvement counts (``confirmation.json``, with the
verdict's minimum detectable effect); otherwise the reference is applied. Every run's host probe
is held to the experiment's first (:mod:`agent.loop.hostcheck`). An experiment that stops early (any exception, SIGINT, SIGTERM)
re-applies the reference, or the applied profile once ``finish`` applied it, on every backend
(:func:`testbed.backend.restoring`) and records what it did in ``restore.json``.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError, ExperimentLogError
from agent.formatting import format_ci
from agent.loop.anchors import ANCHOR_DIR, anchor_due, anchor_first, drift_of
from agent.loop.config import (
    BEST_CONFIG_NAME,
    CONFIG_NAME,
    DETERMINISTIC_BACKENDS,
    LOG_NAME,
    RESTORE_NAME,
    ExperimentConfig,
    resume_conflicts,
)
from agent.loop.confirmation import confirm_profile, finished
from agent.loop.hostcheck import check_host
from agent.loop.log import StepRecord, append_record, read_log, repair_log, step_where
from agent.loop.outcome import Outcome, Scored, Void
from agent.loop.report import experiment_summary, plot_tuning_curve, summary_markdown
from agent.metrics import mean_facts, metric_from_requests, run_facts, run_timeout_s
from agent.provenance import provenance
from agent.rl.rewards import percent_improvement, reward
from agent.stats import (
    IMPROVEMENT,
    paired_improvement,
    run_health,
    verdict,
    welch_improvement,
)
from agent.tuners.applied import applied_setting, measured
from agent.tuners.drive import Measured, drive, wants_where
from agent.tuners.protocol import Tuner
from functions.atomic import write_atomic
from testbed.errors import LabFault

log = logging.getLogger(__name__)
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
        self._seconds: dict[str, float] = {}
        self._last_end: float | None = None
        """Wall time of the current step (or confirmation) by phase (:attr:`StepRecord.seconds`)."""
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
    def attempt(self, setting: WeightSetting, run_dir: Path, seed: int) -> Outcome:
        """One attempt at a scored run: :class:`Scored`, or a :class:`Void` for a run the lab
        could not prepare (``LabFault``) or the load generator could not drive (its directory is
        left for the caller to keep as void). A host that drifted raises :class:`HostDrift`."""
        profile = setting.to_profile()
        add = lambda key, t: self._seconds.__setitem__(key, self._seconds.get(key, 0.0) + t)  # noqa: E731
        if run_dir.exists():
            shutil.rmtree(run_dir)
        t0 = time.monotonic()
        try:
            self.backend.reset()
            self.backend.apply(profile)
        except LabFault as err:  # the lab, not the profile (a node, a cache, a rollout): void, wait, retry
            add("prepare", time.monotonic() - t0)
            log.warning("void attempt (%s); retrying in %.0f s", err, self.config.fault_wait_s)
            time.sleep(self.config.fault_wait_s)
            return Void(str(err), stage="prepare")
        t1 = time.monotonic()
        # Any other ScoretuneError from the backend (a profile or cluster it cannot run:
        # ConfigError, InfeasibleClusterError) is the input's fault: it propagates at once.
        result = self.backend.run(self.workload, run_dir, seed=seed)
        add("prepare", t1 - t0)
        add("run", time.monotonic() - t1)
        check_host(self.out_dir, run_dir, result.summary, self.config.host_drift)
        reason = run_health(result.summary, self.config.health)
        if reason is None:
            metric = metric_from_requests(result.requests, self.config.metric, run_timeout_s(result.summary))
            return Scored(metric, run_facts(result.summary))
        if self.config.backend in DETERMINISTIC_BACKENDS:  # no load generator: a rerun fails the same way
            raise AgentError(
                f"{run_dir}: the {self.config.backend} run cannot be scored ({reason}); it is deterministic, "
                f"so a rerun would fail the same way: check the cluster ({self.config.cluster or 'none'}) "
                f"and the workload ({self.config.workload})")
        return Void(reason)

    def _measure(self, setting: WeightSetting, run_dir: Path, seed: int
                 ) -> tuple[float, dict[str, float], list[dict[str, str]]]:
        """One scored run: its metric, its facts (agent.metrics.run_facts) and the void attempts."""
        voided: list[dict[str, str]] = []
        for attempt in range(self.config.max_reruns + 1):
            got = self.attempt(setting, run_dir, seed)
            if isinstance(got, Scored):
                return got.metric, got.facts, voided
            reason = got.reason
            if got.stage == "prepare":
                voided.append({"stage": "prepare", "reason": reason})
                continue
            void_dir = run_dir.with_name(f"{run_dir.name}.void-{attempt + 1}")
            shutil.rmtree(void_dir, ignore_errors=True)
            run_dir.rename(void_dir)
            voided.append({"run_dir": str(void_dir.relative_to(self.out_dir)), "reason": reason})
            log.warning("void run %s (%s); rerunning", void_dir, reason)
        raise AgentError(f"{run_dir}: {self.config.max_reruns + 1} attempts in a row were void (last: "
                         f"{voided[-1]['reason']}); the load generator or the lab is unhealthy")

    def _run_step(self, step: int, action: np.ndarray) -> StepRecord:
        setting = self.codec.decode(action)
        step_dir = self.out_dir / "runs" / f"step-{step:03d}"
        if step_dir.exists():  # an interrupted attempt at this step: start it over
            shutil.rmtree(step_dir)
        started = time.monotonic()
        tuner_s = started - self._last_end if self._last_end is not None else 0.0
        self._seconds = {}
        if self.on_start:
            self.on_start(step, setting)
        samples: list[float] = []
        facts: list[dict[str, float]] = []
        ref_samples: list[float] = []
        run_dirs: list[str] = []
        voided: list[dict[str, str]] = []
        paired = step > 0 and self.config.repeats > 1
        anchor: float | None = None
        anchored = anchor_due(step, self.config.anchor_every)
        first = anchored and anchor_first(self.config.seed, step)

        def measure_anchor() -> float:
            m, _, v = self._measure(self.codec.reference(), step_dir / ANCHOR_DIR, self.config.seed)
            voided.extend(v)
            run_dirs.append(str((step_dir / ANCHOR_DIR).relative_to(self.out_dir)))
            return m

        for r in range(self.config.repeats):
            seed = self.config.seed + r
            if first:
                anchor = measure_anchor()
            if paired:
                m, _, v = self._measure(self.codec.reference(), step_dir / f"ref-{r}", seed)
                ref_samples.append(m)
                voided += v
                run_dirs.append(str((step_dir / f"ref-{r}").relative_to(self.out_dir)))
            m, f, v = self._measure(setting, step_dir / f"cand-{r}", seed)
            samples.append(m)
            facts.append(f)
            voided += v
            run_dirs.append(str((step_dir / f"cand-{r}").relative_to(self.out_dir)))
            if anchored and not first:
                anchor = measure_anchor()
        if step == 0:
            ref_samples = list(samples)
        elif not paired:
            ref_samples = list(self.records[0].samples)
        metric = float(np.mean(samples))
        drift = None
        if self.config.anchor_every:
            drift = 1.0 if step == 0 else drift_of(self.records[0].metric, anchor, self.records[-1].drift)
        told = metric / drift if drift else metric
        if paired or step == 0:
            interval = paired_improvement(ref_samples, samples)
        else:  # unpaired: the step's runs (drift taken out) against the step-0 reference runs
            interval = welch_improvement(ref_samples, [x / drift for x in samples] if drift else samples)
        deterministic = self.config.backend in DETERMINISTIC_BACKENDS
        history = [rec.corrected() for rec in self.records]
        return StepRecord(
            step=step,
            action=[float(x) for x in np.asarray(action, dtype=np.float64)],
            setting=setting.to_dict(),
            label=setting.label(),
            metric=metric,
            samples=samples,
            reference_samples=ref_samples,
            improvement_pct=percent_improvement(float(np.mean(ref_samples)), told),
            ci_low=interval.low,
            ci_high=interval.high,
            verdict="reference" if step == 0 else verdict(interval, deterministic=deterministic),
            reward=None if step == 0 else reward(self.config.reward, history, told),
            run_dirs=run_dirs,
            voided=voided,
            finished_at=time.time(),
            seconds=self._step_seconds(started, tuner_s),
            facts=mean_facts(facts),
            anchor=anchor,
            drift=drift,
        )

    def _step_seconds(self, started: float, tuner_s: float) -> dict[str, float]:
        """Where a step's time went (:attr:`StepRecord.seconds`)."""
        self._last_end = time.monotonic()
        seconds = {k: round(v, 3) for k, v in self._seconds.items()}
        seconds["tuner"] = round(tuner_s, 3)
        seconds["other"] = round(self._last_end - started - sum(self._seconds.values()), 3)
        return seconds

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
        reads = wants_where(self.tuner)  # the twin refits on each step's per-node breakdown
        where = lambda rec: step_where(self.out_dir, rec) if reads else None  # noqa: E731

        def measure(step: int, action: np.ndarray) -> Measured:
            record = self._run_step(step, np.asarray(action, dtype=np.float32))
            append_record(self.out_dir, record)
            self.records.append(record)
            log.debug("step %d/%d: %s -> %.4f s (%+.2f %%)", step, self.config.steps, record.label, record.metric,
                      record.improvement_pct)
            if self.on_step:
                self.on_step(record, self.records)
            return Measured(record.corrected(), record.facts, where(record))

        drive(self.tuner, self.codec, self.config.steps, measure,
              told=[(rec.action, Measured(rec.corrected(), rec.facts, where(rec))) for rec in self.records])
        return self.finish()

    def _confirm(self, best: StepRecord) -> dict[str, Any]:
        """Judge the best profile against the reference in ``confirm`` randomized interleaved pairs
        (:mod:`agent.loop.confirmation`), kept in ``confirmation.json``; a finished confirmation is
        reused on resume, an interrupted one is redone."""
        path = self.out_dir / "confirmation.json"
        if path.exists():
            try:
                saved = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                saved = None  # written atomically, so only a hand-edited file; redo it
            if (isinstance(saved, dict) and saved.get("best_step") == best.step
                    and finished(saved, self.config.confirm, self.config.confirm_mde)):
                return saved
        confirm_dir = self.out_dir / "runs" / "confirm"
        if confirm_dir.exists():
            shutil.rmtree(confirm_dir)
        self._seconds = {}
        result = confirm_profile(self.attempt, best.weight_setting(), self.codec.reference(), self.config.confirm,
                                 confirm_dir, seed=self.config.seed + 1000, max_reruns=self.config.max_reruns,
                                 mde_target=self.config.confirm_mde or None,
                                 on_pair=(lambda r, first: self.on_start(self.config.steps + 1 + r, best.weight_setting()))
                                 if self.on_start else None)
        result = {"best_step": best.step, **result, "seconds": {k: round(v, 3) for k, v in self._seconds.items()}}
        write_atomic(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
        log.info("confirmation of step %d: %s -> %s (minimum detectable effect %s)", best.step,
                 format_ci(result["improvement_pct"], result["ci_low"], result["ci_high"], unit=" %"), result["verdict"],
                 "n/a" if result["mde_pct"] is None else f"{result['mde_pct']:.1f} %")
        return result

    def _candidate(self) -> tuple[StepRecord, float]:
        """The profile the tuner would apply (the evaluation's rule) as its best logged step, and
        the mean of its measurements (the figure the rule chose it by)."""
        settings = [r.weight_setting() for r in self.records]
        metrics = [r.corrected() for r in self.records]
        chosen = applied_setting(self.tuner, settings, metrics).label()
        mean = measured(settings, metrics)[chosen][1]
        best = min((r for r, s in zip(self.records, settings, strict=True) if s.label() == chosen),
                   key=lambda r: (r.corrected(), r.step))
        return best, mean

    def finish(self) -> dict[str, Any]:
        """Apply and export the best profile; write summary.json, summary.md, tuning-curve.png."""
        from testbed.scheduler.config import config_for_profile, dump_config_yaml

        records = self.records
        if len(records) < self.config.steps + 1:
            raise AgentError(f"the experiment has {len(records) - 1} of {self.config.steps} steps; resume it first")
        ref = records[0]
        best, best_metric = self._candidate()
        deterministic = self.config.backend in DETERMINISTIC_BACKENDS
        confirmation = None
        if (self.config.confirm > 0 and not deterministic and best.step > 0 and best_metric < ref.metric
                and best.verdict != IMPROVEMENT):
            confirmation = self._confirm(best)
        # Apply the best only when it beats the reference beyond the noise.
        trusted = best.step > 0 and best_metric < ref.metric and (
            best.verdict == IMPROVEMENT
            or (confirmation is not None and confirmation["verdict"] == IMPROVEMENT)
            or (self.config.repeats == 1 and deterministic)
        )
        applied = best if trusted else ref
        profile = applied.weight_setting().to_profile()
        self.backend.apply(profile)
        self._applied = profile
        write_atomic(self.out_dir / BEST_CONFIG_NAME, dump_config_yaml(config_for_profile(profile)))
        if confirmation is not None:
            call = confirmation["verdict"]
        elif best.verdict == IMPROVEMENT or (deterministic and best.step > 0 and best_metric < ref.metric):
            call = IMPROVEMENT
        elif best.step == 0:
            call = "no improvement found"
        else:
            call = best.verdict
        summary = experiment_summary(self.config, records, best, best_metric, applied, confirmation, call)
        write_atomic(self.out_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        write_atomic(self.out_dir / "summary.md", summary_markdown(summary, records))
        plot_tuning_curve(records, self.out_dir / "tuning-curve.png", title=f"{self.config.method} on {self.config.backend}")
        return summary

