"""``--method twin``: the model-based tuner. The twin of *this* cluster is where it searches.

Dyna's loop with a simulator for a model (docs/twin.md): every real run refits the twin's hidden
parameters to where the time went on each node (``testbed.sim.twin``); between real runs the tuner
searches the fitted twin (about a hundred simulated runs: a fixed pool of profiles, the transfer
prior's portfolio among them, then local refinement around the twin's best) and proposes the
profile the *corrected* twin likes best among those not yet measured.

The correction is the pattern of Cully et al. (Nature 2015) and Letham & Bakshy (JMLR 2019): the
twin is the prior mean of a Gaussian process over the action box, and the GP models only what the
twin gets wrong, ``log measured = a * log twin + GP``. The twin's weight ``a`` is fitted from the
measured runs with a prior at 1 and may shrink to 0, so a twin whose ranking the runs contradict is
overruled and the tuner becomes GP-BO over the same pool. The acquisition is the lower confidence
bound of the corrected prediction.

Trust (issue 44, item 4). The twin's weight comes from what it predicted *before* it was fitted
on a run: each proposal's predicted change against the reference (the twin as it stood) is compared
with the change measured, and ``a`` is fitted on those out-of-sample pairs. The twin is not trusted
-- its weight is 0 and the tuner is GP-BO over the same pool, model-free -- while it cannot explain
what it saw: its last runs' changes missed by more than :data:`CHANGE_BOUND` on average, or a (function, node)
cell that node speed x function work cannot predict from the other cells (``testbed.sim.twin.
cell_check``) beyond :data:`CELL_BOUND`. Both bounds were chosen on validation tasks
(``scoretune twin trust``, docs/results/twin/trust/). The tuner says so in one line naming the cell
or the metric, and trusts the twin again once a refit explains the runs.

The tuner knows only what a user has (``agent.objectives.view.UserView``): the cluster as the API
shows it, the workload, and the measured runs with their per-node breakdown.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.metrics import metric_from_summary
from agent.objectives.view import UserView

log = logging.getLogger(__name__)

POOL_SOBOL = 64
"""Quasi-random profiles of the box in the twin's pool (seeded by the tuner's seed)."""
POOL_PRIOR = 16
"""Profiles of the transfer prior's greedy portfolio in the pool (profiles that mattered elsewhere)."""
REFINE = ((0.3, 12), (0.12, 12))
"""Local refinement around the twin's four best: (step sigma, profiles) per round."""
TWIN_WEIGHT_PRIOR = 2.0
"""How many measured runs' worth of belief the twin's weight 1 holds before runs contradict it."""
BETA = 1.0
"""Exploration of the lower confidence bound (standard deviations of the corrected prediction)."""
SAME = 1e-3
"""Actions closer than this (max-norm) are the same profile."""
CHANGE_BOUND = 0.582
"""Largest mean :func:`change_miss` of its last runs the twin may leave and stay trusted: the 95th
percentile over 100 runs on 20 validation tasks at ``--mismatch default``
(docs/results/twin/trust/bounds.json, ``scoretune twin trust``)."""
CELL_BOUND = 1.145
"""Largest unexplained cell error (``CellCheck.error``) the twin may leave and stay trusted: the
same study's 95th percentile (over the 38 % of runs with a cell it can check)."""
RECENT = 3
"""The trust rule reads the mean miss of the twin's last this many out-of-sample predictions: one
good guess does not undo a run of bad ones, and an early miss is forgotten after this many runs."""


def change_miss(predicted: float, measured: float) -> float:
    """How far a predicted change against the reference missed the measured one, as a share of the
    reference's latency: ``|exp(predicted) - exp(measured)|`` of two log ratios. A miss between -87
    and -93 % (0.06) does not change which profile is better; one between -68 and +70 % (1.38) does.
    (In logs the first would read 0.62, as far off as the second's half.)"""
    return abs(math.exp(predicted) - math.exp(measured))


