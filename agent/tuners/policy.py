"""A trained policy as a tuner: it sees exactly the observations it was trained on."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError, InputError
from agent.rl.artefacts import PolicyConfig, load_model, policy_config_path


class _AnswerSlot:
    """An objective whose next answer is set from outside: lets the policy tuner feed measured
    metrics through the *same* environment and frame-stack wrapper the policy was trained in."""

    name = "live"

    def __init__(self, context: Mapping[str, float] | None = None) -> None:
        self.value: float | None = None
        self._context = dict(context or {})

    def __call__(self, setting: WeightSetting) -> float:
        if self.value is None:
            raise AgentError("the policy tuner was asked to run a profile it was not told about")
        value, self.value = self.value, None
        return value

    def context(self) -> Mapping[str, float]:
        return self._context


class PolicyTuner:
    """A trained policy as a tuner: ``tell`` steps the training environment with the measured
    metric, ``suggest`` asks the model for the next weights — its mean (Gaussian) or most likely
    (lattice) action when ``deterministic``, else a draw from its distribution with a seeded numpy
    generator (so a resumed experiment draws the same actions). The environment it steps always
    takes box actions: a lattice policy's choices are turned into the box action they stand for.

    A recurrent policy (``algo: recurrent-ppo``) carries its LSTM state from suggest to suggest, as
    in training: every ``suggest`` feeds the newest observation and keeps the state it returns; the
    first suggest after the reference run starts the episode (a zero state). A resumed experiment
    replays one ``suggest`` per logged step (agent.tuners.drive), so the state is rebuilt exactly."""

    name = "policy"

    def __init__(
        self,
        model: Any,
        config: PolicyConfig,
        *,
        steps: int | None = None,
        context: Mapping[str, float] | None = None,
        deterministic: bool = True,
        seed: int = 0,
        std_scale: float | None = None,
    ) -> None:
        from agent.rl.env import ACTION_KINDS, make_env

        if config.action not in ACTION_KINDS:
            raise InputError(f"unknown action space {config.action!r}; valid: {list(ACTION_KINDS)}", field="action")
        self.std_scale = float(config.std_scale if std_scale is None else std_scale)
        if not (math.isfinite(self.std_scale) and self.std_scale > 0):
            raise InputError(f"std_scale must be a positive number, got {self.std_scale!r}", field="std_scale")
        self.deterministic = deterministic
        self.rng = np.random.default_rng(seed)
        self.model = model
        self.config = config
        self.codec = ActionCodec.from_dict(config.codec) if config.codec else ActionCodec()
        self.slot = _AnswerSlot(context)
        self.env = make_env(
            lambda rng: self.slot,
            steps=steps or config.steps,
            reward_kind=config.reward,
            info=config.info,
            frame_stack=config.frame_stack,
            codec=self.codec,
            incumbent=config.incumbent,
        )
        self.obs: np.ndarray | None = None
        self.recurrent = config.algo == "recurrent-ppo"
        self._lstm_state: tuple[np.ndarray, ...] | None = None
        self._episode_start = True

    @classmethod
    def from_file(cls, policy: Path, *, steps: int | None = None, context: Mapping[str, float] | None = None,
                  deterministic: bool = True, seed: int = 0, std_scale: float | None = None):
        config_path = policy_config_path(policy)
        config = PolicyConfig.load(config_path)
        model = load_model(policy, config.algo, config.format)
        tuner = cls(model, config, steps=steps, context=context, deterministic=deterministic, seed=seed,
                    std_scale=std_scale)
        expected = getattr(getattr(model, "observation_space", None), "shape", None)
        built = tuner.env.observation_space.shape
        if expected is not None and tuple(expected) != tuple(built):
            raise InputError(f"the policy observes shape {tuple(expected)} but its config (info, frame_stack, "
                             f"incumbent, codec) builds {tuple(built)}: not the config it was trained with",
                             file=config_path)
        return tuner

    def suggest(self) -> np.ndarray:
        if self.obs is None:
            raise AgentError("the policy tuner must be told the reference run before it suggests")
        if self.recurrent:
            return self._suggest_recurrent()
        if self.config.action == "lattice":
            if self.deterministic:
                index, _ = self.model.predict(self.obs, deterministic=True)
            else:
                index = [self.rng.choice(len(p), p=p) for p in self._choice_probs()]
            return self.codec.lattice_action(np.asarray(index, dtype=np.int64))
        action, _ = self.model.predict(self.obs, deterministic=True)
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if not self.deterministic:
            action = action + self.std_scale * self._std() * self.rng.standard_normal(action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _suggest_recurrent(self) -> np.ndarray:
        """:meth:`suggest` for an LSTM policy: the same actions, with the state carried along."""
        if self.config.action == "lattice" and not self.deterministic:
            index = [self.rng.choice(len(p), p=p) for p in self._choice_probs()]
            return self.codec.lattice_action(np.asarray(index, dtype=np.int64))
        action, self._lstm_state = self.model.predict(self.obs, state=self._lstm_state,
                                                      episode_start=np.array([self._episode_start]),
                                                      deterministic=True)
        self._episode_start = False
        if self.config.action == "lattice":
            return self.codec.lattice_action(np.asarray(action, dtype=np.int64))
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if not self.deterministic:
            action = action + self.std_scale * self._std() * self.rng.standard_normal(action.shape)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def _choice_probs(self) -> list[np.ndarray]:
        """The categorical probabilities of each lattice coordinate for the current observation."""
        import torch

        policy = getattr(self.model, "policy", self.model)
        with torch.no_grad():
            obs, _ = policy.obs_to_tensor(self.obs)
            if self.recurrent:  # the LSTM steps on this observation, as predict would
                shape = policy.lstm_hidden_state_shape
                h, c = self._lstm_state or (np.zeros(shape), np.zeros(shape))
                state = (torch.as_tensor(h, dtype=torch.float32), torch.as_tensor(c, dtype=torch.float32))
                start = torch.as_tensor([float(self._episode_start)], dtype=torch.float32)
                dist, (h, c) = policy.get_distribution(obs, state, start)
                self._lstm_state, self._episode_start = (h.cpu().numpy(), c.cpu().numpy()), False
                dist = dist.distribution
            else:
                dist = policy.get_distribution(obs).distribution
        probs = [d.probs[0].cpu().numpy().astype(np.float64) ** (1.0 / self.std_scale) for d in dist]
        return [p / p.sum() for p in probs]

    def _std(self) -> np.ndarray:
        """The state-independent action std of a PPO Gaussian policy (``exp(log_std)``)."""
        policy = getattr(self.model, "policy", self.model)
        log_std = getattr(policy, "log_std", None)
        if log_std is None:
            raise AgentError("stochastic suggestions need a PPO policy with a Gaussian log_std")
        return np.exp(log_std.detach().cpu().numpy().astype(np.float64))

    def tell(self, action: np.ndarray, metric: float) -> None:
        self.slot.value = float(metric)
        if self.obs is None:
            if self.codec.decode(action) != self.codec.reference():
                raise AgentError("the policy tuner's first run must be the reference profile")
            self.obs, _ = self.env.reset(options={"objective": self.slot})
            self._lstm_state, self._episode_start = None, True  # a new episode: the LSTM starts afresh
        else:
            self.obs, *_ = self.env.step(np.asarray(action, dtype=np.float32))


