"""Train a tuning policy with Stable-Baselines3 on the simulator (``scoretune train``).

Reads top to bottom like a CleanRL script: the arguments (a dataclass whose field docs are the
``--help``), seeding, the environments, the algorithm, the training loop with its callbacks, the
save. One episode is one tuning experiment of ``steps`` runs over a training scenario drawn at
random, so the hyper-parameters are those of *short* episodes: a rollout of ``n_steps`` = 40 per
environment is four whole experiments, not 2048 steps of one.

Outputs under ``--out``: ``model.zip`` (the MLP), ``model.json`` (everything needed to rebuild its
observations, plus the exact command), ``checkpoints/``, TensorBoard and CSV logs. With
``--ship NAME`` the policy network alone (no optimiser state) and its config are written to
``agent/policies/NAME.{zip,json}``.

``--algo recurrent-ppo`` (sb3-contrib's RecurrentPPO, an LSTM policy) is the paper's alternative
to frame stacking: the LSTM carries the history the stacked frames would. ``--noise FILE`` trains
on noisy episodes (agent/objectives/noisy.py): every run a fresh simulator seed and a calibrated measurement
error, as a real lab measures.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import AgentError
from agent.metrics import Metric
from agent.provenance import provenance
from agent.rl.artefacts import POLICIES_DIR
from agent.rl.env import ACTION_KINDS

log = logging.getLogger(__name__)



def _doc(text: str, *, short: str | None = None, **kw: Any) -> Any:
    """A field whose ``help`` is its ``--help`` line (``short``: a one-letter alias such as ``-o``)."""
    return field(metadata={"help": text, **({"short": short} if short else {})}, **kw)


class Algo(StrEnum):
    """The SB3 algorithms ``--algo`` offers."""

    PPO = "ppo"
    SAC = "sac"
    RECURRENT_PPO = "recurrent-ppo"


ActionKind = StrEnum("ActionKind", {k.upper(): k for k in ACTION_KINDS})
"""The policy's action space (``--action``): agent.rl.env.ACTION_KINDS as choices."""


@dataclass
class Args:
    """``scoretune train`` arguments; each field's ``help`` is its ``--help`` line."""

    out: str = _doc("Directory for the model, checkpoints and logs.", short="-o", default="runs/train")
    seed: int = _doc("Seed of everything: torch, numpy, the environments' scenario draws.", default=1)
    algo: Algo = _doc("The SB3 algorithm (recurrent-ppo: sb3-contrib's RecurrentPPO, an LSTM policy; the "
                      "paper's alternative to frame stacking).", default="ppo")
    total_timesteps: int = _doc("Environment steps (runs) to train for; one episode = `steps` runs.", default=6000)
    num_envs: int = _doc("Parallel environments (one process each with --vec subproc).", default=2)
    vec: str = _doc("subproc (SubprocVecEnv, parallel) or dummy (in-process, for tests).", default="subproc")
    ray: str = _doc("Run the environment workers on Ray: 'auto' starts one on this machine, HOST:PORT or "
                    "ray://HOST:PORT joins a cluster (docs/ray.md); empty = --vec.", default="")
    split: str = _doc("Scenario split to train on.", default="train")
    scenarios: str = _doc("Comma-separated scenario names to restrict training to (default: the whole split).", default="")
    generated: float = _doc("Share of training episodes on generated scenarios (testbed.generated), 0..1.", default=0.0)
    generated_traces: float = _doc("Share of the generated episodes that replay a window of a training-side trace "
                                   "(gentrace-N) instead of a synthetic workload, 0..1.", default=0.0)
    generated_small: float = _doc("Share of the generated episodes on the small heterogeneous family (gensmall-N: "
                                  "few small nodes of different generations, the lab's regime), 0..1; the rest "
                                  "split by --generated-traces.", default=0.0)
    steps: int = _doc("Runs per tuning experiment after the reference (T).", default=10)
    reward: str = _doc("Reward variant: best, previous, reference, or true: the change of the applied profile's true "
                       "latency, which the simulator knows (with --noise; agent.rl.rewards).", default="best")
    truth_seeds: int = _doc("With --reward true and --noise: simulator seeds of a profile's truth (computed only "
                            "when the incumbent changes).", default=3)
    info: str = _doc("Observation: limited (relative metrics only) or full (adds absolute figures).", default="limited")
    frame_stack: int = _doc("Frames stacked by FrameStackObservation (1 = off).", default=4)
    incumbent: bool = _doc("Observe the best action so far in every frame (agent.rl.observation).", default=False)
    metric: Metric = _doc("Latency metric.", default="mean")
    action: ActionKind = _doc("box (a Gaussian policy over the [-1,1] box) or lattice (a categorical head per "
                       "coordinate over agent.actions.WEIGHT_LEVELS and the strategy levels).", default="box")
    learning_rate: float = _doc("Adam learning rate.", default=3e-4)
    lr_schedule: str = _doc("constant, or linear: decay to a tenth of --learning-rate over the run (late updates "
                            "move the policy less, so later checkpoints drift less).", default="constant")
    n_steps: int = _doc("PPO rollout length per environment (tens: a few whole experiments).", default=40)
    batch_size: int = _doc("Minibatch size.", default=40)
    n_epochs: int = _doc("PPO epochs per rollout.", default=10)
    gamma: float = _doc("Discount; episodes are 10 steps, so little is lost at 0.95.", default=0.95)
    gae_lambda: float = _doc("GAE lambda.", default=0.95)
    clip_range: float = _doc("PPO clip range.", default=0.2)
    ent_coef: float = _doc("Entropy bonus.", default=0.0)
    log_std_init: float = _doc("Initial log std of the Gaussian policy (exploration in the [-1,1] box).", default=-0.5)
    net_arch: str = _doc("Hidden layer sizes of the MLP, comma-separated.", default="64,64")
    normalize_reward: bool = _doc("Scale rewards with VecNormalize's running return std (training only).", default=True)
    checkpoint_freq: int = _doc("Save a checkpoint every N environment steps (0 = never).", default=1000)
    progress_bar: bool = _doc("Show SB3's progress bar.", default=True)
    ship: str = _doc("Write the policy network to agent/policies/NAME.{zip,json} (empty = don't).", default="")
    noise: str = _doc("A noise calibration (`scoretune calibrate --noise`): train on noisy episodes, every run a "
                      "fresh simulator seed and a calibrated measurement error (agent/objectives/noisy.py); empty = the "
                      "noise-free protocol.", default="")
    noise_scale: float = _doc("With --noise: multiply the calibrated spread by this (0.25 = a lab a quarter as noisy; "
                              "as `evaluate --noise-scale`).", default=1.0)
    init: str = _doc("Start from this policy's weights (a zip from `train` or agent/policies/, same algorithm, "
                     "observation and network): fine-tuning, e.g. on noisy episodes.", default="")


