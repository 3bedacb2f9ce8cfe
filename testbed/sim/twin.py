"""The twin of a user's cluster: the simulator over what the Kubernetes API shows, its hidden
parameters fitted from what runs measured (docs/twin.md).

A tuner may know what a user knows (``cluster_view``): each node's capacities, labels, taints, the
images it holds, its zone, and the function suite and workload. It may not know what no API shows:
how fast each node runs work, how fast it pulls images, how much work each function really does.
The twin starts from neutral values for those (speed 1, the spec's default pull bandwidth, the
suite's work) and fits them to the runs' "where the time went" (``loadgen.where``): each measured
profile is replayed in the twin and its per-node, per-function warm latencies and pull times are
matched to the measured ones, a few fixed-point rounds at a time.

- Speed and work (``log L_cpu(f, n) = log work_f - log speed_n``, where ``L_cpu`` is a warm
  request's latency less its function's IO wait) are fitted jointly by alternating weighted means
  of the log ratio measured / twin; a node's estimate is shrunk toward its *hardware class* (nodes
  the API shows with the same capacities and labels), and a class toward the cluster, so a node
  that served few requests keeps the class's value rather than its own noise (the reference run
  observes the nodes its own placements used; CausalSim, NSDI 2023, on that bias).
- Pull bandwidth per node from the ratio of measured to twin mean pull time, pooled the same way.

The fit's error on the runs it saw (latency metric and per-node warm latency) is reported with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from functions.platform import DEFAULT_PLATFORM, Platform
from testbed.cluster import HOSTNAME_LABEL, ClusterSpec, NodeSpec

if TYPE_CHECKING:
    from functions.spec import FunctionSpec
    from loadgen.workload import Workload
    from testbed.scheduler.config import Profile

VIEW_PULL_BYTES_PER_S = 50.0 * 2**20
"""What the twin assumes for a node's image pulls before a run measured one (the cluster spec's default)."""
NODE_PRIOR_REQUESTS = 20.0
"""How many warm requests a node's own evidence must hold to weigh as much as its hardware class's."""
CLASS_PRIOR_REQUESTS = 5.0
"""How many warm requests a class's evidence must hold to weigh as much as the cluster's."""
PULL_PRIOR = 1.0
"""Pulls a node must have measured to weigh as much as its class's pull time."""
ROUNDS = 3
"""Fixed-point rounds per fit: replay, compare, update (each round replays every run used)."""
DAMPING = 0.5
"""Share of each round's log correction applied: queueing makes latency react more than in
proportion to speed, so a full step overshoots."""
MAX_RUNS_FITTED = 6
"""The reference run and the latest runs up to this many: the fit's cost stays flat over a budget."""
TWIN_SEED = 7_919
"""The twin's own random stream for request work: it never shares the truth's."""


def hardware_class(node: NodeSpec) -> tuple[Any, ...]:
    """What the API shows that says two nodes are the same machine: capacities and labels
    (the hostname label aside)."""
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if k != HOSTNAME_LABEL))
    return (node.cpu_milli, node.memory_bytes, node.pods, labels)


