"""Fidelity of the simulator against the embedded lab, and calibration of the simulator's timing.

``fidelity`` runs the same K scheduler profiles on ``local`` and ``sim`` with the same workload
and reports the Spearman rank correlation of their mean and p95 latencies: what tuning needs from
the simulator is that it *orders* profiles as the real system does.

``calibrate`` fits the simulator's timing parameters of each function from lab measurements:

- work per request: on a node of speed ``s`` the simulator serves ``w`` core seconds of work at
  rate ``r = s * min(1, limit)`` (``limit`` the pod's CPU limit in cores), then waits the
  function's ``io_s`` holding its slot. A warm (not cold-start) successful request in the lab takes
  ``L = o + w / r``, where ``o`` is the fixed part (the HTTP path through Locust, the ingress and
  the runtime, which does not scale with the node's speed). Medians of ``L`` per distinct rate (the
  lab has nodes of different speeds) give ``w`` (``work.cpu_s.mean``) and ``o`` (``work.io_s``) by
  least squares; medians, because queueing behind other requests only ever adds;
- cold-start parts: ``init_s`` is the median of the measured readiness times after the process
  answered (handler import and warm-up); ``start_s`` is the median of ``ready - scheduled - pull -
  init`` minus the simulator's own fixed ready delay (endpoint propagation), so the sum matches.

The calibration is a small YAML file (function -> fitted values, with sample counts); applying it
replaces those fields in the suite's specs (:func:`apply_calibration`) for ``SimBackend``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from functions.spec import FunctionSpec, WorkDistribution, discover_specs
from loadgen.results import RunResult
from loadgen.workload import Workload
from testbed.cluster import ClusterSpec
from testbed.errors import InputError, TestbedError

log = logging.getLogger(__name__)

MIN_WARM_SAMPLES = 5


def fidelity_profiles(k: int, *, seed: int = 0) -> list[Any]:
    """The default profile plus ``k - 1`` random ones (weights log-uniform in 1..100, each plugin
    disabled with probability 0.15, NodeResourcesFit's strategy Least- or MostAllocated), seeded."""
    from testbed.scheduler.config import SCORE_PLUGINS, default_profile, profile_from_weights

    if k < 2:
        raise InputError(f"need at least 2 profiles for a rank correlation, got {k}", field="profiles")
    rng = np.random.default_rng(seed)
    out = [default_profile()]
    while len(out) < k:
        weights: dict[str, int | None] = {}
        for p in SCORE_PLUGINS:
            weights[p] = None if rng.random() < 0.15 else int(round(10 ** rng.uniform(0.0, 2.0)))
        if all(w is None for w in weights.values()):
            continue
        strategy = "MostAllocated" if rng.random() < 0.3 else "LeastAllocated"
        out.append(profile_from_weights(weights, strategy=strategy))
    return out


def _spearman(a: list[float], b: list[float]) -> float | None:
    from scipy.stats import spearmanr

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return None
    return float(spearmanr(x[ok], y[ok]).statistic)


def _mae(a: list[float], b: list[float]) -> float | None:
    """Mean absolute difference over the profiles both backends measured."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    return float(np.mean(np.abs(x[ok] - y[ok]))) if ok.any() else None


def _metric(result: RunResult, name: str) -> float:
    v = result.summary.get(f"latency_{name}_s")
    return float(v) if v is not None else math.nan


def fidelity(
    local: Any,
    sims: dict[str, Any],
    workload: Workload,
    profiles: list[Any],
    out_dir: str | Path,
    *,
    seed: int = 0,
) -> dict[str, Any]:
    """Run every profile on the lab (each run from a reset lab) and on each simulator variant
    (``{"sim": SimBackend(...), "sim-calibrated": ...}``) and compare the rankings."""
    from testbed.scheduler.config import profile_weights

    out_dir = Path(out_dir)
    rows = []
    for i, profile in enumerate(profiles):
        row: dict[str, Any] = {"profile": i, "weights": profile_weights(profile), "strategy": profile.fit.strategy}
        for label, backend in [("local", local), *sims.items()]:
            backend.apply(profile)
            backend.reset()
            t0 = time.monotonic()
            res = backend.run(workload, out_dir / label / f"profile-{i:02d}", seed=seed)
            row[f"{label}_mean_s"] = _metric(res, "mean")
            row[f"{label}_p95_s"] = _metric(res, "p95")
            row[f"{label}_errors"] = int(res.summary.get("errors", 0)) + int(res.summary.get("timeouts", 0))
            row[f"{label}_wall_s"] = round(time.monotonic() - t0, 2)
            row[f"{label}_failed"] = res.failed
            if res.failed:
                log.error("profile %d on %s: the run failed (%s); it is left out of the correlation", i, label, res.summary.get("failure"))
                row[f"{label}_mean_s"] = row[f"{label}_p95_s"] = math.nan
        log.info(
            "profile %d: %s", i,
            " | ".join(f"{lb} mean {row[f'{lb}_mean_s']:.4f} p95 {row[f'{lb}_p95_s']:.4f}" for lb in ["local", *sims]),
        )
        rows.append(row)
    report: dict[str, Any] = {
        "cluster": local.cluster.name,
        "workload": workload.name,
        "requests": len(workload),
        "profiles": len(profiles),
        "seed": seed,
        "rho": {
            label: {
                "mean": _spearman([r["local_mean_s"] for r in rows], [r[f"{label}_mean_s"] for r in rows]),
                "p95": _spearman([r["local_p95_s"] for r in rows], [r[f"{label}_p95_s"] for r in rows]),
            }
            for label in sims
        },
        "mean_abs_error_s": {
            label: _mae([r["local_mean_s"] for r in rows], [r[f"{label}_mean_s"] for r in rows]) for label in sims
        },
        "rows": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fidelity.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


# --- calibration ------------------------------------------------------------------------------


def _fit_work(latency_s: np.ndarray, rate: np.ndarray) -> dict[str, float]:
    """Fit ``latency = overhead + work / rate`` (``rate`` = node speed x the pod's CPU limit):
    the medians of the latency at each distinct rate, least squares with ``overhead >= 0``. With a
    single rate there is nothing to separate, so the overhead is 0 and ``work = median * rate``."""
    rates = np.unique(np.round(rate, 6))
    med = np.array([np.median(latency_s[np.isclose(rate, r)]) for r in rates])
    weight = np.array([np.isclose(rate, r).sum() for r in rates], dtype=float)
    if len(rates) >= 2:
        x = 1.0 / rates
        w_sqrt = np.sqrt(weight)
        a = np.stack([np.ones_like(x), x], axis=1) * w_sqrt[:, None]
        (overhead, work), *_ = np.linalg.lstsq(a, med * w_sqrt, rcond=None)
        if overhead >= 0 and work > 0:
            return {"work_cpu_s_mean": float(work), "work_io_s": float(overhead)}
    work = float(np.sum(weight * med * rates) / np.sum(weight))
    return {"work_cpu_s_mean": work, "work_io_s": 0.0}


def fit_timing(
    results: list[RunResult],
    cluster: ClusterSpec,
    specs: dict[str, FunctionSpec] | None = None,
    *,
    ready_delay_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Per-function timing fitted from lab runs (see the module docstring)."""
    if ready_delay_s is None:
        from testbed.sim.engine import SimConfig

        ready_delay_s = SimConfig().ready_delay_s
    speed = {n.name: n.speed for n in cluster.nodes}
    specs = specs if specs is not None else discover_specs()
    reqs = pd.concat([r.requests for r in results], ignore_index=True)
    pls = pd.concat([r.placements for r in results], ignore_index=True)
    fitted: dict[str, dict[str, Any]] = {}
    for fn in sorted(set(reqs["function"])):
        q = reqs[(reqs["function"] == fn) & (reqs["status"] == "ok") & (~reqs["cold_start"].fillna(False).astype(bool))]
        q = q[q["node"].isin(list(speed))]
        entry: dict[str, Any] = {"warm_samples": int(len(q))}
        if len(q) >= MIN_WARM_SAMPLES:
            spec = specs.get(fn)
            limit = min(1.0, spec.cpu_limit_milli / 1000.0) if spec is not None else 1.0
            entry.update(_fit_work(q["latency_s"].to_numpy(float), q["node"].map(speed).to_numpy(float) * limit))
        p = pls[(pls["function"] == fn) & pls["ready_s"].notna() & pls["scheduled_s"].notna()]
        entry["cold_samples"] = int(len(p))
        if len(p):
            init = float(np.median(p["init_s"].to_numpy(float)))
            total = (p["ready_s"] - p["scheduled_s"] - p["image_pull_s"].fillna(0.0)).to_numpy(float)
            entry["init_s"] = round(init, 4)
            entry["start_s"] = round(max(0.0, float(np.median(total)) - init - ready_delay_s), 4)
        fitted[fn] = entry
    return fitted


def write_calibration(path: str | Path, fitted: dict[str, dict[str, Any]], *, info: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"calibration": info, "functions": fitted}, sort_keys=True))
    return path