LSTM_HIDDEN_SIZE = 64
"""Hidden units of RecurrentPPO's LSTM (``--algo recurrent-ppo``): a small memory for ten-step episodes."""


def make_sampler(args: Args, noise: Any = None):
    """The training objectives: the scenario split, measured with ``noise`` (a
    :class:`testbed.noise_model.NoiseModel`, see :func:`load_noise`) when given."""
    from agent.objectives.sim import split_sampler

    names = [s for s in args.scenarios.split(",") if s] or None
    sampler = split_sampler(args.split, metric=args.metric, names=names, generated=args.generated,
                            traces=args.generated_traces, small=args.generated_small)
    return sampler if noise is None else _noisy(sampler, noise, args)


def _noisy(sampler: Any, noise: Any, args: Args):
    """``sampler`` measured with ``noise``; with the ``true`` reward each objective carries its truth."""
    from agent.objectives.noisy import NoisySampler
    from agent.rl.rewards import TRUE_REWARD

    return NoisySampler(sampler, noise, truth_seeds=args.truth_seeds if args.reward == TRUE_REWARD else 0)


def load_noise(args: Args):
    """The noise model of ``--noise`` for ``--metric`` (None without one); a bad file is the one-line
    InputError of :func:`testbed.noise_model.load_noise_model`, naming the file."""
    if not args.noise:
        return None
    from testbed.noise_model import load_noise_model

    return load_noise_model(Path(args.noise), metric=str(args.metric)).scaled(args.noise_scale)


