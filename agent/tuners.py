"""Every tuning method behind one ask-and-tell interface (like Optuna's ``study.ask/tell``).

A tuner is told the reference run first (step 0: kube-scheduler's default weights), then asked
``suggest()`` for the next action and ``tell(action, metric)`` its result, ``T`` times. All of them
search the same action box (``agent.actions``), so comparing methods is one loop
(``agent.evaluate``) and the live loop (``agent.tune``) runs any of them.

Methods: ``default`` (the reference weights every time), ``equal`` (every weight 1), ``random``
(uniform in the box), ``tpe``, ``gp`` and ``cmaes`` (Optuna's TPESampler, GPSampler, CmaEsSampler,
with start-up phases cut to fit a budget of ten runs), ``gp-noisy`` (GP-BO configured for a noisy
objective, agent.applied), ``hill`` (coordinate descent), and
``policy`` (a trained SB3 model, seeing exactly the observations it was trained on).
"""

from __future__ import annotations

import json
import logging
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from agent.actions import ActionCodec, WeightSetting
from agent.errors import AgentError, InputError, ScoretuneError

log = logging.getLogger(__name__)

BASELINES = ("default", "equal", "random", "tpe", "gp", "cmaes", "hill")
METHODS = (*BASELINES, "policy", "policy-sample")
NOISY_BASELINES = (*BASELINES, "gp-noisy")
"""The baselines of the noisy protocol: ``gp-noisy`` needs its posterior-mean recommendation, which
only `scoretune evaluate --protocol noisy` asks a tuner for (the live loop confirms by reruns)."""
ALGOS = ("ppo", "sac", "recurrent-ppo")
"""The algorithms a policy may be trained with (``scoretune train --algo``)."""

Method = StrEnum("Method", {m.upper().replace("-", "_"): m for m in METHODS})
"""The tuning methods as choices (a typer option annotated ``Method`` lists them in ``--help``)."""


_SAMPLE_SUFFIX = re.compile(r"sample(?:-std(?P<scale>\d+(?:\.\d+)?))?")


@dataclass(frozen=True)
class MethodSpec:
    """A policy method name of ``scoretune evaluate``, parsed once.

    The grammar: ``NAME`` plays the policy's mean action; ``NAME:sample`` draws from its Gaussian
    with the spread of its JSON; ``NAME:sample-stdX`` draws with the Gaussian's std times ``X``.
    ``NAME`` itself is free text (``ppo``, ``ppo@40k``, ``run/40k`` for a checkpoint of run ``run``).
    """

    name: str
    sample: bool = False
    std_scale: float | None = None
    """None: the policy's own spread (its JSON's ``std_scale``); validated where it is used (PolicyTuner)."""

    @classmethod
    def parse(cls, text: str) -> MethodSpec:
        base, sep, suffix = text.rpartition(":")
        match = _SAMPLE_SUFFIX.fullmatch(suffix) if sep else None
        if match is None:
            return cls(text)
        scale = match.group("scale")
        return cls(base, sample=True, std_scale=None if scale is None else float(scale))

    @property
    def kind(self) -> str:
        """The tuner :func:`make_tuner` builds: ``policy`` (mean action) or ``policy-sample``."""
        return "policy-sample" if self.sample else "policy"

    def __str__(self) -> str:
        if not self.sample:
            return self.name
        return f"{self.name}:sample" + ("" if self.std_scale is None else f"-std{self.std_scale:g}")


@runtime_checkable
class Tuner(Protocol):
    name: str

    def suggest(self) -> np.ndarray:
        """The next action to run (in the codec's box)."""

    def tell(self, action: np.ndarray, metric: float) -> None:
        """The metric (seconds, lower is better) measured for ``action``; the first tell is the reference."""


class FixedTuner:
    """Always the same setting: the fixed-weights baselines (``default`` and ``equal``)."""

    def __init__(self, name: str, codec: ActionCodec, setting: WeightSetting) -> None:
        self.name = name
        self.codec = codec
        self._action = codec.encode(setting)

    def suggest(self) -> np.ndarray:
        return self._action.copy()

    def tell(self, action: np.ndarray, metric: float) -> None:
        return None


