"""The one place a method name becomes a tuner (``scoretune tune``, ``evaluate``, ``lab-table``, bench).

The grammar of a method name:

- a baseline: ``default``, ``equal``, ``random``, ``tpe``, ``gp``, ``cmaes``, ``hill``, ``gp-noisy``;
  or one that uses the training tasks: ``learned-default``, ``ws-cmaes``, ``gp-warm`` (agent.tuners.transfer);
- the model-based tuner ``twin`` (agent.tuners.twin: searches this cluster's fitted twin);
- the learned transfer tuner ``task-mixture`` (agent.tuners.mixture: the validated mixture for its
  first runs, then GP-BO); the mixture alone as ``task-mixture:sigmaX`` with its mismatch ``sigma``
  set to X, ``...:widthY`` with its facts kernel's width Y, ``...:nofacts`` blind
  to the reference run's facts, ``...:broadB`` with a share B of the starting weight spread over
  every task whatever the facts say, ``...:latency`` weighing gains as latency, not as shares of
  each task's headroom;
- a policy: ``policy`` (its mean action) or ``policy-sample`` (draws from its distribution) with a
  policy file; in ``evaluate``, any name mapped to a policy file (``--ablation NAME=FILE``), where
  ``NAME:sample`` draws with the spread of its JSON and ``NAME:sample-stdX`` with X times it;
- any of them with ``+reeval`` or ``+reevalK``: the last runs of the budget re-measure the
  incumbent (agent.tuners.noise_aware);
- any of them with ``+gpK``: it proposes the first K runs, then GP-BO continues from every run
  (agent.tuners.handover), e.g. ``policy:sample+gp3``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import ActionCodec
from agent.errors import AgentError
from agent.objectives.view import UserView
from agent.tuners.handover import HandOver, split_handover
from agent.tuners.noise_aware import NoisyGP, Reeval, split_rule
from agent.tuners.protocol import Tuner
from agent.tuners.search import FixedTuner, HillClimber, OptunaTuner, RandomTuner

BASELINES = ("default", "equal", "random", "tpe", "gp", "cmaes", "hill")
TRANSFER_BASELINES = ("learned-default", "ws-cmaes", "gp-warm")
"""Baselines that use the training tasks (agent.tuners.transfer): a learned tuner must beat these too."""
TWIN_METHODS: dict[str, dict[str, Any]] = {
    "twin": {},
    "twin-nofit": {"fit": False},
    "twin-nogp": {"residual": False},
    "twin-notrust": {"trust": False},
    "gp-twin-warm": {"warm_only": 3},
}
"""The model-based tuner (agent.tuners.twin) and its ablations, each a row that shows what one
ingredient adds: ``twin-nofit`` the twin left as the view is written (no fit; the residual GP still
learns), ``twin-nogp`` no GP on what the twin gets wrong (its weight 1, one offset),
``twin-notrust`` the twin followed whatever it cannot explain, ``gp-twin-warm`` GP-BO over the pool
after the twin's first three proposals."""
LEARNED = ("task-mixture", *TWIN_METHODS)
"""Learned tuners that are not policies: agent.tuners.mixture, and the model-based tuner
agent.tuners.twin with its ablations (they learn this cluster's twin from its runs; they need the
user's view)."""
METHODS = (*BASELINES, *TRANSFER_BASELINES, *LEARNED, "policy", "policy-sample")
"""What ``scoretune tune --method`` takes."""
NOISY_BASELINES = (*BASELINES, *TRANSFER_BASELINES, "gp-noisy")
"""Every baseline: ``gp-noisy`` applies its posterior-mean recommendation, which only the
evaluation asks a tuner for (the live loop confirms by reruns)."""

Method = StrEnum("Method", {m.upper().replace("-", "_"): m for m in METHODS})
"""The tuning methods as choices (a typer option annotated ``Method`` lists them in ``--help``)."""

