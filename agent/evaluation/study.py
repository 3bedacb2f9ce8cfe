"""``scoretune evaluate``: every method on every scenario at the same budget, judged by what it applies.

One protocol, with the measurement noise as its parameter. Per scenario, seed ``i``, budget ``B``
and method:

1. the tuner measures the reference and ``B`` more runs (:func:`agent.evaluation.runner.run_experiment`,
   the loop the live experiment runs);
2. it names the profile it would apply (:func:`agent.tuners.applied.applied_setting`);
3. the evaluation, apart from the tuner, computes that profile's **true** metric.

How a run is measured and what the truth is are the two sides of the noise:

- **noise-free** (no noise model; one truth seed): every run of an experiment is the scenario on the
  simulator with the seed ``i`` (or ``--sim-seed``), memoised by profile; a profile's truth is that
  measurement, so every run any method made bounds the oracle (truth per scenario and seed).
- **noisy** (a noise model, ``truth_seeds >= 2``; agent.objectives.noisy): every run draws a fresh
  simulator seed and a calibrated measurement error (common random numbers: the same stream for
  every method at a seed and budget), and the truth of a profile is its mean over truth seeds no
  measurement draws, defined per scenario. Only applied profiles' truths bound the oracle.

The oracle is the best truth among the top profiles of a 500-run TPE search (on the seed-``i``
objective when noise-free, on simulator seed 0 when noisy) and every truth the rule above admits.
Scores (agent.evaluation.scoring): improvement over the default weights, over the best baseline,
and the share of the default→oracle gap closed. With ``--mismatch`` the truth is the scenario
perturbed as no twin is (agent.objectives.sim.mismatch_truth); tuners see only its view.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from agent.actions import ActionCodec
from agent.compute import Compute, run_tasks
from agent.errors import AgentError
from agent.evaluation import checkpoints
from agent.evaluation.runner import run_experiment
from agent.evaluation.scoring import score
from agent.evaluation.tables import make_out_dir, read_oracle_cache, read_results, write_tables
from agent.evaluation.worlds import ObjectiveFactory, _objective_seed, _worlds
from agent.provenance import provenance
from agent.tuners.applied import applied_setting, measured
from agent.tuners.factory import is_method, make_tuner
from functions.atomic import write_atomic
from functions.errors import InputError
from functions.platform import DEFAULT_PLATFORM, Platform, parse_platform

log = logging.getLogger(__name__)

NOISY_BUDGETS = (1, 2, 3, 5, 10, 20)


VIEWS = ("own", "next")
"""``evaluate --view``: the tuners' view of each task's cluster (:attr:`Protocol.view`)."""


@dataclass(frozen=True)
class Protocol:
    """How runs are measured and judged: ``noise`` is a noise model's dict
    (:class:`testbed.noise_model.NoiseModel`), None for the noise-free protocol."""

    steps: int = 10
    """The headline budget T (runs after the reference)."""
    budgets: tuple[int, ...] = ()
    """More budgets, each its own experiment (noisy); noise-free reads them off the T-run curve."""
    noise: Mapping[str, float] | None = None
    truth_seeds: int = 1
    oracle_runs: int = 500
    metric: str = "mean"
    sim_seed: int | None = None
    """Noise-free: the simulator's seed of every objective (None: the seed ``i``)."""
    mismatch: str = "none"
    """The truth's perturbations no twin has (testbed.sim.mismatch): none, mild, default, severe."""
    platform: Platform = DEFAULT_PLATFORM
    """What serves the functions in every run (testbed.platforms); the tuners know it."""
    view: str = "own"
    """What the tuners are told the cluster is: ``own`` (its view), or ``next`` -- the view of the
    next member of the task's generated family (a twin given the wrong cluster: what its trust
    rule must catch; methods that read no view are unaffected)."""

    @property
    def exact(self) -> bool:
        """A measurement is the truth: no noise model and one truth seed (the measurement's own)."""
        return self.noise is None

    def all_budgets(self) -> tuple[int, ...]:
        return (self.steps,) if self.exact else tuple(sorted(set(self.budgets) | {self.steps}))

    def check(self) -> None:
        if self.steps < 1:
            raise AgentError(f"evaluate: steps must be >= 1, got {self.steps}")
        if self.oracle_runs < 0:
            raise AgentError(f"evaluate: oracle_runs must be >= 0, got {self.oracle_runs}")
        if min(self.all_budgets()) < 1:
            raise AgentError(f"budgets must be >= 1, got {min(self.all_budgets())}")
        if self.exact and self.truth_seeds != 1:
            raise AgentError("the noise-free protocol's truth is the measurement itself: one truth seed")
        if not self.exact and self.truth_seeds < 2:
            raise AgentError(f"--truth-seeds must be >= 2, got {self.truth_seeds}")
        if not self.exact and self.sim_seed is not None:
            raise AgentError("--sim-seed fixes the simulator's seed, which the noisy protocol draws afresh for every run")
        from agent.metrics import METRICS
        from testbed.sim.mismatch import level

        level(self.mismatch)  # an unknown level is one line naming it
        if self.view not in VIEWS:
            raise AgentError(f"--view {self.view!r}: valid: {', '.join(VIEWS)}")
        if level(self.mismatch).structure is not None and str(self.platform) != str(DEFAULT_PLATFORM):
            raise AgentError(f"--mismatch {self.mismatch}: the structural levels are modelled in the Knative "
                             "simulation only (--platform knative)")
        try:
            object.__setattr__(self, "platform", parse_platform(self.platform))
        except InputError as err:
            raise AgentError(err.detail) from None
        if self.metric not in METRICS:
            raise AgentError(f"unknown metric {self.metric!r}; valid: {list(METRICS)}")