class RandomTuner:
    """Uniform random search over the action box."""

    name = "random"

    def __init__(self, codec: ActionCodec, seed: int = 0) -> None:
        self.codec = codec
        self.rng = np.random.default_rng(seed)

    def suggest(self) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, self.codec.dim).astype(np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        return None


class OptunaTuner:
    """An Optuna sampler driven through ``study.ask`` / ``study.tell``.

    The reference run (and any action the sampler did not ask for) enters the study as a completed
    trial (``study.add_trial``), so model-based samplers start from what was measured.
    """

    def __init__(self, name: str, codec: ActionCodec, seed: int = 0, *, startup: int = 3,
                 deterministic: bool = False) -> None:
        """``deterministic``: GP-BO models the objective as noise-free; False (Optuna's default,
        and what every ``gp`` result so far used) fits a noise term, what a noisy lab needs."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.name = name
        self.codec = codec
        self.distributions = {n: optuna.distributions.FloatDistribution(-1.0, 1.0) for n in codec.names}
        x0 = dict(zip(codec.names, codec.reference_action().astype(float).tolist(), strict=True))
        # GPSampler and TPE's multivariate mode are "experimental" in Optuna 4 and CmaEsSampler's
        # x0/sigma0 deprecated since 4.9 (removal in 6; pyproject pins <5) with no replacement for
        # starting at a given point, which a tuner that knows the default weights should do.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.simplefilter("ignore", FutureWarning)
            if name == "tpe":
                sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
            elif name == "gp":
                sampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup,
                                                    deterministic_objective=deterministic)
            elif name == "cmaes":
                # One generation of the default popsize (4 + 3 ln d ~ 10) would be the whole budget:
                # a small population lets CMA-ES adapt within ten runs, starting at the reference.
                sampler = optuna.samplers.CmaEsSampler(x0=x0, sigma0=0.4, seed=seed, popsize=4, n_startup_trials=0)
            else:
                raise AgentError(f"unknown Optuna method {name!r}; valid: tpe, gp, cmaes")
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: Any = None

    def suggest(self) -> np.ndarray:
        trial = self.study.ask(self.distributions)
        self._pending = trial
        return np.asarray([trial.params[n] for n in self.codec.names], dtype=np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        import optuna

        action = np.asarray(action, dtype=np.float64)
        params = {n: float(np.clip(v, -1.0, 1.0)) for n, v in zip(self.codec.names, action, strict=True)}
        trial, self._pending = self._pending, None
        if trial is not None and all(abs(trial.params[n] - params[n]) < 1e-6 for n in self.codec.names):
            self.study.tell(trial, float(metric))
            return
        if trial is not None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.study.add_trial(
            optuna.trial.create_trial(params=params, distributions=self.distributions, value=float(metric))
        )


class HillClimber:
    """Coordinate descent from the reference: step each coordinate up, then down; halve on a full
    cycle without improvement. Deterministic given its seed (the coordinate order)."""

    name = "hill"

    def __init__(self, codec: ActionCodec, seed: int = 0, *, step: float = 0.5, min_step: float = 0.05) -> None:
        self.codec = codec
        self.order = np.random.default_rng(seed).permutation(codec.dim)
        self.delta = step
        self.min_step = min_step
        self.best: np.ndarray | None = None
        self.best_metric = float("inf")
        self.pos = 0
        self.sign = 1.0
        self.improved_in_cycle = False
        self._proposal: np.ndarray | None = None

    def _advance(self) -> None:
        if self.sign > 0:
            self.sign = -1.0
            return
        self.sign = 1.0
        self.pos += 1
        if self.pos >= len(self.order):
            self.pos = 0
            if not self.improved_in_cycle:
                self.delta = max(self.min_step, self.delta / 2.0)
            self.improved_in_cycle = False

    def suggest(self) -> np.ndarray:
        if self.best is None:
            self.best = self.codec.reference_action().astype(np.float64)
        for _ in range(2 * len(self.order) + 1):
            i = self.order[self.pos]
            x = self.best.copy()
            x[i] = np.clip(x[i] + self.sign * self.delta, -1.0, 1.0)
            if self.codec.decode(x) != self.codec.decode(self.best):
                self._proposal = x
                return x.astype(np.float32)
            self._advance()  # at the boundary, or a move too small to change the setting
        self._proposal = self.best.copy()
        return self._proposal.astype(np.float32)

    def tell(self, action: np.ndarray, metric: float) -> None:
        action = np.asarray(action, dtype=np.float64)
        if self.best is None:  # the reference run
            self.best, self.best_metric = action.copy(), float(metric)
            return
        if metric < self.best_metric:
            self.best, self.best_metric = action.copy(), float(metric)
            self.improved_in_cycle = True  # keep going in the same direction
        elif self._proposal is not None and np.allclose(action, self._proposal):
            self._advance()
        self._proposal = None


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


@dataclass(frozen=True)
class PolicyConfig:
    """How a shipped policy was trained: everything needed to rebuild its observations."""

    algo: str = "ppo"
    steps: int = 10
    reward: str = "best"
    info: str = "limited"
    frame_stack: int = 4
    metric: str = "mean"
    incumbent: bool = False
    act: str = "mean"
    """How the policy acts when ``--policy FILE`` names no method: ``mean`` (deterministic, method
    ``policy``) or ``sample`` (draws from its Gaussian, method ``policy-sample``): PPO optimises the
    *stochastic* policy, and validation decides which of the two a shipped policy uses."""
    std_scale: float = 1.0
    """Sampling spread: ``act: sample`` draws with the Gaussian's std times this (a lattice policy's
    choice probabilities at temperature ``std_scale``). PPO learns the std for its own training,
    where exploration also serves learning; a tuning budget of T runs may want another spread,
    so validation chooses it like ``act``."""
    action: str = "box"
    """The policy's action space: ``box`` (Gaussian) or ``lattice`` (categorical, agent.env.LatticeActions)."""
    codec: Mapping[str, Any] = field(default_factory=dict)
    format: str = "model"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> PolicyConfig:
        """The config of a policy (its JSON), every field checked: a broken file is one error naming
        the file and the field, before any model is loaded."""
        try:
            data = json.loads(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise InputError("the policy config is missing (the JSON beside the policy zip)", file=path) from None
        except IsADirectoryError:
            raise InputError("a directory, not a policy config", file=path) from None
        except OSError as err:
            raise InputError(f"cannot read the policy config: {err.strerror}", file=path) from None
        except UnicodeDecodeError as err:
            raise InputError(f"the policy config is not UTF-8 text (byte {err.start})", file=path) from None
        except (json.JSONDecodeError, RecursionError) as err:
            raise InputError(f"the policy config is not valid JSON: {err}", file=path) from None
        if not isinstance(data, dict):
            raise InputError(f"the policy config is a JSON {type(data).__name__}, not an object", file=path)
        known = {"algo", "steps", "reward", "info", "frame_stack", "metric", "incumbent", "act", "std_scale", "action",
                 "codec", "format"}
        config = cls(**{k: v for k, v in data.items() if k in known},
                     extra={k: v for k, v in data.items() if k not in known})
        config.check(path)
        return config

    def check(self, path: Path | None = None) -> None:
        """Every field of a loaded config has a usable value (InputError naming ``path`` and the field)."""
        from agent.env import ACTION_KINDS
        from agent.metrics import METRICS
        from agent.observation import INFO_MODES
        from agent.rewards import REWARDS

        choices = {"algo": ALGOS, "reward": REWARDS, "info": INFO_MODES, "metric": METRICS,
                   "act": ("mean", "sample"), "action": ACTION_KINDS, "format": ("model", "policy")}
        for name, valid in choices.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in valid:
                raise InputError(f"{value!r} is not one of {list(valid)}", file=path, field=name)
        for name, low, high in (("steps", 1, 10_000), ("frame_stack", 1, 1000)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise InputError(f"must be an integer in {low}..{high}, got {value!r}", file=path, field=name)
        if not isinstance(self.incumbent, bool):
            raise InputError(f"must be true or false, got {self.incumbent!r}", file=path, field="incumbent")
        scale = self.std_scale
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not (math.isfinite(scale) and scale > 0):
            raise InputError(f"std_scale must be a positive number, got {scale!r}", file=path, field="std_scale")
        if not isinstance(self.codec, Mapping):
            raise InputError(f"must be a mapping (agent.actions.ActionCodec.to_dict), got {self.codec!r}",
                             file=path, field="codec")
        if self.codec:
            try:
                ActionCodec.from_dict(self.codec)
            except ScoretuneError as err:
                raise InputError(f"not an action codec: {err}", file=path, field="codec") from None
            except (TypeError, ValueError, KeyError, AttributeError) as err:
                raise InputError(f"not an action codec: {type(err).__name__}: {err}", file=path, field="codec") from None


def policy_method(policy: Path) -> str:
    """The tuning method a policy file acts with by default (its config's ``act``)."""
    act = PolicyConfig.load(policy_config_path(policy)).act
    if act not in ("mean", "sample"):
        raise InputError(f"unknown act {act!r}; valid: mean, sample", file=policy_config_path(policy), field="act")
    return "policy-sample" if act == "sample" else "policy"


def policy_config_path(policy: Path) -> Path:
    """``policy.zip`` → ``policy.json`` (the config shipped beside the model); for a training
    checkpoint (``RUN/checkpoints/model_N_steps.zip``) without one, the run's ``RUN/model.json``,
    which ``scoretune train`` writes before the first checkpoint."""
    beside = policy.with_suffix(".json")
    run_config = policy.parent.parent / "model.json"
    if not beside.exists() and policy.parent.name == "checkpoints" and run_config.exists():
        return run_config
    return beside


def run_checkpoints(run: Path) -> dict[str, Path]:
    """A training run's checkpoints by label (``40k`` for ``model_40000_steps.zip``), in step order;
    each loads with the run's ``model.json`` (:func:`policy_config_path`)."""
    found: list[tuple[int, Path]] = []
    for path in (run / "checkpoints").glob("model_*_steps.zip"):
        match = re.fullmatch(r"model_(\d+)_steps\.zip", path.name)
        if match:
            found.append((int(match.group(1)), path))
    if not found:
        raise AgentError(f"{run}: no checkpoints (expected {run / 'checkpoints'}/model_N_steps.zip from `scoretune train`)")
    if not (run / "model.json").exists():
        raise AgentError(f"{run / 'model.json'}: missing; a checkpoint needs its run's config to be evaluated")
    return {(f"{n // 1000}k" if n % 1000 == 0 else f"{n}steps"): path for n, path in sorted(found)}


def load_model(policy: Path, algo: str, fmt: str = "model"):
    """An object with SB3's ``predict(obs, deterministic=True)``: a whole saved model (``model``:
    policy + optimiser state, what ``model.save`` writes) or just the policy network (``policy``:
    what ships in agent/policies/, see :func:`export_policy`). A ``recurrent-ppo`` model's
    ``predict`` also takes and returns the LSTM state (sb3-contrib's RecurrentPPO)."""
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.sac.policies import SACPolicy

    torch.set_num_threads(1)  # a 64-64 MLP: one thread answers in microseconds, more only contend
    if not policy.exists():
        raise InputError("policy file does not exist", file=policy)
    if not policy.is_file():
        raise InputError("not a file (a policy is a zip written by `scoretune train`)", file=policy)
    if algo not in ALGOS:
        raise AgentError(f"unknown algorithm {algo!r} in the policy config; valid: {', '.join(ALGOS)}")
    if fmt not in ("model", "policy"):
        raise InputError(f"unknown policy format {fmt!r}; valid: model, policy", file=policy, field="format")
    _check_policy_zip(policy, fmt)
    try:
        if algo == "recurrent-ppo":
            from sb3_contrib import RecurrentPPO
            from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

            return (RecurrentActorCriticPolicy if fmt == "policy" else RecurrentPPO).load(str(policy), device="cpu")
        if fmt == "policy":
            return {"ppo": ActorCriticPolicy, "sac": SACPolicy}[algo].load(str(policy), device="cpu")
        return {"ppo": PPO, "sac": SAC}[algo].load(str(policy), device="cpu")
    except Exception as err:  # noqa: BLE001 - torch/pickle/zip raise a dozen types for one cause: a broken file
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise InputError(f"not a loadable {algo.upper()} {fmt} ({type(err).__name__}: {first})", file=policy) from None


def _check_policy_zip(policy: Path, fmt: str) -> None:
    """The members SB3 writes: ``model.save`` a zip with ``data`` and ``policy.pth``; ``policy.save``
    a torch archive (a zip of ``<name>/data.pkl`` and tensors). Checked first, so a truncated or
    foreign file is named as such rather than by whatever torch's unpickler trips on."""
    import zipfile

    try:
        with zipfile.ZipFile(policy) as archive:
            names = archive.namelist()
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise InputError(f"not a policy zip (truncated or not a zip archive: {err})", file=policy) from None
    if bad is not None:
        raise InputError(f"the policy zip is corrupt (member {bad} fails its CRC check)", file=policy)
    if fmt == "model":
        missing = [m for m in ("data", "policy.pth") if m not in names]
    else:
        missing = [] if any(n.endswith("/data.pkl") for n in names) else ["<name>/data.pkl"]
    if missing:
        raise InputError(f"not an SB3 {fmt} zip (no member {missing[0]}; a policy is written by `scoretune train`)",
                         file=policy)


def export_policy(model_zip: Path, config: Mapping[str, Any], out_zip: Path, **extra: Any) -> Path:
    """Write only the policy network of a saved model (no optimiser state) and its config beside it."""
    algo = str(config.get("algo", "ppo"))
    model = load_model(model_zip, algo)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    if algo == "recurrent-ppo":
        _save_recurrent_policy(model.policy, out_zip)
    else:
        model.policy.save(str(out_zip))
    data = {**dict(config), **extra, "format": "policy"}
    policy_config_path(out_zip).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return out_zip


def _save_recurrent_policy(policy: Any, path: Path) -> None:
    """``policy.save`` for sb3-contrib's RecurrentActorCriticPolicy, with its LSTM's constructor
    arguments in the saved ``data``: sb3-contrib 2.x leaves them out (``_get_constructor_parameters``
    is not overridden), so ``RecurrentActorCriticPolicy.load`` would rebuild a default 256-unit LSTM
    and fail on the weights' shapes. The file is the same torch archive ``policy.save`` writes."""
    import torch

    data = {
        **policy._get_constructor_parameters(),
        "lstm_hidden_size": policy.lstm_actor.hidden_size,
        "n_lstm_layers": policy.lstm_actor.num_layers,
        "shared_lstm": policy.shared_lstm,
        "enable_critic_lstm": policy.enable_critic_lstm,
        "lstm_kwargs": dict(policy.lstm_kwargs),
    }
    torch.save({"state_dict": policy.state_dict(), "data": data}, str(path))


class PolicyTuner:
    """A trained policy as a tuner: ``tell`` steps the training environment with the measured
    metric, ``suggest`` asks the model for the next weights — its mean (Gaussian) or most likely
    (lattice) action when ``deterministic``, else a draw from its distribution with a seeded numpy
    generator (so a resumed experiment draws the same actions). The environment it steps always
    takes box actions: a lattice policy's choices are turned into the box action they stand for.

    A recurrent policy (``algo: recurrent-ppo``) carries its LSTM state from suggest to suggest, as
    in training: every ``suggest`` feeds the newest observation and keeps the state it returns; the
    first suggest after the reference run starts the episode (a zero state). A resumed experiment
    replays one ``suggest`` per logged step (agent.tune), so the state is rebuilt exactly."""

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
        from agent.env import ACTION_KINDS, make_env

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


def make_tuner(
    method: str,
    codec: ActionCodec,
    *,
    seed: int = 0,
    policy: Path | None = None,
    steps: int | None = None,
    context: Mapping[str, float] | None = None,
    std_scale: float | None = None,
) -> Tuner:
    """The tuner for ``method`` (one of :data:`METHODS`); ``std_scale`` overrides a policy's sampling spread."""
    if method == "default":
        return FixedTuner("default", codec, codec.reference())
    if method == "equal":
        return FixedTuner("equal", codec, codec.equal())
    if method == "random":
        return RandomTuner(codec, seed)
    if method in ("tpe", "gp", "cmaes"):
        return OptunaTuner(method, codec, seed)
    if method == "gp-noisy":
        from agent.applied import NoisyGP

        return NoisyGP(codec, seed)
    if method == "hill":
        return HillClimber(codec, seed)
    if method in ("policy", "policy-sample"):
        if policy is None:
            raise AgentError(f"method {method!r} needs a policy file (--policy FILE)")
        return PolicyTuner.from_file(policy, steps=steps, context=context, deterministic=method == "policy", seed=seed,
                                     std_scale=std_scale)
    raise AgentError(f"unknown method {method!r}; valid: {list(METHODS)}")
