"""Generated training scenarios: a parametric family of clusters and synthetic workloads.

Ten hand-written training scenarios are too few tasks to learn a *search strategy* from: a policy
trained on them learns their optima (which plugin matters on *those* clusters) and has no reason to
try a plugin none of them reacts to. This family draws tasks from the space of inputs the default
score plugins read, so that every plugin matters in some of them:

| feature (drawn independently) | plugin it exercises |
|---|---|
| node groups of different size (2-8 cores), speed (0.5-1.4x) and memory per core | NodeResourcesFit, BalancedAllocation, the strategy |
| zone labels ``topology.kubernetes.io/zone`` per group | PodTopologySpread (system-default zone spreading) |
| a ``PreferNoSchedule`` taint on one group | TaintToleration |
| warm image caches on some groups, a slow pull link | ImageLocality |
| memory-tight groups (1-1.5 GiB per core) | NodeResourcesFit's memory, failures |

The workload is one of ``loadgen.synth``'s generators (Poisson, 2-MMPP, diurnal, steps) over a random
mix of 3-6 suite functions, at an offered CPU load of 30-90 % of the cluster's speed-weighted
capacity (at most 60 requests/s), for 2-3 simulated minutes. Nothing here reads the held-out
scenarios: the family is defined by the plugins' inputs, and a generated
cluster is never one of the shipped specs (``testbed/clusters``).

``generated_scenario(seed)`` is deterministic: the same seed gives the same cluster and workload on
every machine (numpy's PCG64).

A second family, ``generated_scenario(seed, "trace")`` (named ``gentrace-N``), draws the
cluster the same way but replays a *window of a training-side trace* instead of a synthetic
generator: the Azure Functions 2019 extremes (per-minute counts) or the Alibaba GPU-2023 pod
arrivals, the two traces the training split already uses. A random window (20-100 % of the trace)
is compressed into the run's duration and resampled to the drawn load, keeping the trace's burst
shape at a one-second grain; its functions are remapped onto a random subset of the suite. The
held-out split's traces (Azure 2021, the GenAI traces) are never read here.

A third family, ``generated_scenario(seed, "small")`` (``gensmall-N``), is the regime the two above
hold only diluted and where the weights matter most (docs/results/headroom): **a few small nodes
of different hardware generations**, where the scheduler's inputs pull against each other. Each
member has 2-3 generations of 1-3 nodes each (3-6 nodes, 1-2 cores): the newest at speed 1, each
older one 1.3-1.8x slower (successive server CPU generations in public fleet data, e.g. the
Alibaba 2018 and Google 2019 cluster traces' machine platforms, differ by roughly that per
generation; two generations apart gives up to ~3x); the **oldest, long-lived nodes hold the
function images** (they have run the functions before) with probability 0.7 while the newest are
cold; the newest are **spot nodes tainted PreferNoSchedule** with probability 0.4; zones with
probability 0.3; the newest memory-tight with probability 0.3; image pull at 25-100 MiB/s. The
workload is short (15-60 s, where image-pull cold starts weigh most), Poisson or 2-MMPP over 3-5
suite functions at 30-90 % of the speed-weighted capacity. It is defined from the plugins'
inputs and those fleet facts, not from the lab clusters or the held-out split; its held-out members
are seeds training never draws (:data:`agent.objectives.sim.GENERATED_TRAIN_SEEDS` and up).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from loadgen.workload import Workload
from testbed.cluster import ClusterSpec, parse_cluster
from testbed.errors import ConfigError

ZONE_LABEL = "topology.kubernetes.io/zone"
#: The suite functions a generated workload mixes (trace-driven needs trace payloads, so it is out).
FUNCTIONS = ("aes", "disk-io", "dynamic-html", "float-ops", "gzip-compress", "json-serde", "linpack",
             "matmul", "thumbnailer")
GENERATORS = ("poisson", "mmpp", "diurnal", "steps")
#: Rate cap: keeps one simulated run of a light mix near 10 000 requests (a training step's cost).
MAX_RATE_PER_S = 60.0
#: The training-side traces a ``gentrace`` member windows: reader, path under the trace directory (``loadgen.trace_store``), and
#: the rate scale its whole-trace base is read at (enough arrivals that a 20 % window resamples well).
TRACE_SOURCES: dict[str, tuple[str, str, float]] = {
    "azure2019": ("azure2019", "azure/azure2019_invitro_mapper_extremes/invocations.csv", 300.0),
    "alibaba-gpu2023": ("alibaba-gpu2023", "alibaba/gpu2023_openb_pod_list_default.csv", 1.0),
}
#: A window holds at least this many of the base's arrivals (else it widens), so resampling it
#: reproduces the trace's shape rather than a handful of points.
MIN_WINDOW_ARRIVALS = 200
#: A ``gensmall`` run holds at least this many requests (the lab workload has 90 in 15 s).
MIN_SMALL_REQUESTS = 60.0
#: Room a ``gensmall`` function's requests leave on the largest node (the queue-proxy sidecar's and more).
SMALL_SPARE_MILLI = 100
SMALL_SPARE_BYTES = 128 * 2**20
#: The ``gensmall`` held-out members (``gensmall-N``, N in this range), fixed on 2026-12-04 before any
#: method was scored on the family: seeds neither training (N < 1 000 000) nor validation
#: (1 000 000 and up, counted from there) draws.
SMALL_HELD_OUT_SEEDS = range(2_000_000, 2_000_010)
Family = Literal["synth", "trace", "small"]


@dataclass(frozen=True)
class GeneratedScenario:
    """One member of the family: its seed, the cluster, the workload and what was drawn."""

    seed: int
    cluster: ClusterSpec
    workload: Workload
    features: dict[str, Any]
    family: Family = "synth"

    @property
    def name(self) -> str:
        return f"{PREFIXES[self.family]}{self.seed}"


#: Scenario-name prefix of each family (``gen-7``, ``gentrace-7``).
PREFIXES: dict[Family, str] = {"synth": "gen-", "trace": "gentrace-", "small": "gensmall-"}


def generated_cluster(rng: np.random.Generator, name: str, images: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A cluster spec document (the ``testbed/clusters`` format) and the features drawn."""
    n_groups = int(rng.integers(2, 4))
    zones = bool(rng.random() < 0.4)
    taint_group = int(rng.integers(n_groups)) if rng.random() < 0.4 else -1
    cached = rng.random() < 0.5
    tight = rng.random() < 0.3
    pull = int(rng.choice([15, 25, 50, 100]))
    groups: list[dict[str, Any]] = []
    for g in range(n_groups):
        cpu = int(rng.choice([2, 4, 8]))
        gib_per_core = float(rng.choice([1.0, 1.5])) if (tight and g == 0) else float(rng.choice([2.0, 4.0]))
        group: dict[str, Any] = {
            "name": f"g{g}",
            "count": int(rng.integers(3, 9)),
            "cpu": str(cpu),
            "memory": f"{int(cpu * gib_per_core * 1024)}Mi",
            "speed": round(float(rng.uniform(0.5, 1.4)), 2),
            "labels": {},
        }
        if zones:
            group["labels"][ZONE_LABEL] = f"zone-{g}"
        if g == taint_group:
            group["taints"] = [{"key": "scoretune.io/generated", "value": "true", "effect": "PreferNoSchedule"}]
        if cached and rng.random() < 0.6:
            k = int(rng.integers(1, len(images) + 1))
            group["images"] = sorted(rng.choice(images, size=k, replace=False).tolist())
        groups.append(group)
    doc = {"name": name, "description": "generated (testbed.generated)",
           "defaults": {"pods": 110, "image_pull_bandwidth": f"{pull}Mi"}, "groups": groups}
    features = {"groups": n_groups, "zones": zones, "taint": taint_group >= 0, "cached_images": cached,
                "memory_tight": tight, "pull_mib_per_s": pull}
    return doc, features


