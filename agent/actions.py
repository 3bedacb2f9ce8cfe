"""The action → scheduler-profile mapping every tuner shares (pure, documented in docs/method.md).

An action is a vector in the box ``[-1, 1]^d``: one coordinate per tunable score plugin, plus one
for the NodeResourcesFit scoring strategy when ``tune_strategy`` is on. Every tuner (the policy,
random search, the Optuna samplers, the hill climber) searches this same box, so comparing them is
fair, and every point of the box maps to a valid ``KubeSchedulerConfiguration``.

Weight coordinate ``a`` of one plugin:

- ``a < DISABLE_BELOW`` (the bottom 10 % of the range) → the plugin is *disabled* (listed under
  ``disabled``; kube-scheduler reads weight 0 as weight 1, so "off" needs its own region);
- otherwise ``u = (a - DISABLE_BELOW) / (1 - DISABLE_BELOW)`` in [0, 1] and the weight is
  ``round(100 ** u)``: log-uniform over the integers 1..100. The weighted sum ranks nodes by weight
  *ratios*, so a log scale gives ratios 1:10 and 10:100 the same share of the box.
  Without ``allow_disable`` the whole range is the log scale.

Strategy coordinate ``s``: ``k = round(5 (s + 1))`` in 0..10 is the share of bin-packing:
``k = 0`` is ``LeastAllocated`` (the default, spreading), ``k = 10`` is ``MostAllocated``
(bin-packing), and ``0 < k < 10`` is ``RequestedToCapacityRatio`` with the two-point shape
``[(0, 10 - k), (100, k)]`` (scores in upstream's 0..10 shape units): a linear blend between the
two, as upstream's RTCR shape expresses both ends (``[{0,10},{100,0}]`` least-like,
``[{0,0},{100,10}]`` bin-packing).

The *lattice* (``ActionCodec.lattice_sizes`` / ``lattice_action``) is a discrete view of the same
box for policies with a categorical head (``scoretune train --action lattice``): each weight
coordinate picks one of :data:`WEIGHT_LEVELS` (disabled, then ten log-spaced weights 1..100 that
include the default weights 1, 2 and 3), the strategy coordinate one of its eleven levels. Every
lattice point decodes through the box (the centre of its weight's region), so the settings, the
observations and the exported configurations are those of the box; a categorical policy can put
any probability on "disabled" for each plugin, which a Gaussian over the box reaches only in its
bottom tenth.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from agent.errors import AgentError

if TYPE_CHECKING:
    from testbed.scheduler.config import Profile

DISABLE_BELOW = -0.8
"""Weight coordinates below this value disable the plugin."""
MAX_WEIGHT = 100
STRATEGY_LEVELS = 10
STRATEGY_DIM = "NodeResourcesFit.strategy"
"""The name of the extra (strategy) coordinate in search spaces and logs."""
WEIGHT_LEVELS: tuple[int | None, ...] = (None, *(round(MAX_WEIGHT ** (i / 9)) for i in range(10)))
"""The lattice's weight levels: disabled, 1, 2, 3, 5, 8, 13, 22, 36, 60, 100."""


def score_plugins() -> tuple[str, ...]:
    """The default score plugins, in kube-scheduler's order (from testbed.scheduler)."""
    from testbed.scheduler.config import SCORE_PLUGINS

    return tuple(SCORE_PLUGINS)


def default_weights() -> dict[str, int]:
    from testbed.scheduler.config import DEFAULT_SCORE_WEIGHTS

    return dict(DEFAULT_SCORE_WEIGHTS)