_SAMPLE_SUFFIX = re.compile(r"sample(?:-std(?P<scale>\d+(?:\.\d+)?))?")
_MIXTURE = re.compile(r"task-mixture(?::sigma(?P<sigma>\d+(?:\.\d+)?))?(?::(?:width(?P<width>\d+(?:\.\d+)?)|(?P<nofacts>nofacts)))?(?::broad(?P<broad>\d+(?:\.\d+)?))?(?P<latency>:latency)?")


@dataclass(frozen=True)
class MethodSpec:
    """A policy method name of ``scoretune evaluate``, parsed once (the module's grammar)."""

    name: str
    sample: bool = False
    std_scale: float | None = None
    """None: the policy's own spread (its JSON's ``std_scale``); validated where it is used."""

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


def is_baseline(method: str) -> bool:
    """A baseline, with or without a ``+reeval`` rule (a name with a malformed rule is not one)."""
    try:
        return split_rule(split_handover(method)[0])[0] in NOISY_BASELINES
    except AgentError:
        return False


def is_method(method: str, policies: Mapping[str, str] | None = None) -> bool:
    """A name :func:`make_tuner` can build from the baselines and ``policies`` (a malformed ``+`` rule
    is an AgentError naming it)."""
    first, k = split_handover(method)
    if first in (policies or {}):
        return True
    base, _ = split_rule(first)  # a malformed rule is an error that says so
    mixture = _MIXTURE.fullmatch(base)
    if mixture is not None:
        _mixture_args(mixture, method, handed_over=k is not None)  # impossible widths are an error that says so
        return True
    return base in NOISY_BASELINES or base in TWIN_METHODS


def _mixture_args(match: re.Match[str], method: str, *,
                  handed_over: bool = False) -> tuple[float, float | None, bool, float]:
    """``(sigma, width, per_gap, broad)`` of a task-mixture name; an AgentError naming it when they cannot be."""
    from agent.tuners.mixture import BROAD, SIGMA, WIDTH

    if handed_over and match.group(0) == "task-mixture":
        raise AgentError(f"method {method!r}: task-mixture already hands over to GP-BO; name the mixture alone "
                         "with its parameters (task-mixture:sigma0.05+gpK)")
    sigma = float(match.group("sigma") or SIGMA)
    width = None if match.group("nofacts") else float(match.group("width") or WIDTH)
    if sigma <= 0 or (width is not None and width <= 0):
        raise AgentError(f"method {method!r}: task-mixture's sigma and width must be positive")
    broad = float(match.group("broad") or BROAD)
    if broad > 1:
        raise AgentError(f"method {method!r}: task-mixture's broad share must be at most 1")
    return sigma, width, not match.group("latency"), broad


