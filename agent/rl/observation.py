"""What the policy sees after each run (the paper's third ingredient: limited domain information).

One *frame* describes one finished step of a tuning experiment. The ``limited`` frame holds only
quantities that mean the same on every cluster and workload:

| slot | value | range |
|---|---|---|
| ``a_0..a_{d-1}`` | the applied action, in its canonical (decoded, re-encoded) form | [-1, 1] |
| ``rel_ref``  | ``ln(m_t / m_ref)``: latency relative to the reference | clipped to [-2, 2] |
| ``rel_best`` | ``ln(m_t / best_{t-1})``: relative to the best before this step (0 at step 0) | [-2, 2] |
| ``best_ref`` | ``ln(best_t / m_ref)``: the best so far relative to the reference | [-2, 0] |
| ``progress`` | ``t / T``: the step fraction | [0, 1] |

With ``incumbent=True`` the frame also holds ``b_0..b_{d-1}``, the action of the best run so far
(canonical form; the reference until something beats it). A frame stack of k shows only the last k
actions, so without it a policy that found its best at step 2 has forgotten where it was by step 7:
every optimiser keeps its incumbent, and this is the policy's. It is still limited information (an
action, not a fact about the cluster).

Nothing identifies the cluster or the workload: no node counts, no names, no absolute latency. The
``full`` variant (for the ablation) appends what a "domain-aware" agent would see: the absolute
latencies ``ln(m_t / 1 s)`` and ``ln(m_ref / 1 s)`` and the scenario context (node count, cores,
memory, request rate, functions, duration; each ``ln(1 + x) / 5``).

Logs of latency ratios are symmetric (x2 and /2 have the same size) and already near [-1, 1], so
no running normalisation (VecNormalize statistics) is needed at inference time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from gymnasium import spaces

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError

INFO_MODES = ("limited", "full")
CONTEXT_FEATURES = ("nodes", "cpu_cores", "memory_gib", "requests_per_s", "functions", "duration_s")
REL_CLIP = 2.0


def _log_ratio(a: float, b: float) -> float:
    return float(np.clip(math.log(a / b), -REL_CLIP, REL_CLIP))


class ObservationBuilder:
    """Builds one observation frame per step; the space is fixed by the codec and the info mode."""

    def __init__(self, codec: ActionCodec, steps: int, info: str = "limited", *, incumbent: bool = False) -> None:
        if info not in INFO_MODES:
            raise AgentError(f"unknown observation info mode {info!r}; valid: {list(INFO_MODES)}")
        if steps < 1:
            raise AgentError(f"steps must be >= 1, got {steps}")
        self.codec = codec
        self.steps = steps
        self.info = info
        self.incumbent = bool(incumbent)
        d = codec.dim
        low = [-1.0] * d + [-REL_CLIP, -REL_CLIP, -REL_CLIP, 0.0]
        high = [1.0] * d + [REL_CLIP, REL_CLIP, 0.0, 1.0]
        if self.incumbent:
            low += [-1.0] * d
            high += [1.0] * d
        if info == "full":
            low += [-10.0, -10.0] + [0.0] * len(CONTEXT_FEATURES)
            high += [10.0, 10.0] + [10.0] * len(CONTEXT_FEATURES)
        self.space = spaces.Box(np.asarray(low, np.float32), np.asarray(high, np.float32), dtype=np.float32)

    @property
    def names(self) -> tuple[str, ...]:
        base = tuple(f"a:{n}" for n in self.codec.names) + ("rel_ref", "rel_best", "best_ref", "progress")
        if self.incumbent:
            base += tuple(f"b:{n}" for n in self.codec.names)
        if self.info == "full":
            base += ("log_latency_s", "log_reference_s") + tuple(f"ctx:{c}" for c in CONTEXT_FEATURES)
        return base

    def frame(
        self,
        setting: WeightSetting,
        history: list[float],
        *,
        context: Mapping[str, float] | None = None,
        best_setting: WeightSetting | None = None,
    ) -> np.ndarray:
        """The frame after the last run in ``history`` (``history[0]`` = reference, step = len - 1);
        ``best_setting`` (the incumbent) is required when the builder observes it."""
        if not history:
            raise AgentError("frame: the history must hold at least the reference run")
        metric, ref = history[-1], history[0]
        best_before = min(history[:-1]) if len(history) > 1 else metric
        best = min(history)
        step = len(history) - 1
        values = list(self.codec.encode(setting).astype(np.float64))
        values += [
            _log_ratio(metric, ref),
            _log_ratio(metric, best_before),
            min(0.0, _log_ratio(best, ref)),
            min(1.0, step / self.steps),
        ]
        if self.incumbent:
            if best_setting is None:
                raise AgentError("frame: this observation holds the incumbent; pass best_setting")
            values += list(self.codec.encode(best_setting).astype(np.float64))
        if self.info == "full":
            ctx = context or {}
            values += [float(np.clip(math.log(metric), -10, 10)), float(np.clip(math.log(ref), -10, 10))]
            values += [float(np.clip(math.log1p(max(0.0, float(ctx.get(c, 0.0)))) / 5.0, 0, 10)) for c in CONTEXT_FEATURES]
        return np.asarray(values, dtype=np.float32)
