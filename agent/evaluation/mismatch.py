"""What each mismatch level does (docs/results/twin/mismatch/mismatch.md): the rank correlation, over a
fixed set of profiles, of the scenario as written with its perturbed truth.

The scenario as written is the best twin a fit of the parametric parts could reach on the
unperturbed cluster; the truth at a level adds what no twin has (testbed.sim.mismatch). Spearman's
rho over the same profiles says how far the twin's ranking of profiles can be trusted at that level.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from agent.actions import ActionCodec
from agent.objectives.sim import SimObjective, mismatch_truth, scenario_objective

PROFILES = 32
"""Quasi-random profiles of the box besides the default weights (a fixed set: seed 0)."""


def profile_set(codec: ActionCodec, n: int = PROFILES) -> list[np.ndarray]:
    from scipy.stats import qmc

    return [codec.reference_action(), *(qmc.Sobol(codec.dim, scramble=True, seed=0).random(n) * 2.0 - 1.0)]


def mismatch_table(scenarios: Sequence[str], levels: Sequence[str], *, seed: int = 0, profiles: int = PROFILES
                   ) -> pd.DataFrame:
    """One row per scenario and level: Spearman's rho of the written scenario with the truth, and
    the truth's default-weights latency relative to the written scenario's."""
    from scipy.stats import spearmanr

    codec = ActionCodec()
    actions = profile_set(codec, profiles)
    rows = []
    for name in scenarios:
        written = scenario_objective(name, seed)
        base = np.array([written(codec.decode(a)) for a in actions])
        for lvl in levels:
            truth = SimObjective(written.cluster, written.workload, seed, written.metric,
                                 truth=mismatch_truth(lvl, name, written.cluster, seed))
            values = np.array([truth(codec.decode(a)) for a in actions])
            rho = float(spearmanr(base, values).statistic) if np.ptp(base) > 0 and np.ptp(values) > 0 else float("nan")
            rows.append({"scenario": name, "level": lvl, "rho": rho, "default_ratio": float(values[0] / base[0])})
    return pd.DataFrame(rows)


def level_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per level: tasks, median and mean rho, and the median ratio of the default weights' latency."""
    g = table.groupby("level", sort=False)
    return pd.DataFrame({"tasks": g["rho"].size(), "rho_median": g["rho"].median(), "rho_mean": g["rho"].mean(),
                         "default_latency_ratio_median": g["default_ratio"].median()}).reset_index()