@dataclass(frozen=True)
class WeightSetting:
    """What an action means: integer weights (``None`` = disabled) and the Fit scoring strategy."""

    weights: Mapping[str, int | None]
    strategy: str = "LeastAllocated"
    shape: tuple[tuple[int, int], ...] | None = None
    """RequestedToCapacityRatio points ``(utilization 0..100, score 0..10)``; only for that strategy."""

    def label(self) -> str:
        """A short human-readable form, e.g. ``TaintToleration=3,ImageLocality=off|MostAllocated``."""
        parts = [f"{name}={'off' if w is None else w}" for name, w in self.weights.items()]
        strategy = self.strategy
        if self.shape is not None:
            strategy += "[" + ",".join(f"{u}:{s}" for u, s in self.shape) + "]"
        return ",".join(parts) + "|" + strategy

    def to_dict(self) -> dict:
        return {
            "weights": dict(self.weights),
            "strategy": self.strategy,
            "shape": [list(p) for p in self.shape] if self.shape is not None else None,
        }

    def to_profile(self, scheduler_name: str = "default-scheduler") -> Profile:
        """The testbed.scheduler Profile (and hence a KubeSchedulerConfiguration) for this setting."""
        from testbed.scheduler.config import profile_from_weights

        return profile_from_weights(
            dict(self.weights),
            strategy=self.strategy,
            shape=[tuple(p) for p in self.shape] if self.shape is not None else None,
            scheduler_name=scheduler_name,
        )


def weight_to_coord(weight: int | None, *, allow_disable: bool = True) -> float:
    """The centre of the box region that decodes to ``weight`` (inverse of :func:`coord_to_weight`)."""
    if weight is None:
        if not allow_disable:
            raise AgentError("a disabled plugin is not representable with allow_disable=False")
        return (-1.0 + DISABLE_BELOW) / 2.0
    if not 1 <= weight <= MAX_WEIGHT:
        raise AgentError(f"weight {weight!r} is outside 1..{MAX_WEIGHT}")
    lo = DISABLE_BELOW if allow_disable else -1.0
    # The centre (in u) of the interval that rounds to ``weight``: never on a region boundary, so a
    # float32 round trip decodes to the same weight.
    u_low = math.log(max(1.0, weight - 0.5)) / math.log(MAX_WEIGHT)
    u_high = math.log(min(float(MAX_WEIGHT), weight + 0.5)) / math.log(MAX_WEIGHT)
    return lo + 0.5 * (u_low + u_high) * (1.0 - lo)


def coord_to_weight(a: float, *, allow_disable: bool = True) -> int | None:
    """Decode one weight coordinate (clipped to [-1, 1]) to an integer weight or ``None`` (disabled)."""
    a = min(1.0, max(-1.0, float(a)))
    if allow_disable and a < DISABLE_BELOW:
        return None
    lo = DISABLE_BELOW if allow_disable else -1.0
    u = (a - lo) / (1.0 - lo)
    return int(min(MAX_WEIGHT, max(1, round(MAX_WEIGHT**u))))


def coord_to_strategy(s: float) -> tuple[str, tuple[tuple[int, int], ...] | None]:
    k = int(round((min(1.0, max(-1.0, float(s))) + 1.0) * STRATEGY_LEVELS / 2.0))
    if k <= 0:
        return "LeastAllocated", None
    if k >= STRATEGY_LEVELS:
        return "MostAllocated", None
    return "RequestedToCapacityRatio", ((0, STRATEGY_LEVELS - k), (100, k))


def strategy_to_coord(strategy: str, shape: Sequence[Sequence[int]] | None = None) -> float:
    if strategy == "LeastAllocated":
        k = 0
    elif strategy == "MostAllocated":
        k = STRATEGY_LEVELS
    elif strategy == "RequestedToCapacityRatio" and shape is not None and len(shape) == 2:
        k = int(shape[1][1])
    else:
        raise AgentError(
            f"strategy {strategy!r} with shape {shape!r} is not in the action space "
            "(LeastAllocated, MostAllocated, or RequestedToCapacityRatio [(0,10-k),(100,k)])"
        )
    return strategy_level_coord(k)


def strategy_level_coord(k: int) -> float:
    """The strategy coordinate of bin-packing share ``k`` in 0..10 (the centre that rounds to it)."""
    return 2.0 * k / STRATEGY_LEVELS - 1.0


