"""The paper's table on the embedded lab (``scoretune lab-table``): real processes, real Locust.

For every lab scenario (a lab cluster under the lab workload of ``duration`` seconds), method and
seed, one live tuning experiment (as ``scoretune tune --backend local`` runs it, ``T`` steps) whose best
profile is confirmed by ``confirm`` paired reruns against the default weights on fresh seeds; the
experiment applies it only when the paired interval is above zero, else it applies the default
weights. Each experiment is built by :func:`agent.loop.session.open_session`, the library call
``tune`` makes, and starts its own lab (nothing shared); one that finished (``summary.json``) is
kept, one that was interrupted is resumed (as ``tune --resume`` does), so the table can be built
over several sittings.

Per experiment, the figure is the improvement **the user gets**: the confirmed paired improvement
of the applied profile, 0 when the default weights are applied. ``default`` needs no experiment: it
is the reference every experiment measures (0 by definition). Per scenario and method: the mean
over seeds with a 95 % Student-t interval over the pooled confirmation pairs of those seeds (the
reference-applied seeds contribute zeros); over all scenarios, the same over every pair. The
shipped tuner against GP-BO, per scenario and seed: the relative latency of the applied profiles,
``100 (1 - (1 - i_p) / (1 - i_gp))`` from the applied improvements ``i`` (at gains of 50-80 % a
few points of improvement are tens of percent of latency); over all scenarios, a 95 % interval
over those (scenario, seed) values.

The table by budget (``budget.md``) reads each experiment's log: the best improvement measured in
its first ``T`` runs (0 when none beat the reference), the mean over seeds.
These are single unreplicated runs, the best of ``T`` of them (a winner's curse that grows with
``T``), so the fair yardstick for a short budget is GP-BO's *confirmed* gain at the full budget:
the last lines give each method's mean at ``T`` as a share of it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent.errors import AgentError, InputError
from agent.formatting import format_ci, md_cell
from agent.stats import mean_ci
from functions.atomic import write_atomic
from functions.errors import ScoretuneError
from functions.platform import DEFAULT_PLATFORM, Platform

log = logging.getLogger(__name__)

LAB_SCENARIOS = ("lab-small", "lab-taints", "lab-packing")


@dataclass(frozen=True)
class LabMethod:
    """A method of the lab table: a baseline or learned tuner's name, or a policy file (``NAME=FILE``)."""

    name: str
    policy: str | None = None

    @classmethod
    def parse(cls, text: str, shipped: Path) -> LabMethod:
        name, sep, file = text.partition("=")
        if sep:
            if not name or not file:
                raise AgentError(f"--methods {text!r}: expected NAME or NAME=POLICY_FILE")
            if not Path(file).is_file():
                raise InputError("policy file does not exist", file=file)
            return cls(name, file)
        if text == "policy":
            return cls("policy", str(shipped))
        from agent.tuners.factory import BASELINES, LEARNED, TRANSFER_BASELINES

        valid = (*BASELINES, *TRANSFER_BASELINES, *LEARNED)
        if text not in valid:
            raise AgentError(f"--methods: {text!r} is not a baseline or learned tuner ({', '.join(valid)}), "
                             "'policy' or NAME=FILE")
        return cls(text)

    def config_fields(self) -> dict[str, Any]:
        """The method as an experiment's config takes it: a tuner's name, or a policy file with
        the act mode its config names (as ``tune --policy FILE`` does)."""
        if not self.policy:
            return {"method": self.name, "policy": None}
        from agent.rl.artefacts import policy_method

        return {"method": policy_method(Path(self.policy)), "policy": str(self.policy)}


def experiment_dir(out: Path, scenario: str, method: str, seed: int) -> Path:
    return out / "runs" / f"{scenario}--{method}--seed{seed}"


def workload_path(out: Path, seed: int, duration_s: float) -> Path:
    """The lab workload of ``seed`` as a Parquet file (written once; every method replays it)."""
    from loadgen.workload import write_workload
    from testbed.scenarios import lab_workload

    path = out / "workloads" / f"lab-{duration_s:g}s-seed{seed}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_workload(lab_workload(seed, duration_s=duration_s), path)
    return path


