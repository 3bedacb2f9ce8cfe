"""The twin fitted to a lab's runs against the lab (``scoretune twin fidelity``; issue 43's
fidelity study, the twin's half).

``scoretune fidelity`` runs K profiles on the embedded lab and on the simulator as shipped (the
cluster as its spec declares it) and ranks them. What a tuner works with is neither: it is the
twin fitted to the runs it has measured. This study reads a finished fidelity directory, fits the
twin to the lab's first ``n`` runs (the default profile first, as a tuning experiment's reference)
exactly as the twin tuner does, predicts every profile, and ranks the profiles it was *not* fitted
on against the lab -- beside the shipped simulator and the unfitted twin on the same profiles, so
that what the fit adds is a row of its own. Nothing is run on a lab: the runs are read back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import AgentError, InputError

LAB_RECIPE = re.compile(r"^lab-poisson-(?P<rate>[0-9.]+)rps-(?P<seconds>[0-9.]+)s-seed(?P<seed>\d+)$")
"""The name ``testbed.scenarios.lab_workload`` gives its workload (how a fidelity directory names it)."""


def _spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    x, y = np.asarray(a, float), np.asarray(b, float)
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3:
        return None
    rho = float(spearmanr(x[keep], y[keep]).statistic)
    return None if math.isnan(rho) else rho


def _mae(a: Sequence[float], b: Sequence[float]) -> float | None:
    x, y = np.asarray(a, float), np.asarray(b, float)
    keep = np.isfinite(x) & np.isfinite(y)
    return float(np.mean(np.abs(x[keep] - y[keep]))) if keep.any() else None


def _workload(name: str) -> Any:
    from testbed.scenarios import lab_workload

    m = LAB_RECIPE.match(name)
    if m is None:
        raise AgentError(f"the fidelity runs replayed workload {name!r}, not the lab recipe; only a lab-recipe "
                         "fidelity directory can be read back")
    return lab_workload(int(m["seed"]), duration_s=float(m["seconds"]))


def read_lab_runs(directory: Path) -> tuple[dict[str, Any], list[tuple[Any, float, dict[str, Any]]], float]:
    """A fidelity directory's report, its lab runs in profile order -- (profile, mean latency with
    failed requests at the client's timeout, as a tuner measures it; ``where``) each -- and that
    timeout; a missing or failed run is one error naming its file."""
    from agent.metrics import metric_from_summary, run_timeout_s
    from loadgen.results import read_run, run_where
    from testbed.local.studies.fidelity import read_report
    from testbed.scheduler.config import parse_config

    report = read_report(directory)
    runs = []
    timeout = 30.0
    for row in report["rows"]:
        run_dir = directory / "local" / f"profile-{int(row['profile']):02d}"
        if not (run_dir / "summary.json").is_file():
            raise InputError("missing: the lab run of this profile", file=run_dir / "summary.json")
        run = read_run(run_dir)
        if run.summary.get("failed"):
            raise InputError("is a failed run: its numbers are void", file=run_dir / "summary.json")
        config = (run.summary.get("profile") or {}).get("config")
        if not isinstance(config, dict):
            raise InputError("names no profile (profile.config)", file=run_dir / "summary.json")
        where = run_where(run)
        timeout = run_timeout_s(run.summary)
        try:
            value = metric_from_summary(run.summary, "mean", timeout)
        except AgentError as err:
            raise InputError(str(err), file=run_dir / "summary.json") from None
        runs.append((parse_config(config, file=run_dir / "summary.json").profile(), value, where))
    return report, runs, timeout


def twin_fidelity(directory: Path, fits: Sequence[int] = (1, 5)) -> dict[str, Any]:
    """For each ``n`` of ``fits``: the twin fitted to the first ``n`` lab runs, ranked against the
    lab over the profiles from ``n`` on, beside the shipped simulator and the unfitted twin on the
    same profiles (Spearman rho of the mean latency, and its mean absolute error in seconds)."""
    from agent.metrics import metric_from_summary
    from testbed.cluster import load_cluster
    from testbed.sim.backend import suite_specs
    from testbed.sim.twin import Observation, Twin, cluster_view

    report, runs, timeout = read_lab_runs(directory)
    if not fits or any(n < 1 or n > len(runs) - 3 for n in fits):
        raise AgentError(f"--fit: each value must be within 1..{len(runs) - 3} (three profiles left to rank); "
                         f"got {list(fits)}")
    view = cluster_view(load_cluster(report["cluster"]))
    workload = _workload(str(report["workload"]))
    lab = [m for _, m, _ in runs]
    shipped = [float(r.get("sim_mean_s", math.nan)) for r in report["rows"]]

    def metric(s: dict[str, Any]) -> float:
        return max(metric_from_summary(s, "mean", timeout), 1e-6)

    neutral = Twin(view, workload, suite_specs(), metric=metric)
    unfitted = [neutral.predict(p) for p, _, _ in runs]
    rows = []
    for n in fits:
        twin = Twin(view, workload, suite_specs(), metric=metric)
        fit = twin.fit([Observation(p, m, w) for p, m, w in runs[:n]])
        predicted = [twin.predict(p) for p, _, _ in runs]
        rest = slice(n, None)
        rows.append({
            "fitted_on": n, "ranked": len(runs) - n,
            "rho": {"twin": _spearman(predicted[rest], lab[rest]), "shipped": _spearman(shipped[rest], lab[rest]),
                    "unfitted": _spearman(unfitted[rest], lab[rest])},
            "mae_s": {"twin": _mae(predicted[rest], lab[rest]), "shipped": _mae(shipped[rest], lab[rest]),
                      "unfitted": _mae(unfitted[rest], lab[rest])},
            "fit_metric_error": fit.metric_error,
            "confounded": [] if fit.identified is None else fit.identified.confounded(),
            "predicted_s": predicted,
        })
    return {"directory": str(directory), "cluster": report["cluster"], "workload": report["workload"],
            "profiles": len(runs), "lab_s": lab, "shipped_s": shipped, "unfitted_s": unfitted, "fits": rows}


def markdown(result: dict[str, Any]) -> str:
    """The study as a table: one row per fit, what the twin, the shipped simulator and the
    unfitted twin rank of the profiles the fit did not see."""

    def f(x: float | None, digits: int = 2) -> str:
        return "–" if x is None else f"{x:.{digits}f}"

    lines = ["| fitted on (lab runs) | profiles ranked | rho: fitted twin | rho: shipped simulator | "
             "rho: unfitted twin | MAE (s): fitted twin | shipped | unfitted |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["fits"]:
        rho, mae = r["rho"], r["mae_s"]
        lines.append(f"| {r['fitted_on']} | {r['ranked']} | {f(rho['twin'])} | {f(rho['shipped'])} | "
                     f"{f(rho['unfitted'])} | {f(mae['twin'])} | {f(mae['shipped'])} | {f(mae['unfitted'])} |")
    return "\n".join(lines) + "\n"


__all__ = ["read_lab_runs", "twin_fidelity", "markdown"]
