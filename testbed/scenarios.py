"""The scenario library: (cluster spec, workload recipe, seed) pairs with a train/test split.

A scenario names a shipped cluster (``testbed/clusters/<name>.yaml``) and a workload *recipe*: a
call of a ``loadgen.synth`` generator or of ``loadgen.traces.read_trace`` over a public trace with
its parameters and seed. A trace recipe names its file by its path under the trace directory
(:mod:`loadgen.trace_store`: ``scoretune traces fetch`` puts it there); a missing file is an error
that names the ``traces fetch`` command to run. Trace data is read where it lies, never copied;
:func:`build_workload` generates a workload once and caches it as Parquet under
``$SCORETUNE_CACHE`` (default ``~/.cache/scoretune``), keyed by the recipe's hash and, for a trace,
the file it read, never inside the repository.

Scenarios are short (5-6 simulated minutes) so one evaluation on the simulator costs well under a
second. The split (docs/scenarios.md): the *test* split holds two clusters and two workloads that
no training scenario uses, plus pairs that recombine a seen cluster with an unseen workload and
the other way round, so generalisation to unseen clusters and workloads can be measured apart.

The lab scenario of ``make tune`` is here too (:func:`lab_workload` on ``lab-small``): four cheap
functions of the suite under a Poisson load this 2-core machine sustains next to everything else
on it (about 0.25 cores of function work on average), so node capacities and speeds -- not the
machine -- decide the latency, and where the scheduler puts instances shows up in the measurements.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loadgen.workload import Workload, read_workload, write_workload
from testbed.errors import ConfigError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
Split = Literal["train", "test"]


def cache_dir() -> Path:
    return Path(os.environ.get("SCORETUNE_CACHE", Path.home() / ".cache" / "scoretune"))


@dataclass(frozen=True)
class WorkloadRecipe:
    """``kind`` "synth": ``loadgen.synth.<generator>(**params, seed=seed)``; "trace":
    ``loadgen.traces.read_trace(generator, locate(path), **params, seed=seed)``."""

    name: str
    kind: Literal["synth", "trace"]
    generator: str
    params: Mapping[str, Any]
    path: str | None = None
    description: str = ""

    def key(self, seed: int) -> str:
        source = None
        if self.kind == "trace":
            # the file actually read: a fixture or another copy never shares a cache entry
            from loadgen.trace_store import locate

            found = locate(self.path or "")
            stat = found.stat()
            source = [str(found.resolve()), stat.st_size, stat.st_mtime_ns]
        blob = json.dumps({"kind": self.kind, "gen": self.generator, "params": dict(self.params),
                           "path": self.path, "seed": seed, "source": source, "v": 1}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: str
    workload: WorkloadRecipe
    split: Split
    seed: int = 0
    description: str = ""
    tags: tuple[str, ...] = field(default=())


WEB = {"dynamic-html": 0.35, "float-ops": 0.25, "aes": 0.2, "thumbnailer": 0.2}
CPU_MIX = {"matmul": 0.3, "linpack": 0.2, "aes": 0.3, "float-ops": 0.2}
MEMORY_MIX = {"json-serde": 0.3, "linpack": 0.25, "matmul": 0.25, "thumbnailer": 0.2}
ALL_LIGHT = {
    "dynamic-html": 0.2, "float-ops": 0.2, "aes": 0.15, "thumbnailer": 0.15, "matmul": 0.1,
    "json-serde": 0.08, "linpack": 0.07, "disk-io": 0.05,
}

WORKLOADS: dict[str, WorkloadRecipe] = {
    w.name: w
    for w in [
        WorkloadRecipe("poisson-web", "synth", "poisson", {"rate_per_s": 40.0, "duration_s": 300.0, "functions": WEB},
                       description="steady Poisson web mix"),
        WorkloadRecipe("mmpp-cpu", "synth", "mmpp",
                       {"rates_per_s": [8.0, 45.0], "mean_dwell_s": [40.0, 20.0], "duration_s": 300.0, "functions": CPU_MIX},
                       description="bursty on/off CPU-heavy mix (2-MMPP)"),
        WorkloadRecipe("diurnal-all", "synth", "diurnal",
                       {"mean_rate_per_s": 30.0, "duration_s": 360.0, "functions": ALL_LIGHT, "amplitude": 0.8},
                       description="one compressed day over eight functions"),
        WorkloadRecipe("steps-memory", "synth", "steps",
                       {"rates_per_s": [5.0, 20.0, 40.0, 15.0], "step_s": 75.0, "functions": MEMORY_MIX},
                       description="step changes over memory-heavy functions"),
        WorkloadRecipe("azure2021", "trace", "azure2021", {"minutes": 5.0, "rate_scale": 8.0},
                       path="azure/azure2021_first199_invocations_invitro.csv",
                       description="Azure Functions 2021 invocations (InVitro sample), x8, in 5 min"),
        WorkloadRecipe("azure2019-extremes", "trace", "azure2019", {"minutes": 5.0, "rate_scale": 150.0},
                       path="azure/azure2019_invitro_mapper_extremes/invocations.csv",
                       description="Azure Functions 2019 per-minute counts (InVitro mapper extremes), x150, in 5 min"),
        WorkloadRecipe("alibaba-genai-qps", "trace", "alibaba-genai-qps", {"minutes": 5.0, "rate_scale": 0.02},
                       path="alibaba/genai2026_qps.csv.gz",
                       description="Alibaba GenAI 2026 gateway QPS, x0.02, a day in 5 min"),
        WorkloadRecipe("alibaba-gpu2023", "trace", "alibaba-gpu2023", {"minutes": 5.0, "rate_scale": 0.5},
                       path="alibaba/gpu2023_openb_pod_list_default.csv",
                       description="Alibaba GPU-2023 pod creations as invocations, x0.5, in 5 min"),
        WorkloadRecipe("alibaba-genai", "trace", "alibaba-genai", {"minutes": 5.0, "rate_scale": 0.1},
                       path="alibaba/genai2026_lora_request_trace.csv.gz",
                       description="Alibaba GenAI 2026 LoRA requests, x0.1, three weeks in 5 min"),
    ]
}


def _s(name: str, cluster: str, workload: str, split: Split, desc: str, seed: int = 0) -> Scenario:
    return Scenario(name=name, cluster=cluster, workload=WORKLOADS[workload], split=split, seed=seed, description=desc)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        # ---- train
        _s("homog-web", "homogeneous-20", "poisson-web", "train", "packing vs spreading on identical nodes"),
        _s("homog-diurnal", "homogeneous-20", "diurnal-all", "train", "a compressed day on identical nodes"),
        _s("speed-cpu", "mixed-speed-16", "mmpp-cpu", "train", "bursty CPU load on fast-small/slow-big nodes"),
        _s("speed-azure19", "mixed-speed-16", "azure2019-extremes", "train", "Azure 2019 extremes on mixed speeds"),
        _s("images-web", "image-skew-12", "poisson-web", "train", "cold starts: warm slow nodes vs cold fast nodes"),
        _s("images-gpu2023", "image-skew-12", "alibaba-gpu2023", "train", "Alibaba pod arrivals with skewed caches"),
        _s("spot-cpu", "spot-16", "mmpp-cpu", "train", "bursty CPU load with slow PreferNoSchedule spot nodes"),
        _s("spot-diurnal", "spot-16", "diurnal-all", "train", "a day with spot nodes"),
        _s("memory-steps", "memory-tight-12", "steps-memory", "train", "memory-heavy steps on memory-tight nodes"),
        _s("lab-web", "lab-small", "poisson-web", "train", "the embedded lab's cluster with a web mix", seed=0),
        # ---- test: unseen clusters (zones-18, alibaba-gpu2023-32, large-120), unseen workloads
        # (azure2021, alibaba-genai-qps, alibaba-genai), and recombinations
        _s("zones-web", "zones-18", "poisson-web", "test", "unseen cluster, seen workload"),
        _s("alibaba-cpu", "alibaba-gpu2023-32", "mmpp-cpu", "test", "unseen cluster, seen workload"),
        _s("homog-azure21", "homogeneous-20", "azure2021", "test", "seen cluster, unseen workload"),
        _s("spot-genai-qps", "spot-16", "alibaba-genai-qps", "test", "seen cluster, unseen workload"),
        _s("zones-genai", "zones-18", "alibaba-genai", "test", "unseen cluster and unseen workload"),
        _s("memory-azure21", "memory-tight-12", "azure2021", "test", "seen cluster, unseen workload"),
    ]
}


def scenarios(split: str | None = None) -> list[Scenario]:
    """The scenarios of a split (``train``/``test``), or all of them, in a fixed order."""
    if split not in (None, "train", "test"):
        raise ConfigError(f"unknown split {split!r}; valid: train, test", field="split")
    return [s for s in SCENARIOS.values() if split is None or s.split == split]


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ConfigError(f"unknown scenario {name!r}; known: {sorted(SCENARIOS)}", field="scenario") from None


def generate_workload(recipe: WorkloadRecipe, seed: int) -> Workload:
    """Run the recipe's generator (no cache)."""
    if recipe.kind == "synth":
        from loadgen import synth

        fn = getattr(synth, recipe.generator, None)
        if fn is None:
            raise ConfigError(f"loadgen.synth has no generator {recipe.generator!r}", field="workload.generator")
        params = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in recipe.params.items()}
        wl = fn(**params, seed=seed)
    else:
        from loadgen.trace_store import locate
        from loadgen.traces import read_trace

        path = locate(recipe.path or "")
        wl = read_trace(recipe.generator, path, **dict(recipe.params), seed=seed)
    meta = {**wl.metadata, "name": recipe.name, "recipe": {"kind": recipe.kind, "generator": recipe.generator,
                                                           "params": dict(recipe.params), "path": recipe.path, "seed": seed}}
    return Workload(frame=wl.frame, metadata=meta)