def make_tuner(
    method: str,
    codec: ActionCodec,
    *,
    seed: int = 0,
    policy: Path | None = None,
    policies: Mapping[str, str] | None = None,
    steps: int | None = None,
    context: Mapping[str, float] | None = None,
    std_scale: float | None = None,
    prior: Path | None = None,
    view: UserView | None = None,
) -> Tuner:
    """The tuner for ``method``. ``policy``: the file of ``policy`` / ``policy-sample``;
    ``policies``: names mapped to policy files (evaluate's ablations); ``steps``: the budget (a
    policy observes its progress through it, ``+reeval`` re-measures in its last runs); ``context``:
    the scenario facts of a full-information policy; ``std_scale`` overrides a policy's spread;
    ``prior``: the transfer prior of the methods that use the training tasks (default: the shipped one);
    ``view``: what a user knows of the cluster and workload (agent.objectives.view), which ``twin`` needs."""
    first, k = split_handover(method)
    if k is not None:
        if first == "task-mixture":
            _mixture_args(_MIXTURE.fullmatch(first), method, handed_over=True)
        return HandOver(make_tuner(first, codec, seed=seed, policy=policy, policies=policies, steps=steps,
                                   context=context, std_scale=std_scale, prior=prior, view=view), codec, k, seed)
    base, rule = split_rule(method)
    if base == "task-mixture":  # the validated tuner: the mixture, then GP-BO
        from agent.tuners.mixture import HANDOVER, SIGMA, WIDTH

        tuner = make_tuner(f"task-mixture:sigma{SIGMA:g}:width{WIDTH:g}+gp{HANDOVER}", codec, seed=seed, steps=steps,
                           prior=prior)
        tuner.name = "task-mixture"
    elif policies and method in policies:
        spec = MethodSpec.parse(base)
        tuner = _policy(spec.kind, Path(policies[method]), seed=seed, steps=steps, context=context,
                        std_scale=spec.std_scale)
    elif base in TWIN_METHODS:
        tuner = _twin(codec, seed, view, prior, base)
    elif base in ("policy", "policy-sample"):
        if policy is None:
            raise AgentError(f"method {method!r} needs a policy file (--policy FILE)")
        tuner = _policy(base, policy, seed=seed, steps=steps, context=context, std_scale=std_scale)
    else:
        tuner = _baseline(base, codec, seed, prior)
    if rule is not None:
        if steps is None:
            raise AgentError(f"method {method!r} needs the budget (steps) to know when to re-measure")
        tuner = Reeval(tuner, codec, steps, rule)
    return tuner


def _baseline(method: str, codec: ActionCodec, seed: int, prior_file: Path | None = None) -> Tuner:
    if method == "default":
        return FixedTuner("default", codec, codec.reference())
    if method == "equal":
        return FixedTuner("equal", codec, codec.equal())
    if method == "random":
        return RandomTuner(codec, seed)
    if method in ("tpe", "gp", "cmaes"):
        return OptunaTuner(method, codec, seed)
    if method == "gp-noisy":
        return NoisyGP(codec, seed)
    if method == "hill":
        return HillClimber(codec, seed)
    mixture = _MIXTURE.fullmatch(method)
    if mixture is not None:
        from agent.tuners import transfer
        from agent.tuners.mixture import TaskMixture

        sigma, width, per_gap, broad = _mixture_args(mixture, method)
        tuner = TaskMixture(transfer.TransferPrior.load(prior_file or transfer.TRANSFER_PRIOR, codec), codec, sigma=sigma,
                            width=width, per_gap=per_gap, broad=broad)
        tuner.name = method
        return tuner
    if method in TRANSFER_BASELINES:
        from agent.tuners import transfer

        prior = transfer.TransferPrior.load(prior_file or transfer.TRANSFER_PRIOR, codec)
        build = {"learned-default": lambda: transfer.learned_default(prior, codec),
                 "ws-cmaes": lambda: transfer.ws_cmaes(prior, codec, seed),
                 "gp-warm": lambda: transfer.gp_warm(prior, codec, seed)}
        return build[method]()
    raise AgentError(f"unknown method {method!r}; valid: {list(METHODS)}")


def _twin(codec: ActionCodec, seed: int, view: UserView | None, prior_file: Path | None, method: str = "twin") -> Tuner:
    from agent.tuners import transfer
    from agent.tuners.twin import POOL_PRIOR, TwinTuner

    if view is None:
        raise AgentError(f"method {method!r} needs the cluster and the workload it tunes (the user's view)")
    prior = transfer.TransferPrior.load(prior_file or transfer.TRANSFER_PRIOR, codec)
    return TwinTuner(view, codec, seed, prior_actions=np.array(prior.portfolio(POOL_PRIOR)), name=method,
                     **TWIN_METHODS[method])


def _policy(kind: str, path: Path, *, seed: int, steps: int | None, context: Mapping[str, float] | None,
            std_scale: float | None) -> Tuner:
    from agent.tuners.policy import PolicyTuner

    return PolicyTuner.from_file(path, steps=steps, context=context, deterministic=kind == "policy", seed=seed,
                                 std_scale=std_scale)
