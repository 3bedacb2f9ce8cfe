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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.workload import Workload
from testbed.cluster import ClusterSpec, parse_cluster

ZONE_LABEL = "topology.kubernetes.io/zone"
#: The suite functions a generated workload mixes (trace-driven needs trace payloads, so it is out).
FUNCTIONS = ("aes", "disk-io", "dynamic-html", "float-ops", "gzip-compress", "json-serde", "linpack",
             "matmul", "thumbnailer")
GENERATORS = ("poisson", "mmpp", "diurnal", "steps")
#: Rate cap: keeps one simulated run of a light mix near 10 000 requests (a training step's cost).
MAX_RATE_PER_S = 60.0


@dataclass(frozen=True)
class GeneratedScenario:
    """One member of the family: its seed, the cluster, the workload and what was drawn."""

    seed: int
    cluster: ClusterSpec
    workload: Workload
    features: dict[str, Any]

    @property
    def name(self) -> str:
        return f"gen-{self.seed}"


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


def generated_workload(rng: np.random.Generator, cluster: ClusterSpec, seed: int) -> tuple[Workload, dict[str, Any]]:
    """A synthetic workload at a random share of the cluster's speed-weighted CPU capacity."""
    from loadgen import synth
    from testbed.sim.backend import suite_specs

    specs = suite_specs()
    names = [f for f in FUNCTIONS if f in specs]
    k = int(rng.integers(3, min(6, len(names)) + 1))
    chosen = sorted(rng.choice(names, size=k, replace=False).tolist())
    shares = rng.dirichlet(np.ones(k))
    mix = {f: float(s) for f, s in zip(chosen, shares, strict=True)}
    mean_cpu_s = sum(s * specs[f].work_cpu_s.mean for f, s in mix.items())
    capacity = sum(n.cpu_milli / 1000.0 * n.speed for n in cluster.nodes)
    load = float(rng.uniform(0.3, 0.9))
    rate = max(1.0, min(MAX_RATE_PER_S, load * capacity / max(mean_cpu_s, 1e-3)))
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


def generated_scenario(seed: int) -> GeneratedScenario:
    """The family member ``seed`` (any non-negative integer)."""
    if seed < 0:
        raise ValueError(f"a generated scenario's seed must be >= 0, got {seed}")
    from testbed.sim.backend import suite_specs  # parsed once per process: a member per episode

    rng = np.random.default_rng([0x5C07E, int(seed)])
    specs = suite_specs()
    images = sorted({specs[f].image for f in FUNCTIONS if f in specs})
    doc, cfeat = generated_cluster(rng, f"gen-{seed}", images)
    cluster = parse_cluster(doc, file=f"<generated cluster {seed}>")
    workload, wfeat = generated_workload(rng, cluster, seed)
    return GeneratedScenario(seed=int(seed), cluster=cluster, workload=workload,
                             features={**cfeat, **wfeat, "nodes": len(cluster.nodes)})
