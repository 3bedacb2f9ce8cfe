"""The experiment log ``experiment.jsonl``: one JSON line per finished step, read, repaired, appended.

A step is appended (and fsynced) only once it ended, so the log never holds half a step; a crash
mid-write leaves a torn last line, which :func:`read_log` leaves out and :func:`repair_log` cuts from
the file before a resume appends (else the next record would fuse with it).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.actions import WeightSetting
from agent.errors import ExperimentLogError
from agent.loop.config import LOG_NAME
from functions.atomic import fsync_dir

log = logging.getLogger(__name__)

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
    seconds: dict[str, float] = field(default_factory=dict)
    """Where the step's wall time went: ``prepare`` (reset and apply), ``run`` (the replays), and
    ``overhead`` (the rest: writing, the tuner); absent in logs of earlier versions."""
    facts: dict[str, float] = field(default_factory=dict)
    """The mean facts of the step's candidate runs (agent.metrics.RUN_FACTS), what a tuner that
    reads them was told with the metric; absent in logs of earlier versions."""

    anchor: float | None = None
    """The latency of the reference run this step made beside its candidate (an anchor,
    ``agent.loop.anchors``), or None."""
    drift: float | None = None
    """How far the reference had moved from step 0 when this step ran (its anchor's, or the last
    anchor's ratio); None in experiments without anchors."""

    def corrected(self) -> float:
        """The step's latency as the tuner was told it: divided by the drift when the experiment
        runs anchors, else as measured."""
        return self.metric / self.drift if self.drift else self.metric

    def weight_setting(self) -> WeightSetting:
        """The logged profile as a :class:`~agent.actions.WeightSetting`."""
        shape = self.setting["shape"]
        return WeightSetting(weights=self.setting["weights"], strategy=self.setting["strategy"],
                             shape=tuple(tuple(p) for p in shape) if shape else None)

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


def append_record(out_dir: Path, record: StepRecord) -> None:
    path = out_dir / LOG_NAME
    with path.open("a") as f:
        f.write(json.dumps(asdict(record), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(out_dir)



def step_where(out_dir: Path, record: StepRecord) -> dict[str, Any] | None:
    """The per-node breakdown (``loadgen.where``) of a step's first candidate run, from its
    summary.json -- recomputed from the run's tables when the summary's section is of an older
    version (a version-1 lab run counted no pulls) -- or None when the run has neither (a resume
    replays it from the same files)."""
    from loadgen.errors import InputError
    from loadgen.results import read_run, run_where
    from loadgen.where import current_where

    for rel in record.run_dirs:
        if Path(rel).name.startswith("cand-"):
            try:
                summary = json.loads((out_dir / rel / "summary.json").read_text())
            except (OSError, ValueError):
                return None
            where = current_where(summary)
            if where is not None:
                return where
            try:
                run = read_run(out_dir / rel)
            except InputError:  # the tables are gone (a copied experiment keeps only summaries)
                old = summary.get("where") if isinstance(summary, dict) else None
                return old if isinstance(old, dict) else None
            return run_where(run)
    return None