def run_experiments(out: Path, scenarios: Sequence[str], methods: Sequence[LabMethod], seeds: Sequence[int], *,
                    steps: int, confirm: int, duration_s: float, backend: str = "local", confirm_mde: float = 0.0,
                    anchor_every: int = 0, platform: Platform = DEFAULT_PLATFORM, runtime: str = "process",
                    on_step: Callable[[Any, list[Any]], None] | None = None) -> None:
    """Every (scenario, method, seed) experiment not finished yet, in order, each built by
    :func:`agent.loop.session.open_session` as ``scoretune tune`` builds one (``backend``:
    ``local``, the embedded lab, a lab per experiment; ``sim`` rehearses the same table on the
    simulator; ``platform``: what serves the functions there, Knative or OpenWhisk). An
    interrupted experiment is resumed; ``on_step`` sees every step's record as ``tune`` shows it.
    ``confirm_mde`` > 0 sizes each confirmation to the noise (``tune --confirm-mde``), ``confirm``
    pairs at most; ``anchor_every`` > 0 runs the reference every that many steps (``tune
    --anchor-every``, :mod:`agent.loop.anchors`)."""
    from agent.loop.config import ExperimentConfig
    from agent.loop.session import open_session

    for seed in seeds:
        wl = workload_path(out, seed, duration_s)
        for scenario in scenarios:
            for method in methods:
                d = experiment_dir(out, scenario, method.name, seed)
                if (d / "summary.json").exists():
                    log.info("%s: finished, kept", d)
                    continue
                resume = (d / "experiment.jsonl").exists()
                if resume:
                    config = ExperimentConfig.load(d)
                else:
                    config = ExperimentConfig(
                        backend=backend, platform=platform, runtime=runtime, cluster=scenario, workload=str(wl), steps=steps,
                        confirm=confirm, confirm_mde=confirm_mde, anchor_every=anchor_every, seed=seed,
                        **method.config_fields(),
                    ).with_absolute_paths()
                log.info("lab table: %s %s on %s, seed %d -> %s", "resuming" if resume else "running",
                         method.name, scenario, seed, d)
                try:
                    open_session(config, d).run(resume=resume, on_step=on_step)
                except (ScoretuneError, OSError) as err:
                    raise AgentError(f"{d}: the experiment stopped ({err}); rerun the same command to resume it") from None


def experiment_row(directory: Path) -> dict[str, Any]:
    """One finished experiment: what it applied and the confirmed improvement the user gets."""
    path = directory / "summary.json"
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
        cfg = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"not a finished tune experiment ({type(err).__name__})", file=path) from None
    conf = s.get("confirmation") or {}
    applied = int(s.get("applied_step") or 0) > 0
    refs = [float(x) for x in conf.get("reference_samples", [])]
    cands = [float(x) for x in conf.get("samples", [])]
    pairs = [100.0 * (r - c) / r for r, c in zip(refs, cands, strict=True)]
    if applied and not pairs:  # an improvement judged on repeats within the step (tune --repeats)
        pairs = [float(s["improvement_pct"])]
    return {
        "scenario": s.get("cluster"), "seed": int(cfg.get("seed", 0)), "applied": applied,
        "reference_s": float(s["reference_metric"]), "best_s": float(s["best_metric"]),
        "best_step": int(s.get("best_step") or 0), "unreplicated_pct": float(s["improvement_pct"]),
        "confirmed_pct": float(np.mean(pairs)) if pairs else 0.0,
        "applied_pct": float(np.mean(pairs)) if applied else 0.0,
        "pairs": pairs,
        "verdict": s.get("verdict"), "applied_label": s.get("applied_label"),
        "platform": str(cfg.get("platform") or "knative"), "runtime": str(cfg.get("runtime") or "process"),
    }


def experiment_starts(directory: Path, best_step: int) -> dict[str, float | None]:
    """What SeBS reports beside the tuned metric, for the reference and the best profile: the
    share of requests that met a cold start and the median cold and warm latency
    (``summary.by_start``), each the median over the experiment's confirmation runs of that arm,
    or over the step's own runs where nothing was confirmed. None where the runs predate
    ``by_start`` or had no such request."""
    import re

    def scored(folder: Path, arm: str) -> list[Path]:  # not the runs kept aside as void (arm-R.void-K)
        return sorted(p / "summary.json" for p in folder.glob(f"{arm}-*")
                      if re.fullmatch(rf"{arm}-\d+", p.name) and (p / "summary.json").is_file())

    runs = directory / "runs"
    arms = {"ref": scored(runs / "confirm", "ref"), "cand": scored(runs / "confirm", "cand")}
    if not arms["cand"]:
        arms = {"ref": scored(runs / "step-000", "cand"), "cand": scored(runs / f"step-{best_step:03d}", "cand")}
    out: dict[str, float | None] = {}
    for arm, paths in arms.items():
        starts = []
        for path in paths:
            try:
                b = json.loads(path.read_text(encoding="utf-8")).get("by_start")
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise InputError(f"not a run summary ({type(err).__name__})", file=path) from None
            if isinstance(b, dict) and "cold" in b and "warm" in b:
                starts.append(b)

        def med(values: list[Any]) -> float | None:
            v = [float(x) for x in values if x is not None]
            return float(np.median(v)) if v else None

        total = [b["cold"]["count"] + b["warm"]["count"] for b in starts]
        out[f"{arm}_cold_share"] = med([b["cold"]["count"] / t for b, t in zip(starts, total, strict=True) if t])
        out[f"{arm}_cold_p50_s"] = med([b["cold"]["p50_s"] for b in starts])
        out[f"{arm}_warm_p50_s"] = med([b["warm"]["p50_s"] for b in starts])
    return out