@dataclass(frozen=True)
class ActionCodec:
    """Maps actions in ``[-1, 1]^dim`` to :class:`WeightSetting` and back.

    ``plugins`` are the tunable score plugins (default: all seven default score plugins); plugins
    not tuned keep their default weight.
    """

    plugins: tuple[str, ...] = field(default_factory=score_plugins)
    tune_strategy: bool = True
    allow_disable: bool = True

    def __post_init__(self) -> None:
        known = score_plugins()
        unknown = [p for p in self.plugins if p not in known]
        if unknown:
            raise AgentError(f"unknown score plugin(s) {unknown}; known: {list(known)}")
        if not self.plugins:
            raise AgentError("plugins: at least one tunable score plugin is needed")

    @property
    def dim(self) -> int:
        return len(self.plugins) + (1 if self.tune_strategy else 0)

    @property
    def names(self) -> tuple[str, ...]:
        """One name per coordinate (search-space parameter names for Optuna, columns in logs)."""
        return self.plugins + ((STRATEGY_DIM,) if self.tune_strategy else ())

    def decode(self, action: Sequence[float] | np.ndarray) -> WeightSetting:
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape[0] != self.dim:
            raise AgentError(f"action has {a.shape[0]} coordinates; this codec expects {self.dim} ({self.names})")
        if not np.all(np.isfinite(a)):
            raise AgentError(f"action {a.tolist()} has a non-finite coordinate")
        weights: dict[str, int | None] = dict(default_weights())
        for name, value in zip(self.plugins, a[: len(self.plugins)], strict=True):
            weights[name] = coord_to_weight(value, allow_disable=self.allow_disable)
        strategy, shape = coord_to_strategy(a[-1]) if self.tune_strategy else ("LeastAllocated", None)
        return WeightSetting(weights=weights, strategy=strategy, shape=shape)

    def encode(self, setting: WeightSetting) -> np.ndarray:
        """The canonical action of ``setting`` (decode(encode(s)) == s for every representable s)."""
        coords = [weight_to_coord(setting.weights[p], allow_disable=self.allow_disable) for p in self.plugins]
        if self.tune_strategy:
            coords.append(strategy_to_coord(setting.strategy, setting.shape))
        return np.asarray(coords, dtype=np.float32)

    def _levels(self) -> tuple[int | None, ...]:
        return WEIGHT_LEVELS if self.allow_disable else WEIGHT_LEVELS[1:]

    def lattice_sizes(self) -> list[int]:
        """The number of choices per coordinate (a ``MultiDiscrete`` action space)."""
        return [len(self._levels())] * len(self.plugins) + ([STRATEGY_LEVELS + 1] if self.tune_strategy else [])

    def lattice_action(self, index: Sequence[int] | np.ndarray) -> np.ndarray:
        """The box action of a lattice point (one choice per coordinate, see :data:`WEIGHT_LEVELS`)."""
        idx = np.asarray(index).reshape(-1)
        sizes = self.lattice_sizes()
        if idx.shape[0] != len(sizes) or not np.issubdtype(idx.dtype, np.integer):
            raise AgentError(f"a lattice action is {len(sizes)} integers ({self.names}), got {idx.tolist()}")
        if np.any(idx < 0) or np.any(idx >= np.asarray(sizes)):
            raise AgentError(f"lattice action {idx.tolist()} is outside the choices per coordinate {sizes}")
        levels = self._levels()
        coords = [weight_to_coord(levels[int(i)], allow_disable=self.allow_disable) for i in idx[: len(self.plugins)]]
        if self.tune_strategy:
            coords.append(strategy_level_coord(int(idx[-1])))
        return np.asarray(coords, dtype=np.float32)

    def reference(self) -> WeightSetting:
        """kube-scheduler's default profile: the default weights, LeastAllocated."""
        return WeightSetting(weights=default_weights(), strategy="LeastAllocated", shape=None)

    def reference_action(self) -> np.ndarray:
        return self.encode(self.reference())

    def equal(self) -> WeightSetting:
        """Every score plugin at weight 1 (what many clusters run when weights are "left equal")."""
        return WeightSetting(weights={p: 1 for p in default_weights()}, strategy="LeastAllocated", shape=None)

    def to_dict(self) -> dict:
        return {"plugins": list(self.plugins), "tune_strategy": self.tune_strategy, "allow_disable": self.allow_disable}

    @classmethod
    def from_dict(cls, data: Mapping) -> ActionCodec:
        return cls(
            plugins=tuple(data.get("plugins") or score_plugins()),
            tune_strategy=bool(data.get("tune_strategy", True)),
            allow_disable=bool(data.get("allow_disable", True)),
        )
