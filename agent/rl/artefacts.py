"""A trained policy's files: its config (the JSON beside the zip), loading, export, checkpoints.

``scoretune train`` writes ``model.zip`` (SB3's whole model) and ``model.json``; ``--ship NAME``
exports only the policy network (no optimiser state) to ``agent/policies/NAME.{zip,json}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.actions import ActionCodec
from agent.errors import AgentError, InputError, ScoretuneError

POLICIES_DIR = Path(__file__).resolve().parents[1] / "policies"
SHIPPED_POLICY = POLICIES_DIR / "scoretune-ppo.zip"
"""The policy ``make tune`` and ``evaluate`` use unless told otherwise."""
ALGOS = ("ppo", "sac", "recurrent-ppo")
"""The algorithms a policy may be trained with (``scoretune train --algo``)."""


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
    """The policy's action space: ``box`` (Gaussian) or ``lattice`` (categorical, agent.rl.env.LatticeActions)."""
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
        from agent.metrics import METRICS
        from agent.rl.env import ACTION_KINDS
        from agent.rl.observation import INFO_MODES
        from agent.rl.rewards import TRAIN_REWARDS

        choices = {"algo": ALGOS, "reward": TRAIN_REWARDS, "info": INFO_MODES, "metric": METRICS,
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


