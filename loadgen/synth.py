"""Synthetic arrival processes with a seed: Poisson, bursty (MMPP), diurnal and step changes.

Every generator returns a :class:`~loadgen.workload.Workload` whose metadata records the generator,
its parameters and the seed, so the same call always yields the same schedule. All of them are built
from one primitive, a Poisson process with a piecewise-constant rate: given the count ``N`` in a
segment (drawn Poisson(rate x length)), the arrival times are ``N`` sorted uniforms over the segment,
which is exactly the conditional distribution of a Poisson process. The diurnal generator uses
Lewis-Shedler thinning of a homogeneous process at the peak rate.

``functions`` is a list of names (equal shares) or a mapping name -> share; each arrival picks its
function independently with those probabilities.

Every generator checks its parameters before it draws anything: the expected number of arrivals
(rate x duration, summed over segments) against :data:`loadgen.traces.MAX_REQUESTS`, and for the
MMPP the expected number of state changes against :data:`MAX_STATE_CHANGES`, so an absurd rate or
duration is one error naming the parameter to lower instead of an exhausted memory or a loop that
never ends. A schedule that would have no arrival at all (every rate 0) is refused too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.errors import InputError
from loadgen.traces import MAX_REQUESTS
from loadgen.workload import Workload, make_workload

Functions = Sequence[str] | Mapping[str, float]

MAX_STATE_CHANGES = 1_000_000
"""A guard on the MMPP's modulating chain: its states are walked one by one in Python."""


def _shares(functions: Functions) -> tuple[list[str], np.ndarray]:
    """Names and normalised probabilities; rejects empty lists and non-positive shares."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, Mapping):
        names = [str(k) for k in functions]
        weights = np.asarray([float(v) for v in functions.values()], dtype=np.float64)
    else:
        names = [str(f) for f in functions]
        weights = np.ones(len(names))
    if not names:
        raise InputError("at least one function is needed", field="functions")
    bad = np.flatnonzero(~np.isfinite(weights) | (weights <= 0))
    if bad.size:
        raise InputError(f"share of {names[bad[0]]!r} must be > 0, got {float(weights[bad[0]])!r}", field="functions")
    if len(set(names)) != len(names):
        raise InputError(f"duplicate function names in {names}", field="functions")
    return names, weights / weights.sum()


def _check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    value = float(value)
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise InputError(f"must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}", field=name)
    return value


def _check_budget(expected: float, lower: str, field: str) -> None:
    """Refuse a schedule whose expected size exceeds MAX_REQUESTS, before anything is allocated."""
    if not math.isfinite(expected) or expected > MAX_REQUESTS:
        raise InputError(
            f"about {expected:.3g} requests expected, over the {MAX_REQUESTS} limit; lower {lower}", field=field
        )


def _check_rates(name: str, rates: Sequence[float]) -> np.ndarray:
    """Rates of a piecewise schedule: each finite and >= 0 (an idle segment is fine), not all 0."""
    try:
        values = [float(r) for r in rates]
    except (TypeError, ValueError):
        raise InputError(f"rates must be numbers, got {list(rates)!r}", field=name) from None
    out = np.asarray([_check_positive(name, r, allow_zero=True) for r in values], dtype=np.float64)
    if out.size and not np.any(out > 0):
        raise InputError("every rate is 0: the workload would have no requests", field=name)
    return out


def piecewise_poisson(
    starts_s: np.ndarray, rates_per_s: np.ndarray, end_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is ``rates_per_s[i]`` on ``[starts_s[i],
    starts_s[i+1])`` (the last segment ends at ``end_s``). Sorted, float64 seconds."""
    starts = np.asarray(starts_s, dtype=np.float64)
    rates = np.asarray(rates_per_s, dtype=np.float64)
    ends = np.append(starts[1:], end_s)
    lengths = np.clip(ends - starts, 0.0, None)
    counts = rng.poisson(rates * lengths)
    seg = np.repeat(np.arange(len(starts)), counts)
    t = starts[seg] + rng.random(seg.size) * lengths[seg]
    t.sort()
    return t


def _finish(
    t: np.ndarray, functions: Functions, rng: np.random.Generator, metadata: dict[str, Any]
) -> Workload:
    names, p = _shares(functions)
    idx = rng.choice(len(names), size=t.size, p=p)
    fn = np.asarray(names, dtype=object)[idx]
    metadata = {"functions": dict(zip(names, p.tolist(), strict=True)), **metadata}
    return make_workload(t, fn, metadata=metadata, source=str(metadata.get("source", "synth")))


def poisson(rate_per_s: float, duration_s: float, functions: Functions, *, seed: int = 0) -> Workload:
    """A homogeneous Poisson process: exponential inter-arrival times with mean ``1/rate_per_s``."""
    rate = _check_positive("rate_per_s", rate_per_s)
    duration = _check_positive("duration_s", duration_s)
    _check_budget(rate * duration, "the rate or the duration", "rate_per_s*duration_s")
    rng = np.random.default_rng(seed)
    _shares(functions)
    t = piecewise_poisson(np.array([0.0]), np.array([rate]), duration, rng)
    meta = {"source": "synth:poisson", "name": f"poisson-{rate:g}rps", "seed": seed,
            "params": {"rate_per_s": rate, "duration_s": duration}, "duration_s": duration}
    return _finish(t, functions, rng, meta)


