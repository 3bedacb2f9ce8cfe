"""Randomized interleaved pairs: the one protocol that judges a profile against the reference on a
measured backend -- the experiment's confirmation, ``scoretune confirm`` (a later session's
re-confirmation) and ``scoretune calibrate --aa`` (the reference against itself) all run it.

Why this shape (Abedi & Brecht, "Conducting repeatable experiments in highly variable cloud
computing environments", ICPE 2017: randomized multiple interleaved trials; Georges et al.'s and
pyperf's paired comparisons):

- **pairs, interleaved**: each pair runs the reference and the candidate back to back, so drift of
  the host over minutes cancels in the pair's difference;
- **randomized order**: which arm runs first is drawn per pair (balanced: half the pairs each way,
  in a seeded random order), so a first-run or carry-over effect cannot favour one arm;
- **seeds that differ between pairs and not within**: both runs of pair ``r`` replay the arrivals
  drawn by the same seed, pair ``r+1`` by another (``testbed.local.backend`` redraws arrivals by
  the run's seed), so the verdict is over the workload's chance, not over one draw of it;
- **a void voids its pair**: a run the load generator could not drive (``agent.stats.run_health``)
  discards both runs of its pair, which are redone together, so the void rule cannot keep one
  arm's calm runs and the other's stormy ones; voids are counted per arm;
- **a verdict with its power**: the paired interval, the pairs' standard deviation and the
  minimum detectable effect at that deviation (:func:`agent.stats.mde_pct`), so "no significant
  difference" says which effects it could have seen;
- **futility stop only**: the run stops early only when no remaining pair could make the interval
  exclude 0 upwards (:func:`agent.stats.can_still_improve`); stopping then can only turn an
  improvement into "not confirmed", never the reverse, so it cannot raise the false-confirmation
  rate the A/A calibration measures.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import AgentError
from agent.stats import NOT_CONFIRMED, can_still_improve, mde_pct, paired_improvement, verdict

ARMS = ("ref", "cand")
Attempt = Callable[[str, Path, int], "float | str"]
"""``attempt(arm, run_dir, seed)``: one run of ``arm`` into ``run_dir``; its metric, or why it is void."""


def pair_orders(n: int, seed: int) -> list[tuple[str, str]]:
    """Which arm runs first in each of ``n`` pairs: half each way (the odd one by a coin), in a
    seeded random order."""
    rng = np.random.default_rng([int(seed), 0xC0F1])
    first = [True] * (n // 2) + [False] * (n // 2)
    if n % 2:
        first.append(bool(rng.integers(0, 2)))
    rng.shuffle(first)
    return [("ref", "cand") if f else ("cand", "ref") for f in first]


def judge(refs: list[float], cands: list[float], planned: int, *, stopped_early: bool) -> dict[str, Any]:
    """The paired verdict of the pairs run, with its spread and minimum detectable effect."""
    interval = paired_improvement(refs, cands)
    d = 100.0 * (np.asarray(refs) - np.asarray(cands)) / np.asarray(refs)
    sd = float(np.std(d, ddof=1)) if d.size >= 2 else None
    log_sd = float(np.std(np.log(np.asarray(cands) / np.asarray(refs)), ddof=1)) if d.size >= 2 else None
    return {
        "improvement_pct": interval.mean, "ci_low": interval.low, "ci_high": interval.high,
        "verdict": NOT_CONFIRMED if stopped_early else verdict(interval),
        "pairs": len(refs), "pairs_planned": planned, "stopped_early": stopped_early,
        "sd_pct": sd, "log_ratio_sd": log_sd,
        "mde_pct": mde_pct(sd, len(refs)),
        "mde_pct_planned": mde_pct(sd, planned),
    }


def run_pairs(attempt: Attempt, pairs: int, out_dir: Path, *, seed: int, max_reruns: int,
              stop_for_futility: bool = True, on_pair: Callable[[int, str], None] | None = None) -> dict[str, Any]:
    """Run up to ``pairs`` randomized pairs into ``out_dir`` (``ref-R``/``cand-R``; a voided
    pair's runs kept as ``*.void-K``) and judge them. A pair voided ``max_reruns + 1`` times in a
    row ends it with an error naming the last reason."""
    if pairs < 1:
        raise AgentError(f"a confirmation needs at least one pair, got {pairs}")
    orders = pair_orders(pairs, seed)
    refs: list[float] = []
    cands: list[float] = []
    voided: list[dict[str, Any]] = []
    seeds: list[int] = []
    attempted = 0
    for r, order in enumerate(orders):
        pair_seed = int(seed) + r
        if on_pair is not None:
            on_pair(r, order[0])
        for k in range(max_reruns + 1):
            got: dict[str, float] = {}
            void: tuple[str, str] | None = None
            for arm in order:
                attempted += 1
                out = attempt(arm, out_dir / f"{arm}-{r}", pair_seed)
                if isinstance(out, str):
                    void = (arm, out)
                    break
                got[arm] = float(out)
            if void is None:
                break
            for arm in ARMS:
                d = out_dir / f"{arm}-{r}"
                if d.exists():
                    dest = d.with_name(f"{d.name}.void-{k + 1}")
                    shutil.rmtree(dest, ignore_errors=True)
                    d.rename(dest)
            voided.append({"pair": r, "arm": void[0], "attempt": k + 1, "reason": void[1]})
        else:
            raise AgentError(f"{out_dir}: pair {r} was void {max_reruns + 1} times in a row (last: {voided[-1]['reason']}); "
                             "the load generator or the lab is unhealthy")
        refs.append(got["ref"])
        cands.append(got["cand"])
        seeds.append(pair_seed)
        if stop_for_futility and not can_still_improve([100.0 * (a - b) / a for a, b in zip(refs, cands, strict=True)], pairs):
            break
    result = judge(refs, cands, pairs, stopped_early=len(refs) < pairs)
    result.update({
        "reference_samples": refs, "samples": cands, "orders": [list(o) for o in orders[: len(refs)]], "seeds": seeds,
        "voided": voided, "voids_by_arm": {arm: sum(1 for v in voided if v["arm"] == arm) for arm in ARMS},
        "runs_attempted": attempted, "void_rate": round(len(voided) / attempted, 4) if attempted else 0.0,
    })
    return result





def confirm_profile(attempt: Callable[[Any, Path, int], Any], candidate: Any, reference: Any, pairs: int,
                    out_dir: Path, *, seed: int, max_reruns: int,
                    on_pair: Callable[[int, str], None] | None = None, stop_for_futility: bool = True) -> dict[str, Any]:
    """:func:`run_pairs` of ``candidate`` against ``reference`` (two weight settings) through the
    experiment's ``attempt(setting, run_dir, seed)``, which returns ``(metric, facts)`` or
    ``("void", why)``."""
    def arm_attempt(arm: str, run_dir: Path, s: int) -> float | str:
        got = attempt(reference if arm == "ref" else candidate, run_dir, s)
        return str(got[1]) if isinstance(got[0], str) else float(got[0])

    return run_pairs(arm_attempt, pairs, out_dir, seed=seed, max_reruns=max_reruns, on_pair=on_pair,
                     stop_for_futility=stop_for_futility)
__all__ = ["ARMS", "Attempt", "confirm_profile", "judge", "pair_orders", "run_pairs"]
