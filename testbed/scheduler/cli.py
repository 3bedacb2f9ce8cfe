"""``scoretune scheduler score|config|validate`` and ``scoretune bench scheduler``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer

from testbed.errors import ConfigError
from testbed.scheduler.config import (
    Profile,
    SchedulerConfig,
    compact_items,
    config_for_profile,
    dump_config_yaml,
    format_weights,
    load_config,
    parse_int,
    parse_weights,
    profile_from_weights,
    profile_weights,
    read_config_dict,
    validate_config_dict,
    write_text_atomic,
)
from testbed.scheduler.framework import FitError, Scheduler
from testbed.scheduler.objects import load_nodes, load_objects, load_pods, node_from_k8s, pod_from_k8s

app = typer.Typer(help="kube-scheduler scoring, profiles and KubeSchedulerConfiguration files.", no_args_is_help=True)


@app.command("score")
def score_cmd(
    nodes: Path = typer.Option(..., "--nodes", help="Nodes: `kubectl get nodes -o json` output, a Node, or YAML."),
    pod: Path = typer.Option(..., "--pod", help="The pod to schedule (a Pod object, JSON or YAML)."),
    config: Path | None = typer.Option(None, "--config", help="A KubeSchedulerConfiguration (default: upstream defaults)."),
    pods: Path | None = typer.Option(None, "--pods", help="The running pods (each with spec.nodeName)."),
    profile: str | None = typer.Option(None, "--profile", help="schedulerName of the profile (default: the pod's schedulerName)."),
    kube_version: str = typer.Option("1.36", "--kube-version", help="1.35 or 1.36 (BalancedAllocation formula)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the tie-break among the top nodes (numpy seeds are non-negative)."),
) -> None:
    """Score every node for one pod and print JSON.

    The JSON holds the feasible nodes, the plugins whose PreScore skipped, each feasible node's per-plugin scores (0..100, before the weight, normalised over the feasible nodes as kube-scheduler does) and weighted total, the selected node, and, apart, "unschedulable": each node that fails Filter with kube-scheduler's reasons ("Insufficient cpu", "node(s) had untolerated taint {key: value}", ...). When no node fits, the JSON also holds "fit_error", kube-scheduler's "0/N nodes are available: ..." message, which is printed on stderr too, and the exit status is 1.
    """
    cfg = load_config(config) if config is not None else SchedulerConfig(profiles=(profile_from_weights({}),))
    node_list = load_nodes(nodes)
    if not node_list:
        raise ConfigError("no Node objects found", file=nodes)
    pod_objs = [o for o in load_objects(pod) if o.get("kind", "Pod") == "Pod"]
    if len(pod_objs) != 1:
        raise ConfigError(f"expected exactly one Pod, found {len(pod_objs)}", file=pod)
    incoming = pod_from_k8s(pod_objs[0], file=str(pod))
    name = profile if profile is not None else incoming.scheduler_name
    if profile is None and all(p.scheduler_name != name for p in cfg.profiles):
        raise ConfigError(
            f"the pod's schedulerName {name!r} matches no profile, so kube-scheduler would not schedule it; pass --profile",
            file=pod,
            field="spec.schedulerName",
        )
    prof = _profile(cfg, name, config)
    sched = Scheduler(node_list, prof, kube_version=kube_version, seed=seed)
    if pods is not None:
        sched.bind_existing(load_pods(pods))
    result = sched.score_feasible(incoming)
    typer.echo(json.dumps(result.to_dict(), indent=2))
    if result.fit_error is not None:
        raise FitError(f"pod {incoming.namespace}/{incoming.name or '<unnamed>'}: {result.fit_error}")


def _pairs(text: str, what: str, sep: str) -> list[tuple[str, str]]:
    """``A<sep>B,...`` items of a compact option (``--shape 0:0,100:10``, ``--resources cpu=1``);
    an item without ``sep``, with an empty side or empty itself is a ConfigError naming it."""
    out = []
    for part in compact_items(text, field=what):
        if sep not in part:
            raise ConfigError(f"{part!r} is not A{sep}B", field=what)
        a, _, b = (x.strip() for x in part.partition(sep))
        if not a or not b:
            raise ConfigError(f"{part!r} is not A{sep}B (a side is empty)", field=what)
        out.append((a, b))
    return out


@app.command("config")
def config_cmd(
    weights: str = typer.Option("", "--weights", help='Score weights, e.g. "NodeResourcesFit=5,ImageLocality=disabled".'),
    strategy: str | None = typer.Option(None, "--strategy", help="LeastAllocated, MostAllocated or RequestedToCapacityRatio."),
    shape: str | None = typer.Option(None, "--shape", help='RequestedToCapacityRatio shape "utilization:score,...", e.g. "0:0,100:10".'),
    resources: str | None = typer.Option(None, "--resources", help='NodeResourcesFit resource weights, e.g. "cpu=2,memory=1".'),
    scheduler_name: str = typer.Option("default-scheduler", "--scheduler-name", help="Profile name; another name ships beside an untouched default-scheduler."),
    percentage: int | None = typer.Option(None, "--percentage-of-nodes-to-score", help="0 (adaptive) .. 100."),
    output: Path = typer.Option(Path("-"), "-o", "--output", help="Where to write the YAML ('-' for stdout)."),
) -> None:
    """Write a full, valid KubeSchedulerConfiguration for the given weights."""
    shp = None
    if shape is not None:
        shp = [
            (parse_int(u, what="utilization", field=f"shape[{i}].utilization"), parse_int(sc, what="score", field=f"shape[{i}].score"))
            for i, (u, sc) in enumerate(_pairs(shape, "shape", ":"))
        ]
    res = None
    if resources is not None:
        res = [(n, parse_int(w, what=f"weight of {n}", field=f"resources.{n}")) for n, w in _pairs(resources, "resources", "=")]
    prof = profile_from_weights(
        parse_weights(weights),
        strategy=strategy,
        shape=shp,
        resources=res,
        scheduler_name=scheduler_name,
        percentage_of_nodes_to_score=percentage,
    )
    text = dump_config_yaml(config_for_profile(prof))
    if str(output) == "-":
        typer.echo(text, nl=False)
    else:
        write_text_atomic(output, text)
        typer.echo(f"wrote {output}", err=True)


@app.command("validate")
def validate_cmd(file: Path = typer.Argument(..., help="A KubeSchedulerConfiguration file.")) -> None:
    """Exit 0 for a valid configuration, 1 with field-named errors otherwise."""
    errs = validate_config_dict(read_config_dict(file))
    if errs:
        for e in errs:
            typer.echo(f"{file}: {e}")
        raise typer.Exit(1)
    typer.echo(f"{file}: valid")


@app.command("weights")
def weights_cmd(
    file: Path = typer.Argument(..., help="A KubeSchedulerConfiguration file."),
    profile: str | None = typer.Option(None, "--profile", help="schedulerName (default: the first profile)."),
) -> None:
    """Print a profile's score weights as NAME=WEIGHT,... (the inverse of config --weights)."""
    typer.echo(format_weights(profile_weights(_profile(load_config(file), profile, file))))