def build_workload(scenario: Scenario | str, *, cache: str | Path | None = None) -> Workload:
    """The scenario's workload, generated once and cached (``<cache>/workloads/<name>-<hash>.parquet``)."""
    sc = get_scenario(scenario) if isinstance(scenario, str) else scenario
    recipe = sc.workload
    root = Path(cache) if cache is not None else cache_dir()
    path = root / "workloads" / f"{recipe.name}-{recipe.key(sc.seed)}.parquet"
    if path.exists():
        try:
            return read_workload(path)
        except Exception as err:  # noqa: BLE001 - a damaged cache entry is regenerated
            log.warning("cached workload %s unreadable (%s); regenerating", path, err)
    wl = generate_workload(recipe, sc.seed)
    try:
        write_workload(wl, path)
    except OSError as err:
        log.warning("cannot cache workload at %s: %s", path, err)
    return wl


# --- the lab scenario of `make tune` ---------------------------------------------------------------
LAB_CLUSTER = "lab-small"
LAB_FUNCTIONS: dict[str, float] = {
    "float-ops": 0.35,
    "dynamic-html": 0.3,
    "thumbnailer": 0.2,
    "aes": 0.15,
}
LAB_RATE_PER_S = 6.0
LAB_DURATION_S = 15.0
"""Seconds of the lab workload (90 requests). The 40 s it replaces made ``make tune`` take 13 min;
the lab's measured run-to-run spread is no larger for shorter runs (docs/results/noise/: 6.9 % at
10 s, 8.5 % at 20 s, 24 % at 40 s, four repeats each), so a paired confirmation of 15 s runs is at
least as strong evidence, in under half the time (docs/results/tune-time.md)."""


def lab_workload(
    seed: int = 0, *, duration_s: float = LAB_DURATION_S, rate_per_s: float = LAB_RATE_PER_S
) -> Workload:
    """The lab workload: Poisson arrivals over :data:`LAB_FUNCTIONS`, seeded."""
    from loadgen.synth import poisson

    wl = poisson(rate_per_s, duration_s, dict(LAB_FUNCTIONS), seed=seed)
    meta = dict(wl.metadata)
    meta["name"] = f"lab-poisson-{rate_per_s:g}rps-{duration_s:g}s-seed{seed}"
    return Workload(frame=wl.frame, metadata=meta)