@dataclass(frozen=True)
class Task:
    """One scenario and its seeds (noise-free: one seed, since each seed is its own objective)."""

    scenario: str
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    policies: Mapping[str, str]
    protocol: Protocol
    oracle_known: Any = None
    """The oracle from an earlier evaluation's cache: a latency (noise-free) or profiles' actions."""
    prior: str | None = None
    """The transfer prior file of the methods that use the training tasks (None: the shipped one)."""


def run_task(task: Task, factory: ObjectiveFactory | None = None) -> dict[str, Any]:
    """Every method, seed and budget of one task: ``{"scenario", "rows", "oracle"}``."""
    if factory is None:
        from agent.objectives.sim import scenario_objective

        factory = scenario_objective
    codec = ActionCodec()
    reference = codec.reference()
    rows: list[dict[str, Any]] = []
    oracles: dict[int, Any] = {}
    for seeds, world in _worlds(task, factory, codec):
        t_ref = world.truth(reference)
        for seed in seeds:
            oracles[seed] = world.oracle_cache
            for budget in task.protocol.all_budgets():
                for method in task.methods:
                    tuner = make_tuner(method, codec, seed=seed, policies=task.policies, steps=budget,
                                       context=world.context, prior=Path(task.prior) if task.prior else None,
                                       view=world.view)
                    objective = world.measurement(seed, budget)
                    settings, values = run_experiment(tuner, objective, budget, getattr(tuner, "codec", codec))
                    applied = applied_setting(tuner, settings, values)
                    table = measured(settings, values)
                    m_ref, m_app = table[reference.label()][1], table[applied.label()][1]
                    rows.append({
                        "scenario": task.scenario, "seed": seed, "budget": budget, "method": method,
                        "metrics": values if task.protocol.exact else [round(v, 6) for v in values],
                        "applied": applied.label(), "true_reference": t_ref, "true_applied": world.truth(applied),
                        "claimed_pct": 100.0 * (m_ref - m_app) / m_ref, **world.noise,
                        "truth_seeds": task.protocol.truth_seeds, "oracle_search": world.oracle,
                    })
    log.info("evaluated %s (%d seed(s))", task.scenario, len(task.seeds))
    return {"scenario": task.scenario, "rows": rows, "oracle": oracles}


