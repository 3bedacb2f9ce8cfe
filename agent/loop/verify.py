"""Verdicts outside a tuning run: a saved profile re-confirmed in a later session
(``scoretune confirm``), and the protocol's own error rate measured by A/A confirmations
(``scoretune calibrate --aa``). Both run :mod:`agent.loop.confirmation`'s randomized interleaved
pairs through the same run attempt as the experiment (reset, apply, replay, the host check, the
void rule), so what they measure is the shipped protocol, not a copy of it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import AgentError
from agent.loop.config import ExperimentConfig
from agent.stats import IMPROVEMENT, NOT_CONFIRMED, REGRESSION, can_still_improve, mde_pct, pairs_for_mde
from functions.atomic import write_atomic

MDE_TARGET_PCT = 15.0
"""The smallest gain a confirmation should be able to see (the issue's target; the paper's
headline gain over the best baseline is 12 %)."""


def _experiment(config: ExperimentConfig, out: Path) -> Any:
    """A session of the reference tuner on ``config``'s backend and workload, and an Experiment
    over it whose run attempt the comparisons use (nothing is tuned)."""
    from agent.loop.experiment import Experiment
    from agent.loop.session import open_session

    session = open_session(dataclasses.replace(config, method="default", policy=None), out)
    return session, Experiment(session.config, session.backend, session.workload, session.tuner, out)


def reconfirm(exp_dir: Path, pairs: int, *, seed: int | None = None, out: Path | None = None,
              mde_target: float | None = None) -> dict[str, Any]:
    """Re-judge the profile an experiment in ``exp_dir`` applied (or, if it applied the reference,
    its best step) against the reference, in ``pairs`` new pairs (with ``mde_target``: as many as
    the noise needs, ``pairs`` at most); written to
    ``exp_dir/reconfirmations/<time>/reconfirmation.json`` (or ``out``)."""
    from agent.loop.log import read_log

    config = ExperimentConfig.load(exp_dir)
    path = Path(exp_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        records = {r.step: r for r in read_log(exp_dir)}
        candidate = records[int(summary["best_step"])].weight_setting()
    except FileNotFoundError:
        raise AgentError(f"{path}: the experiment has not finished (no summary.json): resume it first") from None
    except (ValueError, KeyError, TypeError) as err:
        raise AgentError(f"{path}: not an experiment summary ({err})") from None
    if summary.get("best_step") == 0:
        raise AgentError(f"{path}: the experiment's best profile is the reference itself; nothing to confirm")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(out) if out is not None else Path(exp_dir) / "reconfirmations" / stamp
    out.mkdir(parents=True, exist_ok=True)
    session, exp = _experiment(config, out)
    failed = True
    try:
        from agent.loop.confirmation import confirm_profile

        result = confirm_profile(exp.attempt, candidate, exp.codec.reference(), pairs, out / "runs",
                                 seed=(config.seed + 5000) if seed is None else seed, max_reruns=config.max_reruns,
                                 mde_target=mde_target)
        failed = False
    finally:
        session.close(failed=failed)
    result = {"experiment": str(exp_dir), "label": summary.get("best_label"), "first_verdict": summary.get("verdict"),
              "at": stamp, **result}
    write_atomic(out / "reconfirmation.json", json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result


def futility_verdict(refs: list[float], cands: list[float], verdict: str) -> str:
    """What the shipped protocol (futility stop on) would have said of these pairs, in their order."""
    d: list[float] = []
    for a, b in zip(refs, cands, strict=True):
        d.append(100.0 * (a - b) / a)
        if len(d) < len(refs) and not can_still_improve(d, len(refs)):
            return NOT_CONFIRMED
    return verdict


def aa_calibration(config: ExperimentConfig, out: Path, confirmations: int, pairs: int,
                   progress: Any = None, mde_target: float | None = None) -> dict[str, Any]:
    """``confirmations`` A/A confirmations (the reference against itself) of ``pairs`` pairs each,
    every pair run to the end (so the noise is measured on all of them); each confirmation's
    verdict is also given as the shipped protocol, with its futility stop, would have reached it.
    Returns and writes ``aa.json``: the false-confirmation rate (an "improvement" of a profile over
    itself), the paired noise and the minimum detectable effect, and the pairs a 15 % effect needs.
    With ``mde_target`` each confirmation is Stein's two-stage design (``pairs`` at most), whose
    own error rate this then measures; it never stops early, so its shipped verdict is its verdict."""
    from agent.loop.confirmation import run_pairs
    from agent.loop.outcome import Outcome

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    session, exp = _experiment(config, out)
    ref = exp.codec.reference()
    results: list[dict[str, Any]] = []
    failed = True
    try:
        def attempt(arm: str, run_dir: Path, s: int) -> Outcome:
            return exp.attempt(ref, run_dir, s)

        for i in range(confirmations):
            r = run_pairs(attempt, pairs, out / f"aa-{i:02d}", seed=config.seed + 1000 * (i + 1),
                          max_reruns=config.max_reruns, stop_for_futility=False, mde_target=mde_target)
            r["shipped_verdict"] = (r["verdict"] if r["design"]["kind"] == "two-stage"
                                    else futility_verdict(r["reference_samples"], r["samples"], r["verdict"]))
            results.append(r)
            write_atomic(out / f"aa-{i:02d}" / "confirmation.json", json.dumps(r, indent=2, sort_keys=True) + "\n")
            if progress is not None:
                progress(i, r)
        failed = False
    finally:
        session.close(failed=failed)
    return summarize_aa(config, results, out)


def aa_figures(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a set of A/A confirmations: what ``aa.json`` and the pooled report both give."""
    if not rs:
        return {"confirmations": 0}
    ref = [np.asarray(r["reference_samples"]) for r in rs]
    cand = [np.asarray(r["samples"]) for r in rs]
    d = np.concatenate([100.0 * (a - b) / a for a, b in zip(ref, cand, strict=True)])
    sd = float(np.std(d, ddof=1)) if d.size >= 2 else None
    pairs = int(np.median([r["pairs_planned"] for r in rs]))
    same_seed_cv = [abs(a - b) / np.sqrt(2) / ((a + b) / 2) for x, y in zip(ref, cand, strict=True)
                    for a, b in zip(x, y, strict=True)]
    within = [float(np.std(x, ddof=1) / np.mean(x)) for x in ref if x.size >= 2]
    runs = int(sum(r["runs_attempted"] for r in rs))
    voids = int(sum(len(r["voided"]) for r in rs))
    first = [_first_run_ratio(r) for r in rs]
    false_impr = int(sum(r["verdict"] == IMPROVEMENT for r in rs))
    return {
        "confirmations": len(rs), "pairs": pairs,
        "false_improvements": false_impr, "false_confirmation_rate": false_impr / len(rs),
        "false_improvements_shipped": int(sum(r.get("shipped_verdict", r["verdict"]) == IMPROVEMENT for r in rs)),
        "false_regressions": int(sum(r["verdict"] == REGRESSION for r in rs)),
        "paired_sd_pct": sd, "mde_pct": mde_pct(sd, pairs),
        "pairs_for_mde_15": pairs_for_mde(sd, MDE_TARGET_PCT) if sd else None,
        "same_seed_cv_median": float(np.median(same_seed_cv)) if same_seed_cv else None,
        "reference_cv_within": within,
        "reference_cv_within_confirmation_median": float(np.median(within)) if within else None,
        "first_run_over_partner_median": float(np.median(first)), "first_run_over_partner": first,
        "runs_attempted": runs, "voids": voids, "void_rate": round(voids / runs, 4) if runs else None,
        "voids_by_arm": {arm: int(sum(r["voids_by_arm"][arm] for r in rs)) for arm in ("ref", "cand")},
    }


