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
  rate the A/A calibration measures;
- **as many pairs as the noise needs** (optional, ``mde_target``): Stein's two-stage design sizes
  the confirmation from a first stage's spread so a stated effect is detectable, and its interval
  stays exact although the number of pairs depends on the data (:func:`agent.stats.stein_pairs`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import AgentError
from agent.loop.outcome import Outcome, Void
from agent.stats import (
    NOT_CONFIRMED,
    can_still_improve,
    mde_pct,
    paired_improvement,
    stein_interval,
    stein_mde,
    stein_pairs,
    verdict,
)

ARMS = ("ref", "cand")
Attempt = Callable[[str, Path, int], Outcome]
"""``attempt(arm, run_dir, seed)``: one run of ``arm`` into ``run_dir``, measured or void."""


def pair_orders(n: int, seed: int) -> list[tuple[str, str]]:
    """Which arm runs first in each of ``n`` pairs: half each way (the odd one by a coin), in a
    seeded random order."""
    rng = np.random.default_rng([int(seed), 0xC0F1])
    first = [True] * (n // 2) + [False] * (n // 2)
    if n % 2:
        first.append(bool(rng.integers(0, 2)))
    rng.shuffle(first)
    return [("ref", "cand") if f else ("cand", "ref") for f in first]


FIRST_STAGE = 6
"""Pairs in the first stage of a two-stage confirmation (``mde_target``): the deviation the total
is sized by comes from these alone, and its t quantiles at ``n0 - 1`` degrees of freedom price a
small stage dearly (the MDE's factor is 4.16 at 4 pairs, 3.49 at 6, 3.25 at 8, 2.80 with the
deviation known), while every stage-one pair is spent whatever the noise turns out to be."""


def judge(refs: list[float], cands: list[float], planned: int, *, stopped_early: bool,
          first_stage: int | None = None) -> dict[str, Any]:
    """The paired verdict of the pairs run, with its spread and minimum detectable effect; with
    ``first_stage`` (a two-stage design) Stein's interval and MDE, from the first stage's spread."""
    d = 100.0 * (np.asarray(refs) - np.asarray(cands)) / np.asarray(refs)
    sd = float(np.std(d, ddof=1)) if d.size >= 2 else None
    log_sd = float(np.std(np.log(np.asarray(cands) / np.asarray(refs)), ddof=1)) if d.size >= 2 else None
    if first_stage is None:
        interval = paired_improvement(refs, cands)
        mde, mde_planned = mde_pct(sd, len(refs)), mde_pct(sd, planned)
    else:
        interval = stein_interval(d, first_stage)
        s0 = float(np.std(d[:first_stage], ddof=1))
        mde, mde_planned = stein_mde(s0, first_stage, len(refs)), stein_mde(s0, first_stage, planned)
    return {
        "improvement_pct": interval.mean, "ci_low": interval.low, "ci_high": interval.high,
        "verdict": NOT_CONFIRMED if stopped_early else verdict(interval),
        "pairs": len(refs), "pairs_planned": planned, "stopped_early": stopped_early,
        "sd_pct": sd, "log_ratio_sd": log_sd,
        "mde_pct": mde,
        "mde_pct_planned": mde_planned,
    }


def run_pairs(attempt: Attempt, pairs: int, out_dir: Path, *, seed: int, max_reruns: int,
              stop_for_futility: bool = True, on_pair: Callable[[int, str], None] | None = None,
              mde_target: float | None = None) -> dict[str, Any]:
    """Run up to ``pairs`` randomized pairs into ``out_dir`` (``ref-R``/``cand-R``; a voided
    pair's runs kept as ``*.void-K``) and judge them. A pair voided ``max_reruns + 1`` times in a
    row ends it with an error naming the last reason.

    With ``mde_target`` (percent) the number of pairs comes from the measured noise, in Stein's two
    stages (:func:`agent.stats.stein_pairs`): :data:`FIRST_STAGE` pairs, then as many more as their
    spread says a ``mde_target`` effect needs, ``pairs`` in all at most; each stage's orders are
    balanced on their own. The interval's width is then fixed by the first stage, so no remaining
    pair is ever futile and the run never stops early. ``design`` in the result says how the
    number was chosen and what it would have been without the cap."""
    if pairs < 1:
        raise AgentError(f"a confirmation needs at least one pair, got {pairs}")
    two_stage = mde_target is not None and pairs > FIRST_STAGE
    first = FIRST_STAGE if two_stage else pairs
    orders = pair_orders(first, seed)
    refs: list[float] = []
    cands: list[float] = []
    voided: list[dict[str, Any]] = []
    seeds: list[int] = []
    attempted = 0
    design: dict[str, Any] = {"kind": "fixed", "pairs": pairs}
    if mde_target is not None:  # asked for, but the cap leaves no room for a second stage
        design["mde_target_pct"] = float(mde_target)
    r = 0
    while r < len(orders):
        order = orders[r]
        pair_seed = int(seed) + r
        if on_pair is not None:
            on_pair(r, order[0])
        for k in range(max_reruns + 1):
            got: dict[str, float] = {}
            void: tuple[str, str] | None = None
            for arm in order:
                attempted += 1
                out = attempt(arm, out_dir / f"{arm}-{r}", pair_seed)
                if isinstance(out, Void):
                    void = (arm, out.describe())
                    break
                got[arm] = float(out.metric)
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
        r += 1
        diffs = [100.0 * (a - b) / a for a, b in zip(refs, cands, strict=True)]
        if two_stage and r == first:
            total, need = stein_pairs(diffs, float(mde_target), most=pairs)
            orders += pair_orders(total - first, seed + 0x5EED) if total > first else []
            design = {"kind": "two-stage", "mde_target_pct": float(mde_target), "first_stage": first,
                      "first_stage_sd_pct": float(np.std(diffs, ddof=1)), "pairs_needed": need, "cap": pairs,
                      "pairs": total}
        elif not two_stage and stop_for_futility and not can_still_improve(diffs, pairs):
            break
    planned = design["pairs"]
    result = judge(refs, cands, planned, stopped_early=len(refs) < planned, first_stage=first if two_stage else None)
    result.update({
        "reference_samples": refs, "samples": cands, "orders": [list(o) for o in orders[: len(refs)]], "seeds": seeds,
        "voided": voided, "voids_by_arm": {arm: sum(1 for v in voided if v["arm"] == arm) for arm in ARMS},
        "runs_attempted": attempted, "void_rate": round(len(voided) / attempted, 4) if attempted else 0.0,
        "design": design,
    })
    return result


def confirm_profile(attempt: Callable[[Any, Path, int], Outcome], candidate: Any, reference: Any, pairs: int,
                    out_dir: Path, *, seed: int, max_reruns: int,
                    on_pair: Callable[[int, str], None] | None = None, stop_for_futility: bool = True,
                    mde_target: float | None = None) -> dict[str, Any]:
    """:func:`run_pairs` of ``candidate`` against ``reference`` (two weight settings) through the
    experiment's ``attempt(setting, run_dir, seed)``."""
    def arm_attempt(arm: str, run_dir: Path, s: int) -> Outcome:
        return attempt(reference if arm == "ref" else candidate, run_dir, s)

    return run_pairs(arm_attempt, pairs, out_dir, seed=seed, max_reruns=max_reruns, on_pair=on_pair,
                     stop_for_futility=stop_for_futility, mde_target=mde_target)


def finished(saved: dict[str, Any], pairs: int, mde_target: float) -> bool:
    """Whether a saved confirmation ran to its end under this design (``pairs`` and
    ``mde_target``, 0 for a fixed number); one under another design, or interrupted, is redone.
    A confirmation saved before designs were recorded counts as fixed at its planned pairs."""
    design = saved.get("design") or {}
    target = float(design.get("mde_target_pct") or 0.0)
    cap = design.get("cap", design.get("pairs", saved.get("pairs_planned")))
    if cap != pairs or target != float(mde_target or 0.0):
        return False
    return len(saved.get("samples", [])) == saved.get("pairs_planned") or bool(saved.get("stopped_early"))


__all__ = ["ARMS", "FIRST_STAGE", "Attempt", "confirm_profile", "finished", "judge", "pair_orders", "run_pairs"]