def check_args(args: Args) -> None:
    """Numbers and names SB3 would take and fail on later (or never): one line naming the option."""
    import math

    ints = {"total_timesteps": (1, 10**9), "num_envs": (1, 256), "n_steps": (1, 10**6), "batch_size": (1, 10**6),
            "n_epochs": (1, 10**4), "checkpoint_freq": (0, 10**9)}
    for name, (low, high) in ints.items():
        value = getattr(args, name)
        if not low <= value <= high:
            raise AgentError(f"--{name.replace('_', '-')} must be in {low}..{high}, got {value}")
    floats = {"noise_scale": (0.0, 100.0), "learning_rate": (0.0, 1.0), "gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0),
              "clip_range": (0.0, 10.0), "ent_coef": (0.0, 10.0), "log_std_init": (-20.0, 20.0)}
    for name, (low, high) in floats.items():
        value = getattr(args, name)
        if not (math.isfinite(value) and low <= value <= high) or (name == "learning_rate" and value == 0):
            raise AgentError(f"--{name.replace('_', '-')} must be a finite number in [{low:g}, {high:g}], got {value}")
    from agent.rl.rewards import TRAIN_REWARDS, TRUE_REWARD

    if args.reward not in TRAIN_REWARDS:
        raise AgentError(f"--reward must be one of {list(TRAIN_REWARDS)}, got {args.reward!r}")
    if args.reward == TRUE_REWARD and not 2 <= args.truth_seeds <= 100:
        raise AgentError(f"--truth-seeds must be in 2..100 with --reward true, got {args.truth_seeds}")
    if args.reward == TRUE_REWARD and not args.noise:
        log.warning("--reward true without --noise: a noise-free measurement is the truth, so it pays as --reward best")
    if args.vec not in ("subproc", "dummy"):
        raise AgentError(f"--vec must be subproc or dummy, got {args.vec!r}")
    sizes = [p.strip() for p in args.net_arch.split(",")]
    if not all(p.isdigit() and 0 < int(p) <= 4096 for p in sizes):
        raise AgentError(f"--net-arch must be comma-separated layer sizes in 1..4096, got {args.net_arch!r}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise AgentError(f"{args.out}: not a directory (--out names the training run's directory)")
    if args.algo == "recurrent-ppo" and args.frame_stack > 1:
        log.warning("--algo recurrent-ppo with --frame-stack %d: the LSTM already carries the history the stacked "
                    "frames would (the paper's alternative to frame stacking); --frame-stack 1 is the usual pairing",
                    args.frame_stack)


def learning_rate(args: Args):
    """The learning rate SB3 is given: a constant or a schedule of the remaining progress."""
    from stable_baselines3.common.utils import LinearSchedule

    if args.lr_schedule == "constant":
        return args.learning_rate
    if args.lr_schedule == "linear":
        return LinearSchedule(args.learning_rate, args.learning_rate / 10.0, 1.0)
    raise AgentError(f"--lr-schedule must be constant or linear, got {args.lr_schedule!r}")


def policy_config(args: Args, *, command: str, elapsed_s: float | None = None, noise: Any = None) -> dict[str, Any]:
    """The policy's JSON. ``noise`` (the :class:`~testbed.noise_model.NoiseModel` of ``--noise``) adds
    the fitted model beside the file's path, so a shipped JSON says how noisy its episodes were."""
    from agent.actions import ActionCodec

    config = {
        "algo": args.algo,
        "steps": args.steps,
        "reward": args.reward,
        "info": args.info,
        "frame_stack": args.frame_stack,
        "incumbent": args.incumbent,
        "metric": args.metric,
        "action": args.action,
        "codec": ActionCodec().to_dict(),
        "train_args": asdict(args),
        "command": command,
        "train_seconds": elapsed_s,
        "provenance": provenance(),
        "noise": args.noise or None,
    }
    if noise is not None:
        config["noise_model"] = noise.to_dict()
    return config


def init_weights(model: Any, policy: Path) -> None:
    """Copy the actor, critic and action std of a trained policy into ``model`` (``--init``)."""
    from agent.errors import InputError
    from agent.rl.artefacts import PolicyConfig, load_model, policy_config_path

    config = PolicyConfig.load(policy_config_path(policy))
    source = load_model(policy, config.algo, config.format)
    state = getattr(source, "policy", source).state_dict()
    try:
        model.policy.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0][:160]
        raise InputError(f"its network does not fit this run's (algorithm, observation, --net-arch): {first}",
                         file=policy) from None
    log.info("started from the weights of %s", policy)


def train(args: Args, sampler=None) -> Path:
    """Train and save; returns the model path. ``sampler`` replaces the scenario split (tests); with
    ``--noise`` it is measured with the calibrated noise like the split would be."""
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import CheckpointCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    from agent.rl.env import ACTION_KINDS, make_env

    if args.algo not in tuple(Algo):
        raise AgentError(f"--algo must be one of {[str(a) for a in Algo]}, got {args.algo!r}")
    if args.action not in ACTION_KINDS:
        raise AgentError(f"--action must be one of {list(ACTION_KINDS)}, got {args.action!r}")
    if args.action == "lattice" and args.algo == "sac":
        raise AgentError("--action lattice needs a categorical policy head: use --algo ppo or recurrent-ppo")
    check_args(args)
    lr = learning_rate(args)  # a bad --lr-schedule fails before any environment starts
    if args.ray:  # so does a Ray that cannot be reached
        from agent.compute import connect_ray

        connect_ray(args.ray, num_cpus=args.num_envs if args.ray == "auto" else None)
    noise = load_noise(args)  # so does a bad --noise file
    # the environments' objectives: the scenario split (or the test's sampler), measured with the
    # noise; built before anything is written, so a bad share fails with no run directory
    if sampler is None:
        sampler = make_sampler(args, noise)
    elif noise is not None:
        sampler = _noisy(sampler, noise, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "scoretune train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["train"] else ""

    # -- seeding, in one place ----------------------------------------------------------------------
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # small MLP: threads cost more than they give; leave cores to the envs

    # -- the environments: one tuning experiment per episode over the training scenarios -----------
    vec_cls = SubprocVecEnv if args.vec == "subproc" and args.num_envs > 1 else DummyVecEnv
    vec_kwargs: dict[str, Any] = {}
    if args.ray:
        from agent.rl.ray_vec_env import RayVecEnv

        vec_cls, vec_kwargs = RayVecEnv, {"address": args.ray}
    env_kwargs = dict(steps=args.steps, reward_kind=args.reward, info=args.info, frame_stack=args.frame_stack,
                      incumbent=args.incumbent, action=args.action)
    venv = make_vec_env(
        lambda: make_env(sampler, **env_kwargs),
        n_envs=args.num_envs,
        seed=args.seed,
        vec_env_cls=vec_cls,
        vec_env_kwargs=vec_kwargs,
    )
    if args.normalize_reward:  # reward scale only: observations are already unitless and bounded
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=args.gamma)

    # -- the algorithm ------------------------------------------------------------------------------
    net = [int(x) for x in args.net_arch.split(",") if x]
    ppo_kwargs = dict(
        learning_rate=lr,
        n_steps=args.n_steps,
        batch_size=args.batch_size,
        n_epochs=args.n_epochs,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_range=args.clip_range,
        ent_coef=args.ent_coef,
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    if args.algo == "ppo":
        model = PPO(
            "MlpPolicy",
            venv,
            policy_kwargs=dict(net_arch=dict(pi=net, vf=net), log_std_init=args.log_std_init),
            **ppo_kwargs,
        )
    elif args.algo == "recurrent-ppo":
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO(
            "MlpLstmPolicy",
            venv,
            policy_kwargs=dict(net_arch=dict(pi=net, vf=net), log_std_init=args.log_std_init,
                               lstm_hidden_size=LSTM_HIDDEN_SIZE),
            **ppo_kwargs,
        )
    else:
        model = SAC(
            "MlpPolicy",
            venv,
            learning_rate=lr,
            gamma=args.gamma,
            batch_size=max(64, args.batch_size),
            learning_starts=min(500, args.total_timesteps // 4),
            policy_kwargs=dict(net_arch=net),
            seed=args.seed,
            device="cpu",
            verbose=0,
        )
    if args.init:
        init_weights(model, Path(args.init))
    model.set_logger(configure(str(out / "logs"), ["stdout", "csv", "tensorboard"]))

    # -- the loop -----------------------------------------------------------------------------------
    callbacks = []
    if args.checkpoint_freq > 0:
        callbacks.append(
            CheckpointCallback(max(1, args.checkpoint_freq // args.num_envs), str(out / "checkpoints"), name_prefix="model")
        )
    # the config first, so every checkpoint can be loaded (and validated) while training runs
    (out / "model.json").write_text(json.dumps(policy_config(args, command=command, noise=noise), indent=2,
                                               sort_keys=True) + "\n")
    t0 = time.time()
    model.learn(total_timesteps=args.total_timesteps, callback=callbacks, progress_bar=args.progress_bar)
    elapsed = time.time() - t0
    venv.close()

    # -- the save: the MLP and what is needed to rebuild its observations ---------------------------
    model_path = out / "model.zip"
    model.save(str(model_path), exclude=["replay_buffer"])
    config = policy_config(args, command=command, elapsed_s=round(elapsed, 1), noise=noise)
    (out / "model.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    log.info("trained %d steps in %.0f s -> %s", args.total_timesteps, elapsed, model_path)
    if args.ship:
        from agent.rl.artefacts import export_policy

        shipped = export_policy(model_path, config, POLICIES_DIR / f"{args.ship}.zip")
        log.info("shipped the policy network as %s", shipped)
    return model_path