def summarize_aa(config: ExperimentConfig, results: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """The calibration's figures from its confirmations, written to ``aa.json``."""
    refs = np.concatenate([r["reference_samples"] for r in results]) if results else np.array([])
    summary = {
        "cluster": config.cluster, "workload": config.workload, "backend": config.backend, "runtime": config.runtime,
        "platform": str(config.platform), "metric": config.metric, **aa_figures(results),
        "reference_cv": float(np.std(refs, ddof=1) / np.mean(refs)) if refs.size >= 2 else None,
        "intervals": [[r["improvement_pct"], r["ci_low"], r["ci_high"], r["verdict"], r["shipped_verdict"]] for r in results],
    }
    write_atomic(Path(out) / "aa.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def session_of(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """When the confirmations' runs ran and what the host probes said meanwhile (each run's
    ``summary.host``): a figure is read against the session and host it came from."""
    cpu, unpack, drift, at = [], [], [], []
    for r in rs:
        for run in sorted(Path(r["dir"]).glob("*-[0-9]*/summary.json")):
            if ".void-" in run.parent.name:
                continue
            host = json.loads(run.read_text(encoding="utf-8")).get("host") or {}
            probe = host.get("probe") or {}
            if probe.get("cpu_ms"):
                cpu.append(probe["cpu_ms"])
                at.append(probe["at"])
            if probe.get("unpack_ms"):
                unpack.append(probe["unpack_ms"])
            drift += list((host.get("drift") or {}).values())
    span = [time.strftime("%Y-%m-%d %H:%M", time.gmtime(t)) for t in (min(at), max(at))] if at else None

    def rng(v: list[float]) -> list[float] | None:
        return [round(min(v), 1), round(max(v), 1)] if v else None

    return {"utc": span, "cpu_probe_ms": rng(cpu), "unpack_probe_ms": rng(unpack),
            "drift_from_up": [round(min(drift), 3), round(max(drift), 3)] if drift else None}


def read_confirmations(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every A/A confirmation under ``root`` (``**/aa.json`` beside its ``aa-*/confirmation.json``),
    by cluster."""
    out: dict[str, list[dict[str, Any]]] = {}
    for aa in sorted(Path(root).rglob("aa.json")):
        try:
            cluster = json.loads(aa.read_text(encoding="utf-8"))["cluster"]
        except (OSError, ValueError, KeyError) as err:
            raise AgentError(f"{aa}: not an A/A calibration ({err})") from None
        for conf in sorted(aa.parent.glob("aa-*/confirmation.json")):
            r = json.loads(conf.read_text(encoding="utf-8"))
            r["dir"] = str(conf.parent)
            out.setdefault(cluster, []).append(r)
    if not out:
        raise AgentError(f"{root}: no A/A calibration under it (`scoretune calibrate --aa -o DIR`)")
    return out


def _first_run_ratio(r: dict[str, Any]) -> float:
    """The first run of a confirmation over its pair partner (1.0: no first-run effect)."""
    first, second = r["orders"][0]
    vals = {"ref": r["reference_samples"][0], "cand": r["samples"][0]}
    return float(vals[first] / vals[second])


def _first_over_second(r: dict[str, Any]) -> list[float]:
    """Each pair's first run over its second: an order effect shows as a median away from 1."""
    out = []
    for (first, second), ref, cand in zip(r["orders"], r["reference_samples"], r["samples"], strict=True):
        vals = {"ref": ref, "cand": cand}
        out.append(float(vals[first] / vals[second]))
    return out


def pool_aa(root: Path) -> dict[str, Any]:
    """The A/A calibrations under ``root`` pooled per cluster, with the session and host probes
    each cluster's figures come from: what docs/results/containers/repeatable.md is computed from
    (``scoretune calibrate --aa --report``)."""
    by_cluster = read_confirmations(root)
    rows = {cluster: {**aa_figures(rs), "session": session_of(rs)} for cluster, rs in sorted(by_cluster.items())}
    total = sum(r["confirmations"] for r in rows.values())
    order = [_first_over_second(r) for rs in by_cluster.values() for r in rs]
    ratios = [x for o in order for x in o]
    return {"clusters": rows, "confirmations": total,
            "pairs_first_over_second_median": float(np.median(ratios)) if ratios else None,
            "pairs_first_slower": int(sum(x > 1 for x in ratios)), "pairs": len(ratios),
            "false_improvements": sum(r["false_improvements"] for r in rows.values()),
            "false_improvements_shipped": sum(r["false_improvements_shipped"] for r in rows.values())}
__all__ = ["MDE_TARGET_PCT", "aa_calibration", "aa_figures", "session_of", "futility_verdict", "pool_aa", "read_confirmations", "reconfirm", "summarize_aa"]