def _oracle_key(p: Protocol, scenario: str, objective_seed: int) -> str:
    world = ("" if p.mismatch == "none" else f":mismatch-{p.mismatch}") + \
        ("" if p.platform == DEFAULT_PLATFORM else f":{p.platform}")  # keys from before platforms stay
    if p.exact:
        return f"{scenario}@{objective_seed}:{p.oracle_runs}:{p.metric}{world}"
    return f"{scenario}:{p.oracle_runs}:{p.metric}{world}"


def oracle_cache_path(out_dir: Path, p: Protocol) -> Path:
    """``oracle.json`` (noise-free: the search's best latency) or ``oracle-profiles.json`` (noisy:
    the actions of its top profiles, whose truth is recomputed)."""
    return out_dir / ("oracle.json" if p.exact else "oracle-profiles.json")


def evaluate(
    scenarios: Sequence[str],
    *,
    seeds: int,
    out_dir: Path,
    protocol: Protocol = Protocol(),
    methods: Sequence[str] = (),
    policies: Mapping[str, str] | None = None,
    compute: Compute = Compute(),
    seed_offset: int = 0,
    objective_factory: ObjectiveFactory | None = None,
    config: Mapping[str, Any] | None = None,
    on_done: Callable[[str, int, int], None] | None = None,
    prior: Path | None = None,
) -> pd.DataFrame:
    """Run the protocol and write ``results.csv``, ``table.md/csv``, ``budget.md/csv``, the plots
    (noise-free) and ``evaluation.json`` to ``out_dir``; returns the headline table. Each finished
    task is kept in ``out_dir/tasks/`` (:mod:`agent.evaluation.checkpoints`) and reused when the
    same evaluation runs again, so a stopped one resumes. Without methods
    (``--oracle-only``) it only fills the oracle cache. ``prior``: the transfer prior the methods
    that use the training tasks read (default: the shipped one), checked before anything runs."""
    p = protocol
    policies = dict(policies or {})
    all_methods = tuple(methods) + tuple(m for m in policies if m not in methods)
    if not scenarios:
        raise AgentError("evaluate: no scenarios to evaluate")
    if seeds < 1:
        raise AgentError(f"evaluate: seeds must be >= 1, got {seeds}")
    p.check()
    for m in all_methods:
        if not is_method(m, policies):
            raise AgentError(f"method {m!r}: not a baseline nor a policy given with --policy or --ablation")
    if not all_methods and not p.exact:
        raise AgentError("evaluate: no methods to evaluate")
    if prior is not None:
        from agent.tuners.transfer import TransferPrior

        TransferPrior.load(prior)  # a broken prior is one line before anything runs
        prior = prior.resolve()
    if p.oracle_runs and p.oracle_runs < 500:
        log.warning("oracle_runs=%d: an oracle below 500 runs may be beaten by a tuner", p.oracle_runs)
    make_out_dir(out_dir)
    cache_path = oracle_cache_path(out_dir, p)
    cache = read_oracle_cache(cache_path)
    seed_list = tuple(range(seed_offset, seed_offset + seeds))

    def task(s: str, seeds_: tuple[int, ...], methods_: tuple[str, ...]) -> Task:
        key = _oracle_key(p, s, _objective_seed(p, seeds_[0]))
        return Task(s, seeds_, methods_, policies, p, cache.get(key), None if prior is None else str(prior))

    revision = checkpoints.code_revision()

    def run_all(tasks: list[Task], keep: bool = False) -> list[dict[str, Any]]:
        """Every task's result in task order; ``keep``: each is kept in DIR/tasks/ as it finishes,
        and those kept by an earlier, stopped run of the same evaluation are reused."""
        kept = {i: r for i, t in enumerate(tasks)
                if keep and (r := checkpoints.load(out_dir, t, revision, objective_factory)) is not None}
        todo = [i for i in range(len(tasks)) if i not in kept]
        if kept:
            log.info("resuming: %d of %d tasks kept in %s from an earlier run; %d to run",
                     len(kept), len(tasks), out_dir / checkpoints.TASKS_DIR, len(todo))

        def progress(k: int, result: dict[str, Any]) -> None:
            if keep:
                checkpoints.save(out_dir, tasks[todo[k]], result, revision, objective_factory)
            finished.append(k)
            if on_done is not None:
                on_done(result["scenario"], len(kept) + len(finished), len(tasks))

        finished: list[int] = []
        if objective_factory is not None:  # a test's objectives: not picklable, run here
            ran = []
            for k, i in enumerate(todo):
                ran.append(run_task(tasks[i], objective_factory))
                progress(k, ran[-1])
        else:
            ran = run_tasks(run_task, [tasks[i] for i in todo], compute, progress)
        by_index = {**kept, **dict(zip(todo, ran, strict=True))}
        results = [by_index[i] for i in range(len(tasks))]
        for result in results:  # in task order, whatever order they finished in
            for seed, value in result["oracle"].items():
                if p.oracle_runs > 0:
                    cache[_oracle_key(p, result["scenario"], _objective_seed(p, seed))] = value
        if p.oracle_runs > 0:
            write_atomic(cache_path, json.dumps(cache, indent=1 if not p.exact else 2, sort_keys=True) + "\n")
        return results

    if p.exact and p.sim_seed is not None and p.oracle_runs > 0:
        # one objective per scenario: search for its oracle once, before the methods
        run_all([task(s, (seed_list[0],), ()) for s in scenarios if task(s, (seed_list[0],), ()).oracle_known is None])
    if not all_methods:
        if p.sim_seed is None:
            run_all([task(s, (seed,), ()) for s in scenarios for seed in seed_list])
        log.info("oracle only: %d values cached in %s", len(cache), cache_path)
        return pd.DataFrame()
    if p.exact:
        tasks = [task(s, (seed,), all_methods) for s in scenarios for seed in seed_list]
    else:
        tasks = [task(s, seed_list, all_methods) for s in scenarios]
    log.info("%s protocol: %d scenarios x %d seeds x %d budgets x %d methods on %s",
             "noise-free" if p.exact else "noisy", len(scenarios), len(seed_list), len(p.all_budgets()),
             len(all_methods), compute.describe())
    results = run_all(tasks, keep=True)
    frame = score([row for r in results for row in r["rows"]], p.steps)
    frame["platform"] = str(p.platform)  # every row says what served the functions (as evaluation.json)
    table = write_tables(frame, out_dir, p.steps)
    meta: dict[str, Any] = {
        "protocol": "noise-free" if p.exact else "noisy", "scenarios": list(scenarios), "seeds": seeds,
        "seed_offset": seed_offset, "methods": list(all_methods), "policies": policies, "steps": p.steps,
        "oracle_runs": p.oracle_runs, "metric": p.metric, "mismatch": p.mismatch, "platform": str(p.platform),
        **({} if p.view == "own" else {"view": p.view}),
        "best_baseline": frame.attrs.get("best_baseline"),
        "config": dict(config or {}), "provenance": provenance(),
    }
    if prior is not None:
        meta["prior"] = str(prior)
    if p.exact:
        meta["sim_seed"] = p.sim_seed
    else:
        noise_rows = frame.groupby("scenario")[["lab_cv", "seed_cv", "noise_cv"]].first().reset_index()
        meta.update(budgets=list(p.all_budgets()), truth_seeds=p.truth_seeds, noise_model=dict(p.noise or {}),
                    noise_per_scenario=noise_rows.to_dict("records"))
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table