def mmpp(
    rates_per_s: Sequence[float],
    mean_dwell_s: Sequence[float],
    duration_s: float,
    functions: Functions,
    *,
    seed: int = 0,
) -> Workload:
    """A Markov-modulated Poisson process (bursty load).

    The modulating chain stays in state ``i`` for an exponential time with mean ``mean_dwell_s[i]``
    and emits Poisson arrivals at ``rates_per_s[i]`` meanwhile; it then jumps to another state,
    uniformly among the others (for two states: a plain on/off alternation, the classic 2-MMPP).
    The chain starts in state 0.
    """
    rates = _check_rates("rates_per_s", rates_per_s)
    dwell = np.asarray([_check_positive("mean_dwell_s", d) for d in mean_dwell_s])
    if rates.size < 2 or rates.size != dwell.size:
        raise InputError(
            f"need >= 2 states with one dwell time each, got {rates.size} rates and {dwell.size} dwell times",
            field="rates_per_s" if rates.size < 2 else "mean_dwell_s",
        )
    duration = _check_positive("duration_s", duration_s)
    _check_budget(float(rates.max()) * duration, "the highest rate or the duration", "rates_per_s*duration_s")
    changes = duration / float(dwell.min())
    if changes > MAX_STATE_CHANGES:
        raise InputError(
            f"about {changes:.3g} state changes (duration / shortest dwell), over the {MAX_STATE_CHANGES} limit; "
            "raise the dwell times or lower the duration",
            field="mean_dwell_s",
        )
    _shares(functions)
    rng = np.random.default_rng(seed)
    starts, seg_rates, states = [], [], []
    t, state = 0.0, 0
    while t < duration:
        starts.append(t)
        seg_rates.append(rates[state])
        states.append(state)
        t += rng.exponential(dwell[state])
        others = [s for s in range(rates.size) if s != state]
        state = others[int(rng.integers(len(others)))]
    arrivals = piecewise_poisson(np.asarray(starts), np.asarray(seg_rates), duration, rng)
    meta = {"source": "synth:mmpp", "name": f"mmpp-{'-'.join(f'{r:g}' for r in rates)}rps", "seed": seed,
            "params": {"rates_per_s": rates.tolist(), "mean_dwell_s": dwell.tolist(), "duration_s": duration},
            "duration_s": duration, "state_changes": len(starts) - 1}
    return _finish(arrivals, functions, rng, meta)


def diurnal(
    mean_rate_per_s: float,
    duration_s: float,
    functions: Functions,
    *,
    amplitude: float = 0.5,
    period_s: float | None = None,
    phase_s: float = 0.0,
    seed: int = 0,
) -> Workload:
    """A sinusoidal day: rate(t) = mean x (1 + amplitude x sin(2 pi (t + phase) / period)).

    ``period_s`` defaults to the duration (one compressed day); ``amplitude`` in [0, 1] keeps the
    rate non-negative. Generated by thinning a Poisson process at the peak rate (Lewis & Shedler).
    """
    mean = _check_positive("mean_rate_per_s", mean_rate_per_s)
    duration = _check_positive("duration_s", duration_s)
    period = duration if period_s is None else _check_positive("period_s", period_s)
    if not (0.0 <= amplitude <= 1.0):
        raise InputError(f"must be in [0, 1], got {amplitude!r}", field="amplitude")
    phase_s = float(phase_s)
    if not math.isfinite(phase_s):
        raise InputError(f"must be a finite number, got {phase_s!r}", field="phase_s")
    # thinning draws candidates at the peak rate: that is what gets allocated
    _check_budget(mean * (1.0 + amplitude) * duration, "the rate or the duration", "mean_rate_per_s*duration_s")
    _shares(functions)
    rng = np.random.default_rng(seed)
    peak = mean * (1.0 + amplitude)
    cand = piecewise_poisson(np.array([0.0]), np.array([peak]), duration, rng)
    rate = mean * (1.0 + amplitude * np.sin(2.0 * np.pi * (cand + phase_s) / period))
    keep = rng.random(cand.size) * peak < rate
    meta = {"source": "synth:diurnal", "name": f"diurnal-{mean:g}rps", "seed": seed,
            "params": {"mean_rate_per_s": mean, "duration_s": duration, "amplitude": amplitude,
                       "period_s": period, "phase_s": phase_s}, "duration_s": duration}
    return _finish(cand[keep], functions, rng, meta)


def steps(
    rates_per_s: Sequence[float],
    step_s: float | Sequence[float],
    functions: Functions,
    *,
    seed: int = 0,
) -> Workload:
    """Step changes: Poisson at ``rates_per_s[i]`` for ``step_s`` (one length for all, or one each)."""
    rates = _check_rates("rates_per_s", rates_per_s)
    if rates.size == 0:
        raise InputError("need at least one step", field="rates_per_s")
    try:
        lengths = np.atleast_1d(np.asarray(step_s, dtype=np.float64))
    except (TypeError, ValueError):
        raise InputError(f"step lengths must be numbers, got {step_s!r}", field="step_s") from None
    if lengths.size == 1:
        lengths = np.full(rates.shape, lengths[0])
    if lengths.size != rates.size:
        raise InputError(f"{rates.size} rates but {lengths.size} step lengths", field="step_s")
    for v in lengths:
        _check_positive("step_s", v)
    _check_budget(float(np.sum(rates * lengths)), "the rates or the step lengths", "rates_per_s*step_s")
    _shares(functions)
    rng = np.random.default_rng(seed)
    starts = np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
    duration = float(lengths.sum())
    t = piecewise_poisson(starts, rates, duration, rng)
    meta = {"source": "synth:steps", "name": f"steps-{'-'.join(f'{r:g}' for r in rates)}rps", "seed": seed,
            "params": {"rates_per_s": rates.tolist(), "step_s": lengths.tolist()}, "duration_s": duration}
    return _finish(t, functions, rng, meta)


GENERATORS = {"poisson": poisson, "mmpp": mmpp, "diurnal": diurnal, "steps": steps}