def load_calibration(path: str | Path) -> dict[str, dict[str, Any]]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror}", file=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("functions"), dict):
        raise InputError("a calibration file has a 'functions' mapping", file=path, field="functions")
    return data["functions"]


def apply_calibration(
    specs: dict[str, FunctionSpec] | None, fitted: dict[str, dict[str, Any]]
) -> dict[str, FunctionSpec]:
    """The suite's specs with the fitted work mean and cold-start parts substituted."""
    specs = dict(specs if specs is not None else discover_specs())
    for fn, f in fitted.items():
        spec = specs.get(fn)
        if spec is None:
            continue
        changes: dict[str, Any] = {}
        if "work_cpu_s_mean" in f:
            changes["work_cpu_s"] = WorkDistribution(spec.work_cpu_s.distribution, float(f["work_cpu_s_mean"]), spec.work_cpu_s.cv)
        for key in ("start_s", "init_s", "work_io_s"):
            if key in f:
                changes[key] = float(f[key])
        specs[fn] = dataclasses.replace(spec, **changes)
    return specs


def calibrate(
    local: Any, workload: Workload, out_dir: str | Path, *, profiles: list[Any] | None = None, seed: int = 0
) -> tuple[dict[str, dict[str, Any]], list[RunResult]]:
    """Measure ``workload`` on the lab under each profile (default: the default profile) and fit."""
    from testbed.scheduler.config import default_profile

    results = []
    for i, profile in enumerate(profiles or [default_profile()]):
        local.apply(profile)
        local.reset()
        res = local.run(workload, Path(out_dir) / f"calibration-{i:02d}", seed=seed)
        if res.failed:
            raise TestbedError(f"calibration run {i} failed: {res.summary.get('failure')} (see {res.directory})")
        results.append(res)
    fitted = fit_timing(results, local.cluster)
    missing = [fn for fn in workload.functions if "work_cpu_s_mean" not in fitted.get(fn, {})]
    if missing:
        raise TestbedError(
            f"too few warm requests (< {MIN_WARM_SAMPLES}) to fit the work of {missing}; use a longer workload"
        )
    return fitted, results
