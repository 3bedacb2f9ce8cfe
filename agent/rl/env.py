"""The Gymnasium environment: one episode is one tuning experiment of ``T`` runs.

Registered as ``scoretune/SchedulerTuning-v0`` (bump the version when the observation, action or
reward changes). :func:`make_env` adds the frame stack (the paper's second ingredient).

Why Gymnasium's ``FrameStackObservation`` rather than SB3's ``VecFrameStack``: the stack then lives
in the environment, not in a vectorised training wrapper, so the live tuning loop (one experiment,
no VecEnv) rebuilds *the very same* observation by running the same wrapper (see
``agent.tuners.PolicyTuner``); with ``VecFrameStack`` the inference path would need a VecEnv or a
re-implementation of its zero padding. Padding is ``"reset"``: before step 0 the stack repeats the
reference frame, which is a real observation, not an out-of-distribution zero vector.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError
from agent.objectives.protocol import Objective, ObjectiveSampler
from agent.rl.observation import ObservationBuilder
from agent.rl.rewards import TRAIN_REWARDS, TRUE_REWARD, reward, true_reward

ENV_ID = "scoretune/SchedulerTuning-v0"


class SchedulerTuningEnv(gym.Env):
    """Choose kube-scheduler score weights run after run to lower a workload's latency.

    ## Action Space
    ``Box(-1, 1, (d,), float32)``: one coordinate per tunable score plugin (weight 1..100 on a log
    scale, or disabled in the bottom 10 %) plus the NodeResourcesFit strategy coordinate
    (LeastAllocated → RequestedToCapacityRatio blends → MostAllocated); see ``agent.actions``.

    ## Observation Space
    One frame per :class:`~agent.rl.observation.ObservationBuilder` (``limited``: the applied action,
    log latency ratios to the reference and to the best so far, the step fraction; ``full`` adds
    absolute latencies and scenario facts). Unitless, bounded.

    ## Starting State
    ``reset`` draws an objective (scenario, seed) with ``self.np_random`` — or takes
    ``options["objective"]`` — and runs step 0: the reference profile (kube-scheduler's default
    weights). The first observation describes that run.

    ## Reward
    A percentage improvement (percent points), one of ``agent.rl.rewards.TRAIN_REWARDS``: over the
    previous step, the part of a new best (relative to the reference), over the reference, or
    (``true``) the change of the incumbent's true latency, read from the objective's ``truth``
    (a :class:`~agent.objectives.noisy.TrainingObjective`; an objective without one is its own truth).

    ## Episode End
    ``terminated`` after ``steps`` runs: the experiment's budget is part of the task and the step
    fraction is observed, so the last step is a true terminal state (no bootstrapping). The
    environment never truncates by itself.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        sampler: ObjectiveSampler | None = None,
        *,
        steps: int = 10,
        reward_kind: str = "best",
        info: str = "limited",
        codec: ActionCodec | None = None,
        incumbent: bool = False,
    ) -> None:
        super().__init__()
        if reward_kind not in TRAIN_REWARDS:
            raise AgentError(f"unknown reward {reward_kind!r}; valid: {list(TRAIN_REWARDS)}")
        if sampler is None:
            from agent.objectives.sim import split_sampler

            sampler = split_sampler("train")
        self.sampler = sampler
        self.steps = int(steps)
        self.reward_kind = reward_kind
        self.codec = codec or ActionCodec()
        self.builder = ObservationBuilder(self.codec, self.steps, info, incumbent=incumbent)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(self.codec.dim,), dtype=np.float32)
        self.observation_space = self.builder.space
        self.objective: Objective | None = None
        self.history: list[float] = []
        self.settings: list[WeightSetting] = []
        self._context: Mapping[str, float] = {}

    def _obs(self) -> np.ndarray:
        best = self.settings[int(np.argmin(self.history))]  # first of equals: the reference wins ties
        return self.builder.frame(self.settings[-1], self.history, context=self._context, best_setting=best)

    def _true_latency(self, setting: WeightSetting, measured: float) -> float:
        """The true latency of ``setting``: the objective's truth, or the measurement itself when the
        objective has none (noise-free, a measurement is the truth)."""
        truth = getattr(self.objective, "truth", None)
        return float(truth(setting)) if truth is not None else measured

    def _reward(self, setting: WeightSetting, metric: float) -> float:
        if self.reward_kind != TRUE_REWARD:
            return reward(self.reward_kind, self.history, metric)
        before = int(np.argmin(self.history))  # first of equals, as the applied profile is chosen
        if metric >= self.history[before]:
            return 0.0  # the incumbent did not change, nor did its truth (nothing to compute)
        q = self._true_latency
        return true_reward(q(self.settings[0], self.history[0]), q(self.settings[before], self.history[before]),
                           q(setting, metric))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        self.objective = options.get("objective") or self.sampler(self.np_random)
        self._context = dict(self.objective.context()) if self.builder.info == "full" else {}
        reference = self.codec.reference()
        metric = float(self.objective(reference))
        self.history = [metric]
        self.settings = [reference]
        return self._obs(), {"metric": metric, "step": 0, "objective": self.objective.name, "setting": reference}

    def step(self, action):
        if self.objective is None:
            raise AgentError("step() called before reset()")
        if len(self.history) > self.steps:
            raise AgentError(f"the episode ended after {self.steps} steps; call reset()")
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        setting = self.codec.decode(action)
        metric = float(self.objective(setting))
        r = self._reward(setting, metric)
        self.history.append(metric)
        self.settings.append(setting)
        step = len(self.history) - 1
        terminated = step >= self.steps
        info = {
            "metric": metric,
            "step": step,
            "best_metric": min(self.history),
            "reference_metric": self.history[0],
            "setting": setting,
        }
        return self._obs(), float(r), terminated, False, info


ACTION_KINDS = ("box", "lattice")


class LatticeActions(gym.ActionWrapper):
    """A ``MultiDiscrete`` view of the box (``ActionCodec.lattice_action``) for a categorical
    policy head: one choice per coordinate, each choice the centre of a box region, so the inner
    environment, its observations and every exported configuration stay those of the box."""

    def __init__(self, env: gym.Env, codec: ActionCodec) -> None:
        super().__init__(env)
        self.codec = codec
        self.action_space = spaces.MultiDiscrete(codec.lattice_sizes())

    def action(self, action):
        return self.codec.lattice_action(np.asarray(action, dtype=np.int64))


def make_env(
    sampler: ObjectiveSampler | None = None,
    *,
    steps: int = 10,
    reward_kind: str = "best",
    info: str = "limited",
    frame_stack: int = 4,
    codec: ActionCodec | None = None,
    incumbent: bool = False,
    action: str = "box",
) -> gym.Env:
    """The environment as trained and deployed: frame-stacked when ``frame_stack > 1``; with
    ``action="lattice"`` its actions are lattice points (:class:`LatticeActions`)."""
    if action not in ACTION_KINDS:
        raise AgentError(f"unknown action space {action!r}; valid: {list(ACTION_KINDS)}")
    codec = codec or ActionCodec()
    env: gym.Env = SchedulerTuningEnv(sampler, steps=steps, reward_kind=reward_kind, info=info, codec=codec,
                                      incumbent=incumbent)
    if frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, frame_stack, padding_type="reset")
        env = gym.wrappers.FlattenObservation(env)  # oldest frame first; a 1-D vector for the MLP
    elif frame_stack < 1:
        raise AgentError(f"frame_stack must be >= 1 (1 = off), got {frame_stack}")
    if action == "lattice":
        env = LatticeActions(env, codec)
    return env


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="agent.rl.env:SchedulerTuningEnv")