def _profile(cfg: SchedulerConfig, name: str | None, file: Path | None) -> Profile:
    """The profile named ``name``; an unknown name is an error naming the configuration file."""
    try:
        return cfg.profile(name)
    except ConfigError as err:
        if file is None:
            raise
        raise ConfigError(err.detail, file=file, field=err.field) from None


# --- benchmark ------------------------------------------------------------------------------------


def bench_objects(n_nodes: int, *, revisions: int = 8, seed: int = 0) -> tuple[list, list]:
    """A synthetic cluster (3 zones, mixed sizes, some cached images, a few PreferNoSchedule
    taints) and Knative-shaped revision pods (queue-proxy 25m, preferred hostname anti-affinity,
    owned by a ReplicaSet)."""
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(n_nodes):
        name = f"node-{i}"
        cpu = int(rng.choice([4, 8, 16]))
        images = [{"names": [f"ghcr.io/scoretune/fn-{j}:latest"], "sizeBytes": int(rng.integers(50, 900)) * 1024 * 1024} for j in range(revisions) if rng.random() < 0.3]
        taints = [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}] if rng.random() < 0.1 else []
        nodes.append(
            node_from_k8s(
                {
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
                    "spec": {"taints": taints},
                    "status": {"allocatable": {"cpu": str(cpu), "memory": f"{cpu * 4}Gi", "pods": "110"}, "images": images},
                }
            )
        )
    pods = []
    for j in range(revisions):
        rev = f"fn-{j}-00001"
        labels = {"serving.knative.dev/revision": rev, "serving.knative.dev/service": f"fn-{j}", "app": rev}
        pods.append(
            pod_from_k8s(
                {
                    "metadata": {"name": f"{rev}-deployment-x", "namespace": "default", "labels": labels, "ownerReferences": [{"kind": "ReplicaSet", "name": f"{rev}-deployment-abc", "controller": True}]},
                    "spec": {
                        "containers": [
                            {"name": "user-container", "image": f"ghcr.io/scoretune/fn-{j}:latest", "resources": {"requests": {"cpu": f"{100 * (1 + j % 4)}m", "memory": f"{128 * (1 + j % 3)}Mi"}}},
                            {"name": "queue-proxy", "image": "gcr.io/knative-releases/queue:latest", "resources": {"requests": {"cpu": "25m"}}},
                        ],
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"serving.knative.dev/revision": rev}}}}
                                ]
                            }
                        },
                    },
                }
            )
        )
    return nodes, pods


