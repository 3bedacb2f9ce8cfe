"""Tuners that use the training tasks: the transfer baselines a learned tuner has to beat.

A learned policy only beats "the best baseline" if it beats the baselines that also know the
training tasks (issue 24; `../shared`-independent notes in docs/method.md). All three read one
:class:`TransferPrior` (built by ``scoretune transfer-prior`` from the training scenarios only):
per candidate profile, its latency relative to the default weights on every training task.

- ``learned-default``: the one profile best on average over the training tasks, run every step
  (what a fixed "better default" gives);
- ``ws-cmaes``: Optuna's CmaEsSampler warm-started (WS-CMA-ES) with the training tasks' runs as
  ``source_trials``, each task's values turned into ranks first, so that the pooled top share is the
  best of every task rather than every run of the fastest cluster;
- ``gp-warm``: GP-BO whose first runs are the greedy portfolio's ``k`` profiles (each chosen to
  lower the mean over tasks of the best relative latency so far), then GP-BO from everything measured.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.actions import ActionCodec
from agent.errors import InputError
from agent.metrics import RUN_FACTS
from agent.tuners.search import FixedTuner, OptunaTuner

TRANSFER_PRIOR = Path(__file__).resolve().parents[1] / "policies" / "transfer-prior.json"
"""The shipped prior (``scoretune transfer-prior --out agent/policies/transfer-prior.json``)."""
PORTFOLIO = 3
"""Profiles of the portfolio ``gp-warm`` runs before GP-BO takes over."""


@dataclass(frozen=True)
class TransferPrior:
    """Candidate profiles (actions) and their latency relative to the default weights per training task."""

    actions: np.ndarray
    """(candidates, d) actions in the box."""
    relative: np.ndarray
    """(candidates, tasks): latency / the default weights' latency on that task (lower is better)."""
    tasks: list[str]
    provenance: dict[str, Any] = field(default_factory=dict)
    facts: np.ndarray | None = None
    """(tasks, len(RUN_FACTS)): the facts of the default weights' run on each task
    (agent.metrics.RUN_FACTS, in that order); None in a prior built before they were recorded."""

    def learned_default(self) -> np.ndarray:
        """The candidate with the lowest mean relative latency over the tasks."""
        return self.actions[int(np.argmin(self.relative.mean(axis=1)))]

    def portfolio(self, k: int) -> list[np.ndarray]:
        """The greedy portfolio: each next profile lowers most the mean over tasks of the best
        relative latency reached so far (the default weights' 1.0 to start)."""
        best = np.ones(self.relative.shape[1])
        chosen: list[int] = []
        for _ in range(min(k, len(self.actions))):
            gains = np.minimum(best[None, :], self.relative).mean(axis=1)
            gains[chosen] = np.inf
            i = int(np.argmin(gains))
            chosen.append(i)
            best = np.minimum(best, self.relative[i])
        return [self.actions[i] for i in chosen]

    def ranks(self) -> np.ndarray:
        """Per task, each candidate's rank (0 best) scaled to [0, 1]."""
        order = np.argsort(np.argsort(self.relative, axis=0), axis=0)
        return order / max(1, len(self.actions) - 1)

    def to_dict(self) -> dict[str, Any]:
        data = {"tasks": self.tasks, "actions": self.actions.round(6).tolist(),
                "relative": self.relative.round(6).tolist(), "provenance": self.provenance}
        if self.facts is not None:
            data["facts"] = {"names": list(RUN_FACTS), "values": self.facts.round(6).tolist()}
        return data

    def save(self, path: Path) -> None:
        from functions.atomic import write_atomic

        write_atomic(path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path, codec: ActionCodec | None = None) -> TransferPrior:
        """A prior file, every field checked: a broken one is one line naming the file and field."""
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise InputError("no transfer prior here (build one with `scoretune transfer-prior`)", file=path) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError(f"not a transfer prior ({type(err).__name__})", file=path) from None
        if not isinstance(data, dict):
            raise InputError("not a transfer prior (not a JSON object)", file=path)
        try:
            actions = np.asarray(data["actions"], dtype=np.float32)
            relative = np.asarray(data["relative"], dtype=np.float64)
            tasks = [str(t) for t in data["tasks"]]
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"not a transfer prior ({type(err).__name__}: {err})", file=path) from None
        dim = (codec or ActionCodec()).dim
        if actions.ndim != 2 or actions.shape[1] != dim or not np.all(np.abs(actions) <= 1.0):
            raise InputError(f"actions must be a list of {dim} numbers in [-1, 1] each", file=path, field="actions")
        if relative.shape != (len(actions), len(tasks)) or not np.all(np.isfinite(relative) & (relative > 0)):
            raise InputError("relative must hold a positive latency ratio per candidate and task", file=path,
                             field="relative")
        return cls(actions, relative, tasks, dict(data.get("provenance") or {}), _load_facts(data, len(tasks), path))


def _load_facts(data: dict[str, Any], tasks: int, path: Path) -> np.ndarray | None:
    if "facts" not in data:
        return None
    facts = data["facts"]
    if not isinstance(facts, dict) or facts.get("names") != list(RUN_FACTS):
        raise InputError(f"facts must name {list(RUN_FACTS)} (names) with their values", file=path, field="facts")
    try:
        values = np.asarray(facts.get("values"), dtype=np.float64)
    except (TypeError, ValueError):
        values = np.empty(0)
    if values.shape != (tasks, len(RUN_FACTS)) or not np.all(np.isfinite(values)):
        raise InputError(f"facts.values must hold {len(RUN_FACTS)} finite numbers per task", file=path,
                         field="facts.values")
    return values


def learned_default(prior: TransferPrior, codec: ActionCodec) -> FixedTuner:
    return FixedTuner("learned-default", codec, codec.decode(prior.learned_default()))


def gp_warm(prior: TransferPrior, codec: ActionCodec, seed: int, k: int = PORTFOLIO) -> OptunaTuner:
    tuner = OptunaTuner("gp", codec, seed, startup=k)
    tuner.name = "gp-warm"
    for action in prior.portfolio(k):
        tuner.study.enqueue_trial({n: float(v) for n, v in zip(codec.names, action, strict=True)})
    return tuner


def ws_cmaes(prior: TransferPrior, codec: ActionCodec, seed: int) -> OptunaTuner:
    """CmaEsSampler with the prior's candidates as source trials, valued by their per-task rank."""
    import optuna

    distributions = {n: optuna.distributions.FloatDistribution(-1.0, 1.0) for n in codec.names}
    ranks = prior.ranks()
    source = [optuna.trial.create_trial(params={n: float(v) for n, v in zip(codec.names, a, strict=True)},
                                        distributions=distributions, value=float(r))
              for task in range(ranks.shape[1]) for a, r in zip(prior.actions, ranks[:, task], strict=True)]
    tuner = OptunaTuner("cmaes", codec, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        sampler = optuna.samplers.CmaEsSampler(source_trials=source, seed=seed, popsize=4, n_startup_trials=0)
    tuner.study = optuna.create_study(direction="minimize", sampler=sampler)
    tuner.name = "ws-cmaes"
    return tuner