def experiment_curve(directory: Path) -> list[float]:
    """The improvement (%) each step after the reference measured, in order (a voided run is rerun
    within its step, so every step has one)."""
    path = directory / "experiment.jsonl"
    curve: list[float] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        for line in lines:
            record = json.loads(line)
            if int(record.get("step", 0)) == 0:
                continue
            curve.append(float(record["improvement_pct"]))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise InputError(f"not a tune experiment log ({type(err).__name__})", file=path) from None
    return curve


def best_by(curve: Sequence[float], budget: int) -> float:
    """The best improvement measured in the first ``budget`` runs, 0 (the reference) if none beat it."""
    return max([0.0, *curve[:budget]])


def collect(out: Path, scenarios: Sequence[str], methods: Sequence[str], seeds: Sequence[int]) -> pd.DataFrame:
    rows = []
    for scenario in scenarios:
        for method in methods:
            for seed in seeds:
                d = experiment_dir(out, scenario, method, seed)
                if not (d / "summary.json").exists():
                    raise AgentError(f"{d}: not finished; run `scoretune lab-table` without --report-only first")
                row = experiment_row(d)
                rows.append({**row, **experiment_starts(d, row["best_step"]), "scenario": scenario, "method": method,
                             "curve": experiment_curve(d)})
    return pd.DataFrame(rows)


def _ci(values: Sequence[float]) -> str:
    ci = mean_ci(np.asarray(values, dtype=float))
    return format_ci(ci.mean, ci.low, ci.high)


UNCONFIRMED_NOTE = ("Each experiment counts once: its applied improvement, the mean of its confirmation pairs, or "
                    "+0.0 when its best profile was not confirmed (the default weights stay). Intervals are 95 % "
                    "Student-t over experiments (seeds, and scenarios in the last row); one experiment shows the "
                    "interval over its own confirmation pairs, marked \"pairs\".")
"""How the lab table counts: the reader is told in the table's own file (issue 44, item 6)."""


def _experiments_cell(gm: pd.DataFrame) -> str:
    """Applied improvement over experiments, each weighing the same; with one experiment, its pairs."""
    if len(gm) == 1:
        row = gm.iloc[0]
        if row["applied"] and len(row["pairs"]) > 1:
            ci = mean_ci(np.asarray(row["pairs"], dtype=float))
            return f"{format_ci(row['applied_pct'], ci.low, ci.high)} pairs"
        return f"{row['applied_pct']:+.1f}"
    return _ci(gm["applied_pct"].tolist())


def lab_markdown(frame: pd.DataFrame, shipped: str, baseline: str = "gp") -> str:
    """Per scenario and method: the applied improvement (%) with every experiment (seed) weighing the
    same -- an unconfirmed experiment is one +0.0, not as many zeros as it ran pairs, and a confirmed
    one is its pairs' mean, not its pairs pooled -- then the shipped method against the baseline."""
    methods = list(dict.fromkeys(frame["method"]))
    lines = ["| scenario | default | " + " | ".join(md_cell(m) for m in methods)
             + f" | {md_cell(shipped)} vs {md_cell(baseline)} (%) |",
             "|---|---:|" + "---:|" * len(methods) + "---:|"]
    over_all: list[float] = []
    for scenario, g in frame.groupby("scenario", sort=False):
        cells = []
        for m in methods:
            gm = g[g["method"] == m]
            applied = ", ".join(f"{v:+.1f}" for v in gm["applied_pct"])
            cells.append(f"{_experiments_cell(gm)} (seeds: {applied})")
        over = []
        if shipped in methods and baseline in methods:
            p = g[g["method"] == shipped].set_index("seed")["applied_pct"]
            b = g[g["method"] == baseline].set_index("seed")["applied_pct"]
            over = [100.0 * (1.0 - (1.0 - p[s] / 100.0) / (1.0 - b[s] / 100.0)) for s in p.index if s in b.index]
            over_all += over
        versus = (f"{np.mean(over):+.1f} (seeds: {', '.join(f'{v:+.1f}' for v in over)})" if over else "–")
        lines.append(f"| {md_cell(str(scenario))} | +0.0 | " + " | ".join(cells) + f" | {versus} |")
    means = [f"{_ci(frame[frame['method'] == m]['applied_pct'].tolist())} (n = {int((frame['method'] == m).sum())})"
             for m in methods]
    lines.append("| **all scenarios** | +0.0 | " + " | ".join(means) + f" | {_ci(over_all) if over_all else '–'} |")
    return "\n".join(lines) + "\n\n" + UNCONFIRMED_NOTE + "\n"