def run_bench(n_nodes: int, pods_per_node: int, decisions: int, *, seed: int = 0, kube_version: str = "1.36") -> dict:
    from dataclasses import replace

    from testbed.scheduler.config import default_profile

    nodes, templates = bench_objects(n_nodes, seed=seed)
    prof = replace(default_profile(), percentage_of_nodes_to_score=100)
    sched = Scheduler(nodes, prof, kube_version=kube_version, seed=seed)
    rng = np.random.default_rng(seed)
    bound: list[tuple[int, int]] = []
    for _ in range(n_nodes * pods_per_node):
        k = int(rng.integers(len(templates)))
        i = int(rng.integers(n_nodes))
        sched.bind(templates[k], i)
        bound.append((k, i))
    warm = min(20, decisions)
    for w in range(warm):
        sched.schedule(templates[w % len(templates)])
    t_sched = 0.0
    t0 = time.perf_counter()
    placed = 0
    for d in range(decisions):
        k = d % len(templates)
        s0 = time.perf_counter()
        i = sched.schedule(templates[k])
        t_sched += time.perf_counter() - s0
        if i is not None:
            sched.bind(templates[k], i)
            bound.append((k, i))
            placed += 1
        # steady state: one pod leaves for every pod placed
        j = int(rng.integers(len(bound)))
        bound[j], bound[-1] = bound[-1], bound[j]
        ok, oi = bound.pop()
        sched.unbind(templates[ok], oi)
    loop = time.perf_counter() - t0
    return {
        "nodes": n_nodes,
        "pods_per_node": pods_per_node,
        "decisions": decisions,
        "decisions_per_s": round(decisions / t_sched, 1) if t_sched > 0 else None,
        "with_bind_unbind_per_s": round(decisions / loop, 1) if loop > 0 else None,
        "placed": placed,
        "profile": "default (7 score plugins), percentageOfNodesToScore=100",
        "kube_version": kube_version,
    }


def bench_scheduler(
    nodes: int = typer.Option(1000, "--nodes", min=1, max=1_000_000, help="Number of nodes."),
    pods_per_node: int = typer.Option(10, "--pods-per-node", min=0, help="Pods running per node before the timed decisions."),
    decisions: int = typer.Option(2000, "--decisions", min=1, help="Timed scheduling decisions."),
    seed: int = typer.Option(0, "--seed", min=0),
    kube_version: str = typer.Option("1.36", "--kube-version"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON only."),
) -> None:
    """Decisions per second of the full default profile with every node scored."""
    res = run_bench(nodes, pods_per_node, decisions, seed=seed, kube_version=kube_version)
    if as_json:
        typer.echo(json.dumps(res))
    else:
        typer.echo(f"{res['nodes']} nodes: {res['decisions_per_s']} decisions/s ({res['with_bind_unbind_per_s']}/s with bind+unbind)")