def small_cluster(rng: np.random.Generator, name: str, images: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``gensmall`` cluster document: hardware generations, old nodes warm, new nodes spot."""
    n_gen = int(rng.integers(2, 4))
    slowdown = [1.0]
    for _ in range(n_gen - 1):
        slowdown.append(slowdown[-1] * float(rng.uniform(1.3, 1.8)))
    warm_old = rng.random() < 0.7
    spot_new = rng.random() < 0.4
    zones = rng.random() < 0.3
    tight_new = rng.random() < 0.3
    pull = int(rng.choice([25, 50, 100]))
    cached = sorted(rng.choice(images, size=int(rng.integers(len(images) // 2, len(images) + 1)), replace=False).tolist())
    counts = rng.integers(1, 4, size=n_gen)
    while counts.sum() < 3:  # 3-6 nodes: a choice to make, few enough that each placement matters
        counts[int(rng.integers(n_gen))] += 1
    while counts.sum() > 6:
        counts[int(np.argmax(counts))] -= 1
    groups: list[dict[str, Any]] = []
    for g in range(n_gen):  # g = 0: the newest generation
        cpu = float(rng.choice([1.0, 1.5, 2.0]))
        gib = cpu * (0.75 if (tight_new and g == 0) else float(rng.choice([1.5, 2.0])))
        group: dict[str, Any] = {"name": f"gen{g}", "count": int(counts[g]), "cpu": f"{int(cpu * 1000)}m",
                                 "memory": f"{int(gib * 1024)}Mi", "speed": round(1.0 / slowdown[g], 3), "labels": {}}
        if zones:
            group["labels"][ZONE_LABEL] = f"zone-{g % 2}"
        if spot_new and g == 0:
            group["taints"] = [{"key": "scoretune.io/spot", "value": "true", "effect": "PreferNoSchedule"}]
        if warm_old and g == n_gen - 1:
            group["images"] = cached
        groups.append(group)
    doc = {"name": name, "description": "generated small heterogeneous cluster (testbed.generated, gensmall)",
           "defaults": {"pods": 110, "image_pull_bandwidth": f"{pull}Mi"}, "groups": groups}
    features = {"groups": n_gen, "speed_ratio": round(slowdown[-1], 3), "warm_old": warm_old, "spot_new": spot_new,
                "zones": zones, "memory_tight": tight_new, "pull_mib_per_s": pull}
    return doc, features


def small_workload(rng: np.random.Generator, cluster: ClusterSpec, seed: int, name: str
                   ) -> tuple[Workload, dict[str, Any]]:
    """A short Poisson or 2-MMPP run over 3-5 suite functions (the ``gensmall`` family's)."""
    from loadgen import synth
    from testbed.sim.backend import suite_specs

    specs = suite_specs()
    big_cpu = max(n.cpu_milli for n in cluster.nodes)
    big_mem = max(n.memory_bytes for n in cluster.nodes)
    # only functions whose pod (queue-proxy included, with room to spare) fits the largest node:
    # on nodes this small a 1-core function would make the member infeasible, not interesting
    names = [f for f in FUNCTIONS if f in specs and specs[f].cpu_request_milli + SMALL_SPARE_MILLI <= big_cpu
             and specs[f].memory_request_bytes + SMALL_SPARE_BYTES <= big_mem]
    chosen = sorted(rng.choice(names, size=int(rng.integers(3, 6)), replace=False).tolist())
    shares = rng.dirichlet(np.ones(len(chosen)))
    mix = {f: float(s) for f, s in zip(chosen, shares, strict=True)}
    mean_cpu_s = sum(s * specs[f].work_cpu_s.mean for f, s in mix.items())
    load, rate = _target_rate(rng, cluster, mean_cpu_s)
    duration = float(rng.choice([15.0, 30.0, 60.0]))
    rate = max(rate, MIN_SMALL_REQUESTS / duration)  # enough requests that a run's mean is a measurement
    if rng.random() < 0.5:
        gen, wl = "poisson", synth.poisson(rate, duration, mix, seed=seed)
    else:
        gen, wl = "mmpp", synth.mmpp([0.3 * rate, 1.7 * rate], [duration / 4, duration / 4], duration, mix, seed=seed)
    meta = {**wl.metadata, "name": name}
    return Workload(frame=wl.frame, metadata=meta), {"generator": gen, "functions": chosen, "load": round(load, 3),
                                                     "rate_per_s": round(rate, 2), "duration_s": duration}


def _choose_functions(rng: np.random.Generator, specs: dict[str, Any]) -> list[str]:
    """3-6 of the suite functions a generated workload mixes."""
    names = [f for f in FUNCTIONS if f in specs]
    k = int(rng.integers(3, min(6, len(names)) + 1))
    return sorted(rng.choice(names, size=k, replace=False).tolist())


def _target_rate(rng: np.random.Generator, cluster: ClusterSpec, mean_cpu_s: float) -> tuple[float, float]:
    """(load, rate): a random 30-90 % of the cluster's speed-weighted CPU capacity, as requests/s."""
    capacity = sum(n.cpu_milli / 1000.0 * n.speed for n in cluster.nodes)
    load = float(rng.uniform(0.3, 0.9))
    return load, max(1.0, min(MAX_RATE_PER_S, load * capacity / max(mean_cpu_s, 1e-3)))


def generated_workload(rng: np.random.Generator, cluster: ClusterSpec, seed: int) -> tuple[Workload, dict[str, Any]]:
    """A synthetic workload at a random share of the cluster's speed-weighted CPU capacity."""
    from loadgen import synth
    from testbed.sim.backend import suite_specs

    specs = suite_specs()
    chosen = _choose_functions(rng, specs)
    shares = rng.dirichlet(np.ones(len(chosen)))
    mix = {f: float(s) for f, s in zip(chosen, shares, strict=True)}
    mean_cpu_s = sum(s * specs[f].work_cpu_s.mean for f, s in mix.items())
    load, rate = _target_rate(rng, cluster, mean_cpu_s)
    duration = float(rng.choice([120.0, 180.0]))
    gen = str(rng.choice(GENERATORS))
    if gen == "poisson":
        wl = synth.poisson(rate, duration, mix, seed=seed)
    elif gen == "mmpp":
        wl = synth.mmpp([0.3 * rate, 1.7 * rate], [30.0, 30.0], duration, mix, seed=seed)
    elif gen == "diurnal":
        wl = synth.diurnal(rate, duration, mix, amplitude=float(rng.uniform(0.3, 0.9)), seed=seed)
    else:
        levels = rng.uniform(0.3, 1.7, size=4) * rate
        wl = synth.steps([float(x) for x in levels], duration / 4, mix, seed=seed)
    meta = {**wl.metadata, "name": f"gen-{seed}"}
    return Workload(frame=wl.frame, metadata=meta), {"generator": gen, "functions": chosen, "load": round(load, 3),
                                                     "rate_per_s": round(rate, 2), "duration_s": duration}


def trace_base(source: str) -> tuple[np.ndarray, np.ndarray, float]:
    """A whole training-side trace as (arrival seconds, function class, span s), read once per
    process and file. The class is the suite function ``read_trace`` mapped the trace function
    onto; a member remaps the classes, so only the grouping of trace functions is kept. A missing
    file is a TraceError naming the ``scoretune traces fetch`` command."""
    from loadgen.trace_store import locate

    if source not in TRACE_SOURCES:
        raise ConfigError(f"unknown trace source {source!r}; known: {sorted(TRACE_SOURCES)}", field="source")
    kind, rel, scale = TRACE_SOURCES[source]
    return _read_base(kind, str(locate(rel)), scale)


@lru_cache(maxsize=8)
def _read_base(kind: str, path: str, scale: float) -> tuple[np.ndarray, np.ndarray, float]:
    from loadgen.traces import read_trace

    wl = read_trace(kind, Path(path), rate_scale=scale, seed=0)
    classes = wl.frame["function"].to_numpy(dtype=object)
    return wl.frame["t_s"].to_numpy(dtype=np.float64), classes, float(wl.metadata["trace_span_s"])


def trace_window_workload(rng: np.random.Generator, cluster: ClusterSpec, name: str) -> tuple[Workload, dict[str, Any]]:
    """A random window of a training-side trace, compressed into 2-3 minutes and resampled to a
    random share of the cluster's speed-weighted CPU capacity (the synthetic family's load range)."""
    from loadgen.workload import make_workload
    from testbed.sim.backend import suite_specs

    specs = suite_specs()
    source = str(rng.choice(sorted(TRACE_SOURCES)))
    t, classes, span = trace_base(source)
    frac = float(rng.uniform(0.2, 1.0))
    start = float(rng.uniform(0.0, span * (1.0 - frac)))
    while True:  # widen a window too sparse to resample (a quiet stretch of the trace)
        keep = (t >= start) & (t < start + frac * span)
        if int(keep.sum()) >= MIN_WINDOW_ARRIVALS or frac >= 1.0:
            break
        frac = min(1.0, 2.0 * frac)
        start = min(start, span * (1.0 - frac))
    t_win, c_win = t[keep] - start, classes[keep]
    duration = float(rng.choice([120.0, 180.0]))
    chosen = _choose_functions(rng, specs)
    remap = {c: chosen[int(rng.integers(len(chosen)))] for c in sorted(set(c_win.tolist()))}
    fn_win = np.asarray([remap[c] for c in c_win], dtype=object)
    load, rate = _target_rate(rng, cluster, float(np.mean([specs[f].work_cpu_s.mean for f in fn_win])))
    n = int(round(rate * duration))
    idx = rng.integers(t_win.size, size=n)
    grain = 1.0  # seconds of jitter: the trace's shape survives at this grain
    t_new = np.clip(t_win[idx] * (duration / (frac * span)) + rng.uniform(-grain / 2, grain / 2, size=n),
                    0.0, np.nextafter(duration, 0.0))
    meta = {"source": f"gentrace:{source}", "name": name, "duration_s": duration,
            "trace_window_s": [round(start, 3), round(start + frac * span, 3)]}
    wl = make_workload(t_new, fn_win[idx], None, metadata=meta, source=f"<{name}>")
    return wl, {"generator": f"trace:{source}", "functions": sorted(set(fn_win.tolist())), "load": round(load, 3),
                "rate_per_s": round(rate, 2), "duration_s": duration, "window_share": round(frac, 3)}


def generated_scenario(seed: int, family: Family = "synth") -> GeneratedScenario:
    """The member ``seed`` (any non-negative integer) of the synthetic (``gen-N``), trace-window
    (``gentrace-N``) or small heterogeneous (``gensmall-N``) family."""
    if seed < 0:
        raise ValueError(f"a generated scenario's seed must be >= 0, got {seed}")
    if family not in PREFIXES:
        raise ConfigError(f"unknown generated family {family!r}; known: {sorted(PREFIXES)}", field="family")
    from testbed.sim.backend import suite_specs  # parsed once per process: a member per episode

    name = f"{PREFIXES[family]}{seed}"
    stream = {"synth": [0x5C07E, int(seed)], "trace": [0x5C07E, 0x7ACE, int(seed)], "small": [0x5C07E, 0x5A11, int(seed)]}
    rng = np.random.default_rng(stream[family])
    specs = suite_specs()
    images = sorted({specs[f].image for f in FUNCTIONS if f in specs})
    doc, cfeat = (small_cluster if family == "small" else generated_cluster)(rng, name, images)
    cluster = parse_cluster(doc, file=f"<generated cluster {name}>")
    if family == "small":
        workload, wfeat = small_workload(rng, cluster, seed, name)
    elif family == "synth":
        workload, wfeat = generated_workload(rng, cluster, seed)
    else:
        workload, wfeat = trace_window_workload(rng, cluster, name)
    return GeneratedScenario(seed=int(seed), cluster=cluster, workload=workload,
                             features={**cfeat, **wfeat, "nodes": len(cluster.nodes)}, family=family)
