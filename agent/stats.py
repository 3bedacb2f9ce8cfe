"""Noise-aware verdicts: paired confidence intervals and a significance call (pure).

On measured backends a profile's latency varies run to run. The live loop can run a candidate
``R`` times, each run paired with a reference run made right next to it (same seed, adjacent in
time), and judge the paired relative differences ``d_i = 100 (ref_i - cand_i) / ref_i`` with a
Student-t interval: pairing cancels the drift both runs share, the t interval is exact for normal
differences and honest for small ``R``. A difference whose interval contains 0 is reported as
"no significant difference", never as an improvement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

IMPROVEMENT = "improvement"
REGRESSION = "regression"
NO_DIFFERENCE = "no significant difference"
UNREPLICATED = "unreplicated"
NOT_CONFIRMED = "not confirmed"
"""A confirmation stopped once no remaining pair could make it an improvement (:func:`can_still_improve`)."""


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float | None
    high: float | None
    n: int
    level: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def mean_ci(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean and Student-t confidence interval; no interval from fewer than two values."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Interval(float("nan"), None, None, 0, level)
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, int(x.size), level)
    sem = float(x.std(ddof=1)) / math.sqrt(x.size)
    half = float(stats.t.ppf(0.5 + level / 2.0, x.size - 1)) * sem
    return Interval(mean, mean - half, mean + half, int(x.size), level)


def paired_improvement(reference: Sequence[float], candidate: Sequence[float], level: float = 0.95) -> Interval:
    """Interval of the paired percentage improvement ``100 (ref_i - cand_i) / ref_i``."""
    if len(reference) != len(candidate):
        raise ValueError(f"paired samples differ in length: {len(reference)} reference vs {len(candidate)} candidate")
    r = np.asarray(reference, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    return mean_ci(100.0 * (r - c) / r, level)


def verdict(interval: Interval, *, deterministic: bool = False) -> str:
    """``improvement`` / ``regression`` only when the interval excludes 0.

    A single run on a deterministic backend (the simulator with a fixed seed) is exact, so its
    sign is the verdict; a single run on a measured backend is ``unreplicated``.
    """
    if interval.n == 0 or not math.isfinite(interval.mean):
        return NO_DIFFERENCE
    if interval.low is None or interval.high is None:
        if not deterministic:
            return UNREPLICATED
        if interval.mean > 0:
            return IMPROVEMENT
        return REGRESSION if interval.mean < 0 else NO_DIFFERENCE
    if interval.low > 0:
        return IMPROVEMENT
    if interval.high < 0:
        return REGRESSION
    return NO_DIFFERENCE


@dataclass(frozen=True)
class HealthBounds:
    """Bounds on the load generator itself: beyond them a run is void (rerun, never scored)."""

    max_dispatch_lag_p99_s: float = 0.5
    max_late_share: float = 0.05


def run_health(summary: Mapping[str, Any], bounds: HealthBounds = HealthBounds()) -> str | None:
    """``None`` when the run can be scored, else why it is void.

    Reads the figures the replay reports in the run summary (``loadgen.results.summarize``):
    dispatch lag (how late requests left the generator) and late dispatches. Requests that failed
    because the profile overloaded a node are the profile's result and are scored (they count
    against it through the latency of the rest and the failure counts), not voided.
    """
    if summary.get("failed"):
        return f"the run failed: {summary.get('failure') or 'no reason given'}"
    count = int(summary.get("count") or 0)
    if count == 0:
        return "the run has no requests"
    lag = summary.get("dispatch_lag_p99_s")
    if lag is not None and lag > bounds.max_dispatch_lag_p99_s:
        return f"dispatch lag p99 {lag:.3f} s > {bounds.max_dispatch_lag_p99_s} s"
    late = int(summary.get("late_dispatches") or 0)
    if late / count > bounds.max_late_share:
        return f"{late}/{count} late dispatches > {bounds.max_late_share:.0%}"
    if summary.get("latency_mean_s") is None:
        return "no successful request"
    return None


def welch_improvement(reference: Sequence[float], candidate: Sequence[float]) -> Interval:
    """Unpaired interval of ``100 (mean_ref - c) / mean_ref`` over the candidate runs, widened by the
    reference's own uncertainty (the two sample variances add, as in Welch's t)."""
    ref = float(np.mean(reference))
    ci_c = mean_ci([100.0 * (ref - c) / ref for c in candidate])
    ci_r = mean_ci([100.0 * (ref - r) / ref for r in reference])
    if ci_c.low is None or ci_r.low is None:
        return ci_c
    half = float(np.hypot(ci_c.mean - ci_c.low, ci_r.mean - ci_r.low))
    return Interval(ci_c.mean, ci_c.mean - half, ci_c.mean + half, ci_c.n)


def can_still_improve(differences: Sequence[float], total: int, level: float = 0.95) -> bool:
    """Whether ``total`` paired differences that begin with ``differences`` can still give an
    interval above 0 (:func:`verdict` ``improvement``), whatever the remaining ones turn out to be.

    For a fixed sum of the remaining values the interval's lower end is highest when they are all
    equal (equal values add the least variance), so the question is one-dimensional: is there a
    common value ``c`` for them that lifts the lower end above 0? With three pairs in all, a single
    difference at or below 0 already rules it out, so a confirmation can stop there and reach the
    verdict it would have reached with every pair (stopping for futility never makes an
    improvement easier to declare)."""
    d = np.asarray(differences, dtype=np.float64)
    rest = int(total) - d.size
    if rest <= 0:
        low = mean_ci(d, level).low
        return low is not None and low > 0
    crit = float(stats.t.ppf(0.5 + level / 2.0, total - 1))
    # the limit as c grows without bound: t -> sqrt(rest (total - 1) / (total - rest))
    if rest < total and math.sqrt(rest * (total - 1) / (total - rest)) > crit:
        return True
    scale = float(np.max(np.abs(d))) if d.size and np.any(d) else 1.0
    c = scale * np.logspace(-4, 6, 400)[:, None]
    x = np.concatenate([np.broadcast_to(d, (c.shape[0], d.size)), np.broadcast_to(c, (c.shape[0], rest))], axis=1)
    sd = x.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = x.mean(axis=1) / (sd / math.sqrt(total))
    return bool(np.any((sd == 0.0) & (x.mean(axis=1) > 0)) or np.any(t[sd > 0] > crit))


def mde_pct(sd: float | None, n: int, level: float = 0.95, power: float = 0.8) -> float | None:
    """The minimum detectable effect of ``n`` paired differences of standard deviation ``sd``
    (in the differences' unit, here percent): the true mean difference a two-sided paired t-test
    at ``level`` detects with probability ``power``, ``(t_{1-a/2,n-1} + t_{power,n-1}) sd / sqrt n``
    (the usual approximation, which ignores the far tail). A verdict of "no significant
    difference" says nothing about effects below it. None from fewer than two pairs."""
    if sd is None or n < 2 or not math.isfinite(sd):
        return None
    crit = float(stats.t.ppf(0.5 + level / 2.0, n - 1)) + float(stats.t.ppf(power, n - 1))
    return crit * float(sd) / math.sqrt(n)


def pairs_for_mde(sd: float, target_pct: float, *, most: int = 100, level: float = 0.95, power: float = 0.8) -> int | None:
    """The fewest pairs whose :func:`mde_pct` at ``sd`` is at most ``target_pct`` (None: more than ``most``)."""
    for n in range(2, most + 1):
        m = mde_pct(sd, n, level, power)
        if m is not None and m <= target_pct:
            return n
    return None


def stein_pairs(first: Sequence[float], target: float, *, most: int, level: float = 0.95,
                power: float = 0.8) -> tuple[int, int]:
    """Stein's two-stage sample size (Stein, "A two-sample test for a linear hypothesis whose
    power is independent of the variance", Ann. Math. Stat. 1945): from a first stage of ``n0``
    paired differences with standard deviation ``s0``, the total ``N = max(n0, ceil(((t_{1-a/2}
    + t_power) s0 / target)^2))`` with both t quantiles at ``n0 - 1`` degrees of freedom, so that
    :func:`stein_interval` over all ``N`` detects ``target`` with probability ``power`` whatever
    the true spread. Returns ``(N capped at most, N uncapped)``: the cap keeps the interval exact
    (it is a function of ``s0`` alone), it only loses power, which :func:`stein_mde` then states."""
    d = np.asarray(first, dtype=np.float64)
    n0 = int(d.size)
    if n0 < 2:
        raise ValueError(f"a first stage needs at least two differences, got {n0}")
    s0 = float(d.std(ddof=1))
    crit = float(stats.t.ppf(0.5 + level / 2.0, n0 - 1)) + float(stats.t.ppf(power, n0 - 1))
    need = n0 if s0 == 0.0 else max(n0, math.ceil((crit * s0 / float(target)) ** 2))
    return min(need, max(int(most), n0)), need


def stein_interval(differences: Sequence[float], n0: int, level: float = 0.95) -> Interval:
    """The second-stage interval of Stein's design: the mean of all ``N`` differences, its half
    width ``t_{1-a/2, n0-1} s0 / sqrt(N)`` with ``s0`` the first ``n0`` differences' deviation.
    Exact for normal differences because ``N`` depends on the data only through ``s0``, which is
    independent of every difference's mean; the later differences' spread is deliberately unused."""
    d = np.asarray(differences, dtype=np.float64)
    if not 2 <= n0 <= d.size:
        raise ValueError(f"a first stage of {n0} among {d.size} differences")
    s0 = float(d[:n0].std(ddof=1))
    mean = float(d.mean())
    half = float(stats.t.ppf(0.5 + level / 2.0, n0 - 1)) * s0 / math.sqrt(d.size)
    return Interval(mean, mean - half, mean + half, int(d.size), level)


def stein_mde(s0: float, n0: int, n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The minimum detectable effect of :func:`stein_interval` over ``n`` differences after a first
    stage of ``n0`` with deviation ``s0`` (the same formula as :func:`mde_pct`, at ``n0 - 1``
    degrees of freedom)."""
    crit = float(stats.t.ppf(0.5 + level / 2.0, n0 - 1)) + float(stats.t.ppf(power, n0 - 1))
    return crit * float(s0) / math.sqrt(n)