class TwinTuner:
    """Proposes by searching the fitted twin; corrects it by a GP on what it got wrong."""

    def __init__(self, view: UserView, codec: ActionCodec, seed: int = 0, *, prior_actions: np.ndarray | None = None,
                 fit: bool = True, trust: bool = True, residual: bool = True, warm_only: int = 0,
                 name: str | None = None) -> None:
        from scipy.stats import qmc

        from testbed.sim.backend import suite_specs
        from testbed.sim.twin import Twin

        missing = sorted(set(view.workload.functions) - set(suite_specs()))
        if missing:
            raise AgentError(f"method 'twin': the workload names function(s) {missing} the suite has no spec for, "
                             "so the twin cannot simulate them (scoretune functions list)")
        self.name = name or ("twin" if fit else "twin-nofit")
        self.fit_enabled = fit
        """False: the twin stays the view as written (the ablation of the fit; the residual GP still learns)."""
        self.trust_enabled = trust
        """False: the twin's weight is never set to 0 for what it cannot explain (the rule's ablation)."""
        self.residual = residual
        """False: no GP on what the twin gets wrong (weight 1, one offset): the correction's ablation."""
        self.warm_only = int(warm_only)
        """> 0: the twin proposes only this many profiles, then GP-BO over the pool (``gp-twin-warm``)."""
        self.codec = codec
        self.view = view
        self.seed = int(seed)
        timeout = float(view.timeout_s)
        self.twin = Twin(view.cluster, view.workload, suite_specs(),
                         metric=lambda s: max(metric_from_summary(s, view.metric, timeout), 1e-6),
                         platform=view.platform)
        sobol = qmc.Sobol(codec.dim, scramble=True, seed=self.seed).random(POOL_SOBOL) * 2.0 - 1.0
        pool = [codec.reference_action().astype(np.float64), *sobol]
        if prior_actions is not None:
            pool.extend(np.asarray(prior_actions, dtype=np.float64)[:POOL_PRIOR])
        self.pool = np.clip(np.array(pool), -1.0, 1.0)
        self.rng = np.random.default_rng([self.seed, 0x7717])
        self.actions: list[np.ndarray] = []
        self.metrics: list[float] = []
        self.observations: list[Any] = []
        self._where: Mapping[str, Any] | None = None
        self.fits: list[dict[str, Any]] = []
        """One record per refit (runs, errors, parameters, seconds): what the live log keeps."""
        self.last_search: dict[str, Any] = {}
        self.last_fit: Any = None
        self.predicted_change: list[float | None] = []
        """Per told run: the twin's log change against the reference predicted before the run (None:
        the reference, or a run the tuner did not propose)."""
        self._pending: tuple[np.ndarray, float] | None = None
        self.trust_log: list[dict[str, Any]] = []
        """Per told run: whether the twin was trusted after it, and what it could not explain."""
        self._trusted = True

    # ------------------------------------------------------------------------------- observations
    def observe_where(self, where: Mapping[str, Any]) -> None:
        """The per-node breakdown of the run about to be told (``loadgen.where``)."""
        self._where = where

    def tell(self, action: np.ndarray, metric: float) -> None:
        from testbed.sim.twin import Observation

        a = np.asarray(action, dtype=np.float64).reshape(-1)
        pending, self._pending = self._pending, None
        self.predicted_change.append(pending[1] if pending is not None and self.actions
                                     and np.max(np.abs(pending[0] - a)) <= SAME else None)
        self.actions.append(a)
        self.metrics.append(float(metric))
        where, self._where = self._where, None
        fitted = bool(where and where.get("nodes") and self.fit_enabled)
        if fitted:
            self.observations.append(Observation(self.codec.decode(a).to_profile(), float(metric), where))
            t0 = time.perf_counter()
            fit = self.twin.fit(self.observations)
            cells = fit.cells
            self.fits.append({"runs": fit.runs, "metric_error": fit.metric_error,
                              "node_error": dict(fit.node_error), "speed": dict(fit.params.speed),
                              "pull_bytes_per_s": dict(fit.params.pull_bytes_per_s), "work": dict(fit.params.work),
                              "cell_error": None if cells is None else cells.error,
                              "cell_worst": None if cells is None or cells.worst is None else list(cells.worst),
                              "confounded": [] if fit.identified is None else fit.identified.confounded(),
                              "seconds": time.perf_counter() - t0})
            self.last_fit = fit
        self._judge()
        if fitted:
            self.fits[-1].update(trusted=self.trust_log[-1]["trusted"], reasons=self.trust_log[-1]["reasons"])

    # ------------------------------------------------------------------------------------ trust
    def change_errors(self) -> list[tuple[int, float, float]]:
        """(run, predicted, measured) log change against the reference, for every run the twin
        predicted before it was measured (out of sample)."""
        if not self.metrics:
            return []
        y0 = math.log(max(self.metrics[0], 1e-9))
        return [(k, p, math.log(max(m, 1e-9)) - y0) for k, (p, m) in enumerate(zip(self.predicted_change, self.metrics,
                                                                                   strict=True)) if p is not None]

    def _judge(self) -> None:
        """Trusted or not after the last run (module docstring): one line when that changes."""
        reasons: list[str] = []
        recent = self.change_errors()[-RECENT:]
        last = len(self.metrics) - 1
        if recent and float(np.mean([change_miss(p, m) for _, p, m in recent])) > CHANGE_BOUND:
            k, pred, meas = max(recent, key=lambda e: change_miss(e[1], e[2]))
            reasons.append(f"metric: it predicted {100 * (math.exp(pred) - 1):+.0f} % against the reference for run "
                           f"{k}, the run measured {100 * (math.exp(meas) - 1):+.0f} %")
        fit = self.last_fit
        if fit is not None and fit.cells is not None and fit.cells.error > CELL_BOUND and fit.cells.worst is not None:
            fn, node, factor = fit.cells.worst
            reasons.append(f"{fn} on {node}: measured {factor:.2f}x what node speed x function work predict "
                           f"(unexplained error {fit.cells.error:.2f} > {CELL_BOUND})")
        trusted = not reasons or not self.trust_enabled
        self.trust_log.append({"run": last, "trusted": trusted, "reasons": reasons})
        if trusted != self._trusted:
            if trusted:
                log.warning("%s: the twin explains the runs again (run %d); its proposals count again", self.name, last)
            else:
                log.warning("%s: the twin cannot explain %s; proposing model-free (GP-BO over its pool) until it can",
                            self.name, "; ".join(reasons))
        self._trusted = trusted

    @property
    def trusted(self) -> bool:
        return self._trusted

    # ----------------------------------------------------------------------------------- search
    def _predict(self, actions: np.ndarray) -> np.ndarray:
        return np.array([math.log(self.twin.predict(self.codec.decode(a).to_profile())) for a in actions])

    def _search_twin(self) -> tuple[np.ndarray, np.ndarray]:
        """The pool and local refinement around the twin's best: (actions, log twin metric)."""
        acts = self.pool
        vals = self._predict(acts)
        for sigma, n in REFINE:
            top = acts[np.argsort(vals)[:4]]
            new = np.clip(top[self.rng.integers(len(top), size=n)] + self.rng.normal(0.0, sigma, (n, acts.shape[1])),
                          -1.0, 1.0)
            acts = np.vstack([acts, new])
            vals = np.concatenate([vals, self._predict(new)])
        return acts, vals

    def suggest(self) -> np.ndarray:
        if not self.metrics:
            raise AgentError("the twin tuner is told the reference run before it is asked")
        t0 = time.perf_counter()
        acts, twin_log = self._search_twin()
        measured = np.array(self.actions)
        y = np.log(np.maximum(np.array(self.metrics), 1e-9))
        at_measured = self._predict(measured)
        warm_done = self.warm_only > 0 and len(self.metrics) > self.warm_only
        if not self._trusted or warm_done:
            weight = 0.0
        elif not self.residual:
            weight = 1.0
        else:
            weight = self._twin_weight(self.change_errors())
        if self.residual or weight == 0.0:
            mean, sd = self._correction(measured, y - weight * at_measured, acts)
        else:  # the correction's ablation: the twin shifted by its mean miss, no GP
            mean, sd = np.full(len(acts), float(np.mean(y - at_measured))), np.zeros(len(acts))
        score = weight * twin_log + mean - BETA * sd
        fresh = np.array([np.min(np.max(np.abs(measured - a), axis=1)) > SAME for a in acts])
        if not fresh.any():  # every pool profile measured: explore around the best measured
            best = measured[int(np.argmin(y))]
            return np.clip(best + self.rng.normal(0.0, 0.2, best.shape), -1.0, 1.0).astype(np.float32)
        score[~fresh] = np.inf
        choice = int(np.argmin(score))
        # the twin's own prediction of the change against the reference (pool[0]), kept to judge it
        self._pending = (acts[choice].astype(np.float64), float(twin_log[choice] - twin_log[0]))
        self.last_search = {"simulated": int(len(acts) + len(measured)), "twin_weight": float(weight),
                            "trusted": bool(self._trusted), "seconds": time.perf_counter() - t0,
                            "predicted_s": float(math.exp(weight * twin_log[choice] + mean[choice]))}
        return acts[choice].astype(np.float32)

    @staticmethod
    def _twin_weight(changes: list[tuple[int, float, float]]) -> float:
        """``a`` of ``measured change ~ a * predicted change`` over the runs the twin predicted
        before they were measured (out of sample; the reference is the origin of both), least
        squares with a prior at 1 worth :data:`TWIN_WEIGHT_PRIOR` runs, kept in [0, 1.5]: runs that
        contradict the twin's predictions shrink it toward 0 (GP-BO over the pool)."""
        if not changes:
            return 1.0
        x = np.array([p for _, p, _ in changes])
        yy = np.array([m for _, _, m in changes])
        sxx = float(x @ x)
        lam = TWIN_WEIGHT_PRIOR * max(sxx / len(x), 1e-4)
        return float(np.clip((float(x @ yy) + lam) / (sxx + lam), 0.0, 1.5))

    def _correction(self, x: np.ndarray, r: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The GP of what the twin gets wrong, at ``at``: (mean, sd). With one run it is that run's
        offset everywhere, with no spread (nothing says where the twin errs yet)."""
        if len(r) < 2:
            return np.full(len(at), float(r[0]) if len(r) else 0.0), np.zeros(len(at))
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        kernel = ConstantKernel(0.05, (1e-4, 10.0)) * Matern(length_scale=np.full(x.shape[1], 1.0),
                                                                 length_scale_bounds=(0.05, 20.0), nu=2.5) \
            + WhiteKernel(1e-4, (1e-8, 0.1))
        gp = GaussianProcessRegressor(kernel, normalize_y=False, random_state=self.seed)
        offset = float(r.mean())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(x, r - offset)
        mean, sd = gp.predict(at, return_std=True)
        return mean + offset, sd