def cluster_view(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster as the Kubernetes API shows it: every hidden parameter at its neutral value
    (speed 1, the default pull bandwidth), no description, no file. Two clusters that differ only
    in what the API does not show have equal views."""
    nodes = tuple(dataclasses.replace(n, speed=1.0, image_pull_bytes_per_s=VIEW_PULL_BYTES_PER_S)
                  for n in cluster.nodes)
    return ClusterSpec(name=cluster.name, description="", nodes=nodes, path=None, groups=())


@dataclass(frozen=True)
class TwinParams:
    """The twin's hidden parameters: node speed and pull bandwidth by node, work factor by function."""

    speed: Mapping[str, float]
    pull_bytes_per_s: Mapping[str, float]
    work: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def neutral(cls, view: ClusterSpec) -> TwinParams:
        return cls({n.name: 1.0 for n in view.nodes}, {n.name: VIEW_PULL_BYTES_PER_S for n in view.nodes}, {})

    def cluster(self, view: ClusterSpec) -> ClusterSpec:
        nodes = tuple(dataclasses.replace(n, speed=float(self.speed.get(n.name, 1.0)),
                                          image_pull_bytes_per_s=float(self.pull_bytes_per_s.get(n.name,
                                                                                                   VIEW_PULL_BYTES_PER_S)))
                      for n in view.nodes)
        return dataclasses.replace(view, nodes=nodes)

    def functions(self, specs: Mapping[str, FunctionSpec]) -> dict[str, FunctionSpec]:
        out = dict(specs)
        for name, factor in self.work.items():
            if name in out and factor != 1.0:
                spec = out[name]
                out[name] = dataclasses.replace(spec, work_cpu_s=dataclasses.replace(
                    spec.work_cpu_s, mean=spec.work_cpu_s.mean * float(factor)))
        return out


@dataclass(frozen=True)
class Observation:
    """One measured run as the fit needs it: the profile, its metric and its ``where`` section."""

    profile: Profile
    metric: float
    where: Mapping[str, Any]


@dataclass(frozen=True)
class TwinFit:
    params: TwinParams
    runs: int
    """Measured runs the fit used."""
    metric_error: float | None
    """Mean |twin / measured - 1| of the latency metric over the runs used (after the fit)."""
    node_error: Mapping[str, float | None]
    """Per node: the weighted mean |twin / measured - 1| of its warm latency over the runs used."""
    cells: CellCheck | None = None
    """How well node speed x function work predicts each (function, node) cell it was not fitted on."""
    identified: Identification | None = None
    """Which parameters the runs identify and which they confound."""


@dataclass
class Twin:
    """The simulator over a cluster view, a workload and the suite, with fitted hidden parameters."""

    view: ClusterSpec
    workload: Workload
    specs: Mapping[str, FunctionSpec]
    metric: Callable[[Mapping[str, Any]], float] = field(default=lambda s: float(s["latency_mean_s"]))
    """The latency metric of a run's summary (the tuner's: ``agent.metrics.metric_from_summary``)."""
    params: TwinParams | None = None
    seed: int = TWIN_SEED
    platform: Platform = DEFAULT_PLATFORM
    """What serves the functions (``SimConfig.platform``): a user knows their platform."""

    _memo: dict[Profile, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    """``predict``'s metrics by profile for the parameters in ``_memo_params``: a search asks the same
    profile many times (a pool searched at every step, actions that round to one profile, the measured
    profiles again), and the twin is deterministic (its own seed), so a repeat is a lookup."""
    _memo_params: TwinParams | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.params is None:
            self.params = TwinParams.neutral(self.view)

    def summary(self, profile: Profile, *, where: bool = False, params: TwinParams | None = None) -> dict[str, Any]:
        from testbed.sim import evaluate

        p = params or self.params
        assert p is not None
        from testbed.sim.engine import SimConfig

        return evaluate(p.cluster(self.view), self.workload, profile, seed=self.seed, functions=p.functions(self.specs),
                        config=SimConfig(platform=self.platform), where=where)

    def predict(self, profile: Profile) -> float:
        """The twin's latency metric for ``profile`` (seconds, > 0). Remembered until the parameters
        change (any assignment to ``params``, as a fit makes: the memo is kept for one params object)."""
        if self._memo_params is not self.params:
            self._memo, self._memo_params = {}, self.params
        value = self._memo.get(profile)
        if value is None:
            value = self._memo[profile] = self.metric(self.summary(profile))
        return value

    def fit(self, observations: Sequence[Observation], *, rounds: int = ROUNDS) -> TwinFit:
        """Refit the hidden parameters to ``observations`` (from the current ones); returns the fit."""
        used = list(observations)
        if len(used) > MAX_RUNS_FITTED:
            used = [used[0], *used[-(MAX_RUNS_FITTED - 1):]]
        params = self.params
        assert params is not None
        best: TwinFit | None = None
        best_replays: list[Mapping[str, Any]] = []
        for k in range(rounds + 1):
            replays = [self.summary(o.profile, where=True, params=params) for o in used]
            report = _fit_report(params, used, replays, self.metric)
            if best is None or _loss(report) < _loss(best):
                best, best_replays = report, replays
            if k < rounds:
                params = _update(self.view, self.specs, params, used, replays)
        assert best is not None
        self.params = best.params
        return dataclasses.replace(best, cells=cell_check(_pairs(self.view, self.specs, used, best_replays)),
                                   identified=identification(self.view, self.specs, used))


# ---------------------------------------------------------------------------------------------- fit


def _io(specs: Mapping[str, FunctionSpec], fn: str) -> float:
    spec = specs.get(fn)
    return float(spec.work_io_s) if spec is not None else 0.0


def _pairs(view: ClusterSpec, specs: Mapping[str, FunctionSpec], used: Sequence[Observation],
           replays: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, float, float, float]]:
    """(function, node, log ratio of the CPU part measured / twin, weight, how many times more warm
    requests one side saw than the other) over every run used."""
    nodes = {n.name for n in view.nodes}
    out = []
    for obs, rep in zip(used, replays, strict=True):
        measured = (obs.where or {}).get("functions") or {}
        twin = rep.get("where", {}).get("functions") or {}
        for fn, per_node in measured.items():
            io = _io(specs, fn)
            for node, cell in per_node.items():
                if node not in nodes:
                    continue
                tc = (twin.get(fn) or {}).get(node)
                m, t = cell.get("warm_mean_s"), (tc or {}).get("warm_mean_s")
                if m is None or t is None:
                    continue
                cm, ct = float(m) - io, float(t) - io
                floor = 0.05 * max(float(m), float(t))  # IO-bound: the CPU part is too small to read
                if cm <= floor or ct <= floor:
                    continue
                wm, wt = float(cell.get("warm_ok") or 0), float(tc.get("warm_ok") or 0)
                w = min(wm, wt)
                if w > 0:
                    out.append((fn, node, math.log(cm / ct), w, max(wm, wt) / w))
    return out


def _pooled(view: ClusterSpec, raw: Mapping[str, tuple[float, float]], node_prior: float,
            class_prior: float) -> dict[str, float]:
    """Per node a log correction: its own weighted mean shrunk to its hardware class's, the class's
    shrunk to the cluster's (0: no change). ``raw`` maps node -> (weighted sum, weight)."""
    classes: dict[tuple[Any, ...], list[str]] = {}
    for n in view.nodes:
        classes.setdefault(hardware_class(n), []).append(n.name)
    total_s = sum(s for s, _ in raw.values())
    total_w = sum(w for _, w in raw.values())
    cluster_mean = total_s / (total_w + class_prior) if total_w > 0 else 0.0
    out: dict[str, float] = {}
    for members in classes.values():
        cs = sum(raw.get(m, (0.0, 0.0))[0] for m in members)
        cw = sum(raw.get(m, (0.0, 0.0))[1] for m in members)
        class_mean = (cs + class_prior * cluster_mean) / (cw + class_prior)
        for m in members:
            s, w = raw.get(m, (0.0, 0.0))
            out[m] = (s + node_prior * class_mean) / (w + node_prior)
    return out


def _update(view: ClusterSpec, specs: Mapping[str, FunctionSpec], params: TwinParams,
            used: Sequence[Observation], replays: Sequence[Mapping[str, Any]]) -> TwinParams:
    pairs = _pairs(view, specs, used, replays)
    speed = dict(params.speed)
    work = dict(params.work)
    if pairs:
        # r(f, n) ~ a_f - b_n: a_f the function's work correction, b_n the node's speed correction
        a: dict[str, float] = {}
        b: dict[str, float] = {}
        for _ in range(4):
            num: dict[str, float] = {}
            den: dict[str, float] = {}
            for fn, node, r, w, _ in pairs:
                num[fn] = num.get(fn, 0.0) + w * (r + b.get(node, 0.0))
                den[fn] = den.get(fn, 0.0) + w
            a = {fn: num[fn] / den[fn] for fn in num}
            raw: dict[str, tuple[float, float]] = {}
            for fn, node, r, w, _ in pairs:
                s, ww = raw.get(node, (0.0, 0.0))
                raw[node] = (s + w * (a[fn] - r), ww + w)
            b = _pooled(view, raw, NODE_PRIOR_REQUESTS, CLASS_PRIOR_REQUESTS)
        # gauge: speeds carry the cluster-wide factor (the suite's work is right on average)
        total = sum(w for _, _, _, w, _ in pairs)
        mean_a = sum(w * a[fn] for fn, _, _, w, _ in pairs) / total
        for fn in a:
            work[fn] = float(np.clip(work.get(fn, 1.0) * math.exp(DAMPING * (a[fn] - mean_a)), 0.1, 10.0))
        for name in speed:
            speed[name] = float(np.clip(speed[name] * math.exp(DAMPING * (b.get(name, 0.0) - mean_a)), 0.05, 20.0))
    pull = dict(params.pull_bytes_per_s)
    raw_pull: dict[str, tuple[float, float]] = {}
    for obs, rep in zip(used, replays, strict=True):
        twin_nodes = rep.get("where", {}).get("nodes") or {}
        for node, cell in ((obs.where or {}).get("nodes") or {}).items():
            tc = twin_nodes.get(node) or {}
            m, t = cell.get("pull_s"), tc.get("pull_s")
            if node in pull and m and t and m > 0 and t > 0:
                w = float(min(cell.get("pulls") or 0, tc.get("pulls") or 0))
                s, ww = raw_pull.get(node, (0.0, 0.0))
                raw_pull[node] = (s + w * math.log(float(t) / float(m)), ww + w)
    if raw_pull:
        corr = _pooled(view, raw_pull, PULL_PRIOR, PULL_PRIOR)
        for name in pull:
            pull[name] = float(np.clip(pull[name] * math.exp(DAMPING * corr.get(name, 0.0)), 2.0**16, 2.0**36))
    return TwinParams(speed, pull, work)


def _fit_report(params: TwinParams, used: Sequence[Observation], replays: Sequence[Mapping[str, Any]],
                metric: Callable[[Mapping[str, Any]], float]) -> TwinFit:
    errs = [abs(metric(rep) / o.metric - 1.0) for o, rep in zip(used, replays, strict=True)
            if o.metric > 0]
    node_err: dict[str, list[tuple[float, float]]] = {}
    for obs, rep in zip(used, replays, strict=True):
        twin_nodes = rep.get("where", {}).get("nodes") or {}
        for node, cell in ((obs.where or {}).get("nodes") or {}).items():
            m, t = cell.get("warm_mean_s"), (twin_nodes.get(node) or {}).get("warm_mean_s")
            if m and t:
                node_err.setdefault(node, []).append((abs(float(t) / float(m) - 1.0), float(cell.get("warm_ok") or 1)))
    return TwinFit(
        params=params, runs=len(used), metric_error=float(np.mean(errs)) if errs else None,
        node_error={n: sum(e * w for e, w in v) / sum(w for _, w in v) for n, v in node_err.items()},
    )


def _loss(fit: TwinFit) -> float:
    """What the fit keeps among its rounds: the metric's error plus the nodes' mean warm error (a
    twin right on the total for the wrong reasons is worse than one right per node)."""
    nodes = [e for e in fit.node_error.values() if e is not None]
    return (fit.metric_error or 0.0) + (float(np.mean(nodes)) if nodes else 0.0)


# ------------------------------------------------------------------------------- what the runs say

CELL_MIN_WARM = 20
"""Warm requests a (function, node) cell needs before the check reads it."""
CELL_NOISE_CV = 0.5
"""The spread assumed for one warm request's latency: a cell of ``n`` requests is allowed
``2 * CELL_NOISE_CV / sqrt(n)`` of log error for sampling noise before it counts as unexplained."""


@dataclass(frozen=True)
class CellCheck:
    """Leave-one-cell-out check of the fit's structure (a two-way model ``log latency = work_f -
    speed_n``): each (function, node) cell's log ratio measured / twin is predicted from the other
    cells of its function and its node, and the prediction's error beyond sampling noise is what
    node speed x function work cannot explain (a network delay on one node, a CPU cap on one
    function there, a neighbour). Cells whose function ran on no other node, or whose node ran no
    other function, cannot be predicted and are left out."""

    error: float
    """Weighted mean over the predictable cells of the unexplained log error (0: all explained)."""
    cells: int
    """Predictable cells."""
    worst: tuple[str, str, float] | None
    """(function, node, factor measured / predicted) of the cell with the largest unexplained error."""


CELL_SAME_TRAFFIC = 2.0
"""A cell enters the check only where twin and run sent it within this factor of the same warm
requests: a cell whose traffic differs saw other dynamics (pods that came at other times), and its
latency says more about those than about the node."""


def cell_check(pairs: Sequence[tuple[str, str, float, float, float]]) -> CellCheck | None:
    """:class:`CellCheck` of ``_pairs``' (function, node, log ratio, weight, traffic ratio) rows;
    None when no cell can be predicted from others (one function, or one node)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for fn, node, r, w, traffic in pairs:
        if traffic > CELL_SAME_TRAFFIC:
            continue
        acc = cells.setdefault((fn, node), [0.0, 0.0])
        acc[0] += w * r
        acc[1] += w
    table = {k: (s / w, w) for k, (s, w) in cells.items() if w >= CELL_MIN_WARM}
    errors: list[tuple[float, float, str, str, float]] = []
    for (fn, node), (r, w) in table.items():
        rest = {k: v for k, v in table.items() if k != (fn, node)}
        if not any(f == fn for f, _ in rest) or not any(n == node for _, n in rest):
            continue
        pred = _additive(rest, fn, node)
        if pred is None:
            continue
        raw = abs(r - pred)
        allowed = 2.0 * CELL_NOISE_CV / math.sqrt(w)
        errors.append((max(0.0, raw - allowed), w, fn, node, r - pred))
    if not errors:
        return None
    total = sum(w for _, w, *_ in errors)
    worst = max(errors, key=lambda e: e[0])
    return CellCheck(error=sum(e * w for e, w, *_ in errors) / total, cells=len(errors),
                     worst=(worst[2], worst[3], math.exp(worst[4])) if worst[0] > 0 else None)


def _additive(table: Mapping[tuple[str, str], tuple[float, float]], fn: str, node: str) -> float | None:
    """``a_fn - b_node`` of the weighted two-way additive fit of ``table`` (alternating means); None
    when ``fn`` and ``node`` are not connected through the table's cells."""
    a: dict[str, float] = {}
    b: dict[str, float] = {}
    for _ in range(20):
        num: dict[str, list[float]] = {}
        for (f, n), (r, w) in table.items():
            acc = num.setdefault(f, [0.0, 0.0])
            acc[0] += w * (r + b.get(n, 0.0))
            acc[1] += w
        a = {f: s / w for f, (s, w) in num.items()}
        numb: dict[str, list[float]] = {}
        for (f, n), (r, w) in table.items():
            acc = numb.setdefault(n, [0.0, 0.0])
            acc[0] += w * (a[f] - r)
            acc[1] += w
        b = {n: s / w for n, (s, w) in numb.items()}
    if fn not in a or node not in b or not _connected(table, fn, node):
        return None
    return a[fn] - b[node]


def _groups(cells: Iterable[tuple[str, str]]) -> list[tuple[set[str], set[str]]]:
    """The (functions, nodes) groups linked by (function, node) cells: within one, node speeds and
    function work are read against each other; across two, they are confounded."""
    groups: list[tuple[set[str], set[str]]] = []
    for fn, node in cells:
        joined = [g for g in groups if fn in g[0] or node in g[1]]
        merged = ({fn}, {node})
        for g in joined:
            merged[0].update(g[0])
            merged[1].update(g[1])
            groups.remove(g)
        groups.append(merged)
    return groups


def _connected(table: Mapping[tuple[str, str], Any], fn: str, node: str) -> bool:
    """Whether function ``fn`` and node ``node`` are linked by a path of cells (f, n) of ``table``."""
    return any(fn in fns and node in nodes for fns, nodes in _groups(table))


@dataclass(frozen=True)
class Identification:
    """What the runs identify (issue 44, item 4). A node's speed is read against the others only
    through functions they both served (speed and work are confounded otherwise), and apart from a
    network delay only where it served work of at least two sizes (a fixed delay and a slower node
    look alike when one size is seen); a pull bandwidth only where a pull was measured. Values: a
    reason text, or ``"identified"``."""

    speed: Mapping[str, str]
    pull: Mapping[str, str]
    work: Mapping[str, str]

    def confounded(self) -> list[str]:
        """One line per parameter the runs do not identify."""
        out = [f"{n}: speed {why}" for n, why in self.speed.items() if why != IDENTIFIED]
        out += [f"{n}: pull bandwidth {why}" for n, why in self.pull.items() if why != IDENTIFIED]
        out += [f"{f}: work {why}" for f, why in self.work.items() if why != IDENTIFIED]
        return out


IDENTIFIED = "identified"
SIZES_APART = 2.0
"""How far apart (ratio of mean CPU parts) two functions' work must be on a node to tell its speed
from a fixed network delay."""


def identification(view: ClusterSpec, specs: Mapping[str, FunctionSpec], used: Sequence[Observation]) -> Identification:
    """:class:`Identification` of the measured runs ``used`` (their ``where`` cells only)."""
    cpu: dict[tuple[str, str], list[float]] = {}
    pulled: set[str] = set()
    for obs in used:
        where = obs.where or {}
        for fn, per_node in (where.get("functions") or {}).items():
            for node, cell in per_node.items():
                m, k = cell.get("warm_mean_s"), float(cell.get("warm_ok") or 0)
                if m is None or k < CELL_MIN_WARM:
                    continue
                c = float(m) - _io(specs, fn)
                if c > 0.05 * float(m):
                    acc = cpu.setdefault((fn, node), [0.0, 0.0])
                    acc[0] += k * c
                    acc[1] += k
        for node, cell in (where.get("nodes") or {}).items():
            if (cell.get("pulls") or 0) > 0 and (cell.get("pull_s") or 0) > 0:
                pulled.add(node)
    cells = {k: s / w for k, (s, w) in cpu.items()}
    # the largest group of nodes linked through shared functions fixes the speeds' common scale
    main = max(_groups(cells), key=lambda g: (len(g[1]), len(g[0])), default=(set(), set()))
    speed, work = {}, {}
    for n in view.nodes:
        sizes = [c for (f, node), c in cells.items() if node == n.name]
        if not sizes:
            speed[n.name] = f"not observed (no function with {CELL_MIN_WARM} warm requests there)"
        elif n.name not in main[1]:
            speed[n.name] = "confounded with function work (no function it ran was seen on the other nodes)"
        elif len(main[1]) < 2:
            speed[n.name] = "confounded with function work (one node observed)"
        elif max(sizes) < SIZES_APART * min(sizes):
            speed[n.name] = "confounded with network delay (one size of work seen there)"
        else:
            speed[n.name] = IDENTIFIED
    for fn in sorted({f for f, _ in cells}):
        work[fn] = IDENTIFIED if fn in main[0] and len(main[1]) >= 2 else \
            "confounded with node speed (its nodes share no function with the others)"
    pull = {n.name: IDENTIFIED if n.name in pulled else "not observed (no image pulled there)" for n in view.nodes}
    return Identification(speed, pull, work)


def describe(fit: TwinFit, view: ClusterSpec) -> list[str]:
    """What a user reads from a fit: node speeds relative to the fastest identified node and pull
    times where the runs identify them -- a confounded value is named as the twin's working value,
    never as a hardware fact -- work factors that moved, what node speed x function work could not
    explain, and the fit's error."""
    if not view.nodes:
        return []
    p = fit.params
    ident = fit.identified
    speed_ok = {n.name for n in view.nodes if ident is None or ident.speed.get(n.name) == IDENTIFIED}
    pull_ok = {n.name for n in view.nodes if ident is None or ident.pull.get(n.name) == IDENTIFIED}
    ref = [n for n in view.nodes if n.name in speed_ok] or list(view.nodes)
    fastest = max(ref, key=lambda n: p.speed.get(n.name, 1.0))
    top = p.speed.get(fastest.name, 1.0)
    lines = []
    for n in view.nodes:
        s = p.speed.get(n.name, 1.0)
        bw = p.pull_bytes_per_s.get(n.name, VIEW_PULL_BYTES_PER_S)
        err = fit.node_error.get(n.name)
        speed = (f"runs at {s / top:.2f}x {fastest.name}" if n.name in speed_ok else
                 f"speed not identified, {ident.speed[n.name] if ident else ''} (the twin assumes {s / top:.2f}x)")
        pull = (f"pulls at {bw / 2**20:.0f} MiB/s (100 MiB in {100 * 2**20 / bw:.1f} s)" if n.name in pull_ok else
                f"pull bandwidth {ident.pull[n.name] if ident else ''} (the twin assumes {bw / 2**20:.0f} MiB/s)")
        lines.append(f"{n.name} {speed}; {pull}" + ("" if err is None else f"; warm latency off by {100 * err:.0f} %"))
    for fn, w in sorted(p.work.items()):
        if abs(w - 1.0) > 0.05:
            ok = ident is None or ident.work.get(fn) == IDENTIFIED
            lines.append(f"{fn} does {w:.2f}x the work its spec says" + ("" if ok else f" ({ident.work.get(fn, 'not observed')})"))
    if fit.cells is not None and fit.cells.worst is not None:
        fn, node, factor = fit.cells.worst
        lines.append(f"not explained by node speed x function work: {fn} on {node} measured {factor:.2f}x what "
                     f"its node and function predict (unexplained log error {fit.cells.error:.3f} over "
                     f"{fit.cells.cells} cells)")
    if fit.metric_error is not None:
        lines.append(f"latency metric off by {100 * fit.metric_error:.1f} % on average over the {fit.runs} run(s) fitted")
    return lines