BUDGETS = (1, 2, 3, 5, 10)


def budget_markdown(frame: pd.DataFrame, baseline: str = "gp", budgets: Sequence[int] = BUDGETS) -> str:
    """Per scenario and method, the best measured improvement within T runs (mean over seeds); then
    each method's mean over every experiment as a share of ``baseline``'s confirmed (applied) gain."""
    budgets = [t for t in budgets if t <= max(len(c) for c in frame["curve"])]
    methods = list(dict.fromkeys(frame["method"]))
    lines = ["| scenario | method | " + " | ".join(f"T = {t}" for t in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for (scenario, method), g in frame.groupby(["scenario", "method"], sort=False):
        cells = [f"{np.mean([best_by(c, t) for c in g['curve']]):+.1f}" for t in budgets]
        lines.append(f"| {md_cell(str(scenario))} | {md_cell(str(method))} | " + " | ".join(cells) + " |")
    for method in methods:
        g = frame[frame["method"] == method]
        cells = [f"{np.mean([best_by(c, t) for c in g['curve']]):+.1f}" for t in budgets]
        lines.append(f"| **all scenarios** | {md_cell(method)} | " + " | ".join(cells) + " |")
    yardstick = float(frame[frame["method"] == baseline]["applied_pct"].mean()) if baseline in methods else 0.0
    if baseline in methods and yardstick <= 0:  # no share of nothing: say so instead of a column of nan
        lines += ["", f"{baseline} applied no gain over its experiments ({yardstick:+.1f} %), so no method's best "
                  "measured improvement is shown as a share of it."]
    elif baseline in methods:
        lines += ["", f"As a share of {baseline}'s confirmed gain at the full budget ({yardstick:+.1f} %, the "
                  "mean applied improvement over its experiments):", "",
                  "| method | " + " | ".join(f"T = {t}" for t in budgets) + " |", "|---|" + "---:|" * len(budgets)]
        for method in methods:
            g = frame[frame["method"] == method]
            shares = [100.0 * np.mean([best_by(c, t) for c in g["curve"]]) / yardstick if yardstick > 0 else float("nan")
                      for t in budgets]
            lines.append(f"| {md_cell(method)} | " + " | ".join(f"{v:.0f} %" for v in shares) + " |")
    return "\n".join(lines) + "\n"


def starts_markdown(frame: pd.DataFrame) -> str:
    """Per scenario and method, SeBS's figures of the reference and of the best profile (medians
    over experiments of :func:`experiment_starts`): a gain in the mean is read with whether it came
    from fewer cold starts or from faster warm requests."""
    def cell(g: pd.DataFrame, col: str, pct: bool = False) -> str:
        v = [float(x) for x in g[col] if x is not None and np.isfinite(x)] if col in g else []
        if not v:
            return "–"
        m = float(np.median(v))
        return f"{100 * m:.0f} %" if pct else f"{m:.2f}"

    lines = ["| scenario | method | cold share ref | cold share best | cold p50 ref (s) | cold p50 best (s) | "
             "warm p50 ref (s) | warm p50 best (s) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (scenario, method), g in frame.groupby(["scenario", "method"], sort=False):
        lines.append(f"| {md_cell(str(scenario))} | {md_cell(str(method))} | {cell(g, 'ref_cold_share', True)} | "
                     f"{cell(g, 'cand_cold_share', True)} | {cell(g, 'ref_cold_p50_s')} | {cell(g, 'cand_cold_p50_s')} | "
                     f"{cell(g, 'ref_warm_p50_s')} | {cell(g, 'cand_warm_p50_s')} |")
    return ("\n".join(lines) + "\n\nMedians over experiments; each experiment's figure is the median over its "
            "confirmation runs of that arm (or its step's runs where nothing was confirmed). Cold: requests that met a "
            "cold start (SeBS measures them apart).\n")


def write_report(out: Path, frame: pd.DataFrame, shipped: str, config: dict[str, Any]) -> Path:
    flat = frame.copy()
    flat["pairs"] = flat["pairs"].map(json.dumps)
    if "curve" in flat:
        flat["curve"] = flat["curve"].map(json.dumps)
        write_atomic(out / "budget.md", budget_markdown(frame))
    write_atomic(out / "results.csv", flat.to_csv(index=False))
    write_atomic(out / "table.md", lab_markdown(frame, shipped))
    write_atomic(out / "starts.md", starts_markdown(frame))
    write_atomic(out / "lab-table.json", json.dumps(config, indent=2, sort_keys=True, default=str) + "\n")
    return out / "table.md"