def _platform_of(directory: Path) -> str:
    """What an evaluation ran on (its evaluation.json; Knative for those written before platforms)."""
    try:
        return str(json.loads((directory / "evaluation.json").read_text(encoding="utf-8")).get("platform", DEFAULT_PLATFORM))
    except (OSError, ValueError, AttributeError):
        return str(DEFAULT_PLATFORM)


def combine(dirs: Sequence[Path], out_dir: Path, methods: Sequence[str] | None = None, *, steps: int | None = None,
            scenarios: Sequence[str] | None = None) -> pd.DataFrame:
    """One table from several evaluations of either protocol (a split evaluated in parts, or new
    methods on scenarios the others already ran on), rescored together: the oracle of a truth cell
    becomes the best of every search and every admissible truth in any of them, and the best
    baseline is chosen over the union. ``methods`` keeps only those (the oracle still counts every
    run); a kept method must cover the same cells as the others. ``steps``: the headline budget
    (default: the one the evaluations were run for). ``scenarios``: keep only the scenarios these
    names or shell patterns match (``gen-*``), to report a subset such as the unseen members."""
    if not dirs:
        raise AgentError("combine: no evaluation directories given")
    platforms = {str(d): _platform_of(Path(d)) for d in dirs}
    if len(set(platforms.values())) > 1:
        shown = ", ".join(f"{d}: {p}" for d, p in platforms.items())
        raise AgentError(f"combine: the directories ran on different platforms ({shown}); their oracles differ")
    # rows of evaluations written before the rows named their platform get their evaluation.json's
    rows = pd.concat([read_results(Path(d)).pipe(lambda r, d=d: r if "platform" in r.columns
                                                 else r.assign(platform=platforms[str(d)])) for d in dirs],
                     ignore_index=True)
    if scenarios:
        from fnmatch import fnmatchcase

        rows = rows[rows["scenario"].map(lambda name: any(fnmatchcase(name, p) for p in scenarios))]
        if rows.empty:
            raise AgentError(f"combine: no scenario of {[str(d) for d in dirs]} matches --scenarios {','.join(scenarios)}")
    if rows["truth_seeds"].eq(1).nunique() > 1:
        raise AgentError("combine: the directories mix the noise-free and the noisy protocol")
    dup = rows.duplicated(["scenario", "seed", "budget", "method"])
    if dup.any():
        r = rows[dup].iloc[0]
        raise AgentError(f"method {r['method']!r} ran twice on ({r['scenario']}, seed {r['seed']}, budget "
                         f"{r['budget']}); combine disjoint runs")
    cell = ["scenario", "seed"] if bool(rows["truth_seeds"].eq(1).all()) else ["scenario"]
    rows["oracle_search"] = rows.groupby(cell)["oracle_search"].transform("min")
    if methods:
        unknown = [m for m in methods if m not in set(rows["method"])]
        if unknown:
            raise AgentError(f"method {unknown[0]!r} is in none of {[str(d) for d in dirs]}")
    headline = steps if steps is not None else _headline(dirs, rows)
    frame = score(rows.to_dict("records"), headline, keep=list(methods) if methods else None)
    cells = {m: set(zip(g["scenario"], g["seed"], g["budget"], strict=True)) for m, g in frame.groupby("method")}
    union = set().union(*cells.values())
    partial = sorted(m for m, c in cells.items() if c != union)
    if partial:
        raise AgentError(f"method {partial[0]!r} lacks {len(union - cells[partial[0]])} of the {len(union)} "
                         "(scenario, seed) cells the others cover (select methods with --methods)")
    make_out_dir(out_dir)
    table = write_tables(frame, out_dir, headline)
    meta = {"protocol": "noise-free" if frame.attrs["exact"] else "noisy", "combined": [str(d) for d in dirs],
            "platform": next(iter(platforms.values())),
            "steps": headline, "scenarios": sorted(frame["scenario"].unique().tolist()),
            "methods": list(dict.fromkeys(frame["method"])), "best_baseline": frame.attrs.get("best_baseline"),
            "provenance": provenance()}
    if scenarios:
        meta["scenario_patterns"] = list(scenarios)
    write_atomic(out_dir / "evaluation.json", json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return table


def _headline(dirs: Sequence[Path], rows: pd.DataFrame) -> int:
    """The budget the evaluations were run for (their ``evaluation.json``), else the largest budget
    every method ran."""
    told = set()
    for d in dirs:
        try:
            told.add(int(json.loads((Path(d) / "evaluation.json").read_text(encoding="utf-8"))["steps"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if len(told) == 1 and told <= set(rows["budget"]):
        return told.pop()
    return int(rows.groupby("method")["budget"].max().min())
