"""One kube-scheduler scheduling cycle over array-held cluster state.

The cycle follows ``pkg/scheduler/schedule_one.go`` and ``framework/runtime/framework.go``:
Filter (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit) visiting
nodes round-robin until ``numFeasibleNodesToFind`` feasible ones are found; a single feasible
node is taken without scoring; otherwise PreScore (a plugin returning Skip is left out), Score,
NormalizeScore, the weighted sum, and a uniformly random pick among the top nodes (seeded).

State for speed. Per-node requested resources (actual and "non-zero"), pod counts and, per pod
"template" (pods with the same :attr:`Pod.signature`, e.g. all replicas of one Knative revision),
per-node counts of bound pods are numpy arrays updated on :meth:`Scheduler.bind` /
:meth:`Scheduler.unbind`. Every label selector the scheduler has met (topology spread, pod
(anti-)affinity terms) keeps a per-node count of matching pods, maintained incrementally, so
InterPodAffinity and PodTopologySpread cost O(nodes) work per decision. Template data that
depends only on the nodes (filter masks, each plugin's ``prepare``) is computed once per template;
data that depends on the profile (the filter mask, each plugin's ``pre_score``) once per
(template, profile).

The score plugins are the modules under :mod:`testbed.scheduler.plugins`, looked up by name in
the registry (:mod:`testbed.scheduler.plugins.registry`); this module knows none of them. The
scheduler is their :class:`~testbed.scheduler.plugins.base.Cluster`: the attributes and methods
that protocol lists are what a plugin reads.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.scheduler.config import Profile
from testbed.scheduler.objects import (
    CPU,
    MEMORY,
    NAMESPACE_NAME_LABEL,
    PODS,
    LabelSelector,
    Node,
    Pod,
    is_scalar_resource,
    normalized_image_name,
)
from testbed.scheduler.plugins.base import ScorePlugin
from testbed.scheduler.plugins.nodeaffinity import NodeAffinityArgs
from testbed.scheduler.plugins.noderesources.fit import FitArgs
from testbed.scheduler.plugins.registry import DEFAULT_REGISTRY, Registry
from testbed.scheduler.selectors import terms_match, tolerated

log = logging.getLogger(__name__)

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
MIN_FEASIBLE_NODES_TO_FIND = 100  # pkg/scheduler/schedule_one.go
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5  # pkg/scheduler/schedule_one.go

# Filter failure reasons, in upstream's words (kubernetes/kubernetes pkg/scheduler/framework/plugins/):
#: nodeunschedulable/node_unschedulable.go, ErrReasonUnschedulable
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
#: nodename/node_name.go, ErrReason
REASON_NODE_NAME = "node(s) didn't match the requested node name"
#: nodeaffinity/node_affinity.go, ErrReasonPod and errReasonEnforced
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED_AFFINITY = "node(s) didn't match scheduler-enforced node affinity"
#: noderesources/fit.go (fitsRequest): "Too many pods", then fmt.Sprintf("Insufficient %v", resource)
REASON_TOO_MANY_PODS = "Too many pods"


def taint_reason(key: str, value: str) -> str:
    """tainttoleration/taint_toleration.go (Filter): ``node(s) had untolerated taint {%s: %s}``."""
    return f"node(s) had untolerated taint {{{key}: {value}}}"


def fit_error_message(num_all_nodes: int, reasons: dict[str, list[str]]) -> str:
    """``FitError.Error()`` (``pkg/scheduler/framework/types.go``): ``NoNodeAvailableMsg``
    (``"0/%v nodes are available"``), then the histogram of reasons over the nodes as
    ``"<count> <reason>"`` strings, ``sort.Strings``-sorted and joined by ``", "``, then ``"."``."""
    counts = Counter(r for rs in reasons.values() for r in rs)
    histogram = sorted(f"{n} {r}" for r, n in counts.items())
    return f"0/{num_all_nodes} nodes are available: {', '.join(histogram)}."


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int | None) -> int:
    """``schedule_one.go`` (``numFeasibleNodesToFind``): all nodes below 100; otherwise the given
    percentage (0 or unset = adaptive ``50 - N/125``, at least 5%) of N, but at least 100."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    p = int(percentage or 0)
    if p >= 100:
        return num_all_nodes
    if p == 0:
        p = 50 - num_all_nodes // 125
        if p < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            p = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    n = num_all_nodes * p // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


def parse_kube_version(kube_version: str) -> tuple[int, int]:
    """``"1.36"`` / ``"v1.35.2"`` -> (major, minor); the release selects formula versions."""
    v = str(kube_version).lstrip("v")
    parts = v.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"kube version {kube_version!r} is not MAJOR.MINOR (for example 1.35 or 1.36)") from None


class FitError(TestbedError):
    """No node passes Filter (kube-scheduler's ``FitError``); the message is upstream's."""


@dataclass(frozen=True)
class ScoreResult:
    """The detail of one cycle. ``scores`` covers every node, normalised over all of them (the view
    of upstream's plugin unit tests); ``selected`` is what the framework picks, normalising over
    the feasible nodes only, as kube-scheduler does."""

    profile: str
    feasible: tuple[str, ...]
    skipped: tuple[str, ...]
    scores: dict[str, dict[str, Any]]
    selected: str | None
    selected_index: int | None
    #: every node that fails Filter, to the reasons upstream's plugins give (see :meth:`Scheduler.filter_reasons`)
    unschedulable: dict[str, list[str]] = field(default_factory=dict)
    #: upstream's ``FitError`` message when no node fits, else None
    fit_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "profile": self.profile,
            "feasible": list(self.feasible),
            "skipped": list(self.skipped),
            "scores": self.scores,
            "selected": self.selected,
            "unschedulable": self.unschedulable,
        }
        if self.fit_error is not None:
            out["fit_error"] = self.fit_error
        return out


@dataclass(frozen=True)
class _Matcher:
    """Which pods a selector counts: namespaces (or a namespace selector) and a label selector."""

    namespaces: tuple[str, ...]
    namespace_selector: LabelSelector | None
    selector: LabelSelector | None

    def matches(self, namespace: str, labels: Any) -> bool:
        if self.selector is None:
            return False
        ns_ok = namespace in self.namespaces or (
            self.namespace_selector is not None and self.namespace_selector.matches({NAMESPACE_NAME_LABEL: namespace})
        )
        return ns_ok and self.selector.matches(labels)


class _Rows:
    """Per-node counters, one row each, kept in one matrix (grown by doubling) so the kernels can
    read every counter of a decision from one array. Rows are addressed by id, never by view."""

    def __init__(self, n: int) -> None:
        self.mat = np.zeros((8, n), dtype=np.int64)
        self.count = 0

    def add(self, initial: np.ndarray | None = None) -> int:
        if self.count == self.mat.shape[0]:
            grown = np.zeros((2 * self.mat.shape[0], self.mat.shape[1]), dtype=np.int64)
            grown[: self.count] = self.mat[: self.count]
            self.mat = grown
        if initial is not None:
            self.mat[self.count] = initial
        self.count += 1
        return self.count - 1


class _Template:
    """Profile-independent data of one pod signature (the plugins read it as
    :class:`~testbed.scheduler.plugins.base.Template`)."""

    __slots__ = ("id", "pod", "req", "nonzero", "unsched_ok", "taint_ok", "affinity_ok", "tol_not_ready", "unknown_requests", "sels", "sel_arr", "data")


class _Plan:
    """Profile-dependent data of one template: the static filter mask, the resources the fit
    filter checks, and each enabled score plugin with its weight and PreScore state (None: Skip)."""

    __slots__ = ("mask", "fit_check", "scorers")


class Scheduler:
    """kube-scheduler's scheduling cycle for one profile over a fixed set of nodes.

    ``schedule(pod)`` is the fast path (returns a node index or None and does not bind);
    ``score(pod)`` returns the full detail. ``kube_version`` selects formula versions (the
    BalancedAllocation formula: "1.35" scores with the pod placed, "1.36" the change of the
    node's balance). ``registry`` holds the score plugins the profile's weights name.
    """

    def __init__(
        self, nodes: Sequence[Node], profile: Profile, *, kube_version: str = "1.36", seed: int = 0, registry: Registry = DEFAULT_REGISTRY
    ) -> None:
        if not nodes:
            raise TestbedError("a scheduler needs at least one node")
        self._nodes = list(nodes)
        self.node_names: list[str] = [n.name for n in self._nodes]
        self._index = {name: i for i, name in enumerate(self.node_names)}
        if len(self._index) != len(self.node_names):
            raise TestbedError("node names must be unique")
        self.kube_version = kube_version
        try:
            self.kube_release = parse_kube_version(kube_version)
        except ValueError as err:
            raise TestbedError(str(err)) from None
        self.registry = registry
        n = len(self._nodes)
        self.n = n
        extra = sorted({r for node in self._nodes for r in node.allocatable if r not in (CPU, MEMORY, PODS)})
        self.res_names = [CPU, MEMORY, *extra]
        self.res_index = {r: i for i, r in enumerate(self.res_names)}
        self.alloc = np.array([[node.allocatable.get(r, 0) for node in self._nodes] for r in self.res_names], dtype=np.int64)
        self._pods_alloc = np.array([node.allocatable.get(PODS, 0) for node in self._nodes], dtype=np.int64)
        self.req_actual = np.zeros((len(self.res_names), n), dtype=np.int64)
        # cpu/memory rows hold NonZeroRequested; the other rows the actual requests.
        self.req_nonzero = np.zeros((len(self.res_names), n), dtype=np.int64)
        self._pod_count = np.zeros(n, dtype=np.int64)
        self._ready = np.array([node.ready for node in self._nodes], dtype=bool)
        self.has_labels = np.array([bool(node.labels) for node in self._nodes], dtype=bool)
        self._arange = np.arange(n)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._next_start = 0
        self._label_cols: dict[str, tuple[np.ndarray, np.ndarray, int, bool]] = {}
        image_nodes: dict[str, int] = {}
        for node in self._nodes:
            for img in node.images:
                image_nodes[img] = image_nodes.get(img, 0) + 1
        self.image_nodes = image_nodes
        self._templates: dict[str, _Template] = {}
        self.templates: list[_Template] = []
        self._tmpl = _Rows(n)  # per template: bound pods per node
        self._matchers: dict[_Matcher, int] = {}
        self._matcher_list: list[_Matcher] = []
        self._sel = _Rows(n)  # per selector: matching bound pods per node
        self._plans: dict[int, _Plan] = {}
        self._memo: dict[Any, Any] = {}
        self.profile = profile
        self.set_profile(profile)

    # --- the plugins' view (testbed.scheduler.plugins.base.Cluster) -------------------------------

    @property
    def nodes(self) -> Sequence[Node]:
        return self._nodes

    @property
    def template_counts(self) -> np.ndarray:
        return self._tmpl.mat

    @property
    def selector_counts(self) -> np.ndarray:
        return self._sel.mat

    def memo(self, key: Any, build: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]

    def label_col(self, key: str) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(has label, domain id of ``labels.get(key, "")``, number of ids, every value unique)."""
        col = self._label_cols.get(key)
        if col is None:
            ids: dict[str, int] = {}
            dom = np.array([ids.setdefault(node.labels.get(key, ""), len(ids)) for node in self._nodes], dtype=np.int64)
            has = np.array([key in node.labels for node in self._nodes], dtype=bool)
            unique = bool(has.all()) and len(ids) == self.n
            col = (has, dom, len(ids), unique)
            self._label_cols[key] = col
        return col

    def counter(self, namespaces: tuple[str, ...], namespace_selector: LabelSelector | None, selector: LabelSelector | None) -> int:
        """The selector counter's row; a new one starts from the pods already bound."""
        m = _Matcher(namespaces, namespace_selector, selector)
        sid = self._matchers.get(m)
        if sid is not None:
            return sid
        counts = np.zeros(self.n, dtype=np.int64)
        matching = [t for t in self.templates if m.matches(t.pod.namespace, t.pod.labels)]
        for t in matching:
            counts += self._tmpl.mat[t.id]
        sid = self._sel.add(counts)
        self._matchers[m] = sid
        self._matcher_list.append(m)
        for t in matching:
            t.sels.append(sid)
            t.sel_arr = np.array(t.sels, dtype=np.int64)
        return sid

    # --- profile ----------------------------------------------------------------------------------

    def set_profile(self, profile: Profile) -> None:
        """Switch the profile; template data is kept, profile-dependent plans are rebuilt lazily."""
        scorers: list[tuple[str, ScorePlugin, int, Any]] = []
        for name, w in profile.score_weights:
            try:
                plugin = self.registry.plugin(name)
            except KeyError:
                raise TestbedError(f"score plugin {name!r} is not in the registry") from None
            scorers.append((name, plugin, int(w), profile.args(name, self.registry)))
        self.profile = profile
        self._plans = {}
        self._memo = {}
        self._scorers = scorers
        self._weights = {name: w for name, _, w, _ in scorers}
        self._filters = frozenset(profile.filters)
        args = dict(profile.plugin_args)
        fit: FitArgs = args.get("NodeResourcesFit", FitArgs())
        ignored = set(fit.ignored_resources)
        groups = set(fit.ignored_resource_groups)
        self._fit_ignored = {r for r in self.res_names if r in ignored or (is_scalar_resource(r) and r.split("/")[0] in groups)}
        self._pct = profile.percentage_of_nodes_to_score
        added_req = args.get("NodeAffinity", NodeAffinityArgs()).added_required
        if added_req is None:
            self._added_req_ok = np.ones(self.n, dtype=bool)
        else:
            self._added_req_ok = np.array([terms_match(added_req, node.name, node.labels) for node in self._nodes], dtype=bool)

    # --- state ------------------------------------------------------------------------------------

    def set_node_ready(self, node_index: int, ready: bool) -> None:
        """A not-ready node carries the ``node.kubernetes.io/not-ready:NoSchedule`` taint."""
        self._ready[node_index] = bool(ready)

    def bind(self, pod: Pod, node_index: int) -> None:
        """Account ``pod`` on the node (the scheduler cache's AddPod)."""
        t = self._template(pod)
        self._apply(t, int(node_index), 1)

    def unbind(self, pod: Pod, node_index: int) -> None:
        """Remove ``pod`` from the node (RemovePod); it must have been bound there."""
        t = self._template(pod)
        i = int(node_index)
        if self._tmpl.mat[t.id, i] <= 0:
            raise TestbedError(f"pod {pod.name!r} (template {t.id}) is not bound to node {self.node_names[i]!r}")
        self._apply(t, i, -1)

    def _apply(self, t: _Template, i: int, sign: int) -> None:
        self.req_actual[:, i] += sign * t.req
        self.req_nonzero[:, i] += sign * t.nonzero
        self._pod_count[i] += sign
        self._tmpl.mat[t.id, i] += sign
        if t.sel_arr.size:
            self._sel.mat[t.sel_arr, i] += sign

    def requested(self, resource: str) -> np.ndarray:
        """Actual requests per node (cpu in millicores); a copy."""
        return self.req_actual[self.res_index[resource]].copy()

    @property
    def pod_counts(self) -> np.ndarray:
        return self._pod_count.copy()

    def bind_existing(self, pods: Sequence[Pod]) -> int:
        """Bind the running pods (those with ``spec.nodeName`` on a known node, not terminal)."""
        n = 0
        for p in pods:
            if not p.node_name or p.terminal:
                continue
            i = self._index.get(p.node_name)
            if i is None:
                log.debug("pod %s runs on unknown node %s; ignored", p.name, p.node_name)
                continue
            self.bind(p, i)
            n += 1
        return n

    # --- templates --------------------------------------------------------------------------------

    def _template(self, pod: Pod) -> _Template:
        t = self._templates.get(pod.signature)
        if t is not None:
            return t
        t = _Template()
        t.id = len(self.templates)
        t.pod = pod
        nodes = self._nodes
        t.req = np.zeros(len(self.res_names), dtype=np.int64)
        t.unknown_requests = False
        for r, v in pod.requests.items():
            if r in self.res_index:
                t.req[self.res_index[r]] = v
            elif v > 0 and r != PODS:
                t.unknown_requests = True  # no node has it: NodeResourcesFit fails everywhere
        t.nonzero = t.req.copy()
        t.nonzero[0] = pod.nonzero_cpu
        t.nonzero[1] = pod.nonzero_memory
        tol = pod.tolerations
        t.unsched_ok = np.array([not node.unschedulable or tolerated(tol, UNSCHEDULABLE_TAINT, "", "NoSchedule") for node in nodes], dtype=bool)
        t.taint_ok = np.array(
            [all(tolerated(tol, x.key, x.value, x.effect) for x in node.taints if x.effect in ("NoSchedule", "NoExecute")) for node in nodes],
            dtype=bool,
        )
        t.tol_not_ready = tolerated(tol, NOT_READY_TAINT, "", "NoSchedule")
        sel = dict(pod.node_selector)
        req_terms = pod.required_node_terms
        t.affinity_ok = np.array(
            [
                all(node.labels.get(k) == v for k, v in sel.items()) and (req_terms is None or terms_match(req_terms, node.name, node.labels))
                for node in nodes
            ],
            dtype=bool,
        )
        t.data = {}
        t.sels = [sid for sid, m in enumerate(self._matcher_list) if m.matches(pod.namespace, pod.labels)]
        t.sel_arr = np.array(t.sels, dtype=np.int64)
        self._templates[pod.signature] = t
        self.templates.append(t)
        row = self._tmpl.add()
        assert row == t.id
        return t

    def _images_changed(self, name: str) -> None:
        """Drop what depends on the nodes' images for the templates whose pods use ``name``."""
        readers = [e.name for e in self.registry.entries if e.plugin is not None and e.plugin.reads_node_images]
        for t in self.templates:
            if any(normalized_image_name(c.image) == name for c in t.pod.init_containers + t.pod.containers):
                for r in readers:
                    t.data.pop(r, None)
                self._plans.pop(t.id, None)

    def add_node_image(self, node_index: int, image: str, size_bytes: int) -> None:
        """The node now holds ``image`` (the kubelet reports pulled images in ``status.images``);
        ImageLocality's spread factor changes for every node holding it, so affected templates
        are recomputed."""
        name = normalized_image_name(image)
        node = self._nodes[node_index]
        if name in node.images:
            return
        self._nodes[node_index] = replace(node, images={**node.images, name: int(size_bytes)})
        self.image_nodes[name] = self.image_nodes.get(name, 0) + 1
        self._images_changed(name)

    def remove_node_image(self, node_index: int, image: str) -> None:
        """The node no longer holds ``image`` (image garbage collection)."""
        name = normalized_image_name(image)
        node = self._nodes[node_index]
        if name not in node.images:
            return
        self._nodes[node_index] = replace(node, images={k: v for k, v in node.images.items() if k != name})
        self.image_nodes[name] -= 1
        self._images_changed(name)

    def _plan(self, t: _Template) -> _Plan:
        p = self._plans.get(t.id)
        if p is None:
            p = self._build_plan(t)
            self._plans[t.id] = p
        return p

    def _build_plan(self, t: _Template) -> _Plan:
        p = _Plan()
        mask = np.ones(self.n, dtype=bool)
        if "NodeUnschedulable" in self._filters:
            mask &= t.unsched_ok
        if "TaintToleration" in self._filters:
            mask &= t.taint_ok
        if "NodeAffinity" in self._filters:
            mask &= t.affinity_ok & self._added_req_ok
        if "NodeResourcesFit" in self._filters and t.unknown_requests:
            mask &= False
        p.mask = mask
        # Fit filter: the resources the pod requests, minus ignored ones.
        p.fit_check = np.array([i for i, r in enumerate(self.res_names) if t.req[i] > 0 and r not in self._fit_ignored], dtype=np.int64)
        scorers = []
        for name, plugin, w, args in self._scorers:
            if name not in t.data:
                t.data[name] = plugin.prepare(self, t)
            scorers.append((name, plugin, w, plugin.pre_score(self, t, t.data[name], args)))
        p.scorers = scorers
        return p

    # --- the cycle --------------------------------------------------------------------------------

    def _feasible_mask(self, t: _Template, p: _Plan, pod: Pod) -> np.ndarray:
        mask = p.mask & (self._ready | t.tol_not_ready)
        if "NodeResourcesFit" in self._filters:
            mask = mask & (self._pod_count + 1 <= self._pods_alloc)
            for r in p.fit_check:
                mask &= self.req_actual[r] + t.req[r] <= self.alloc[r]
        if pod.node_name and "NodeName" in self._filters:
            i = self._index.get(pod.node_name)
            only = np.zeros(self.n, dtype=bool)
            if i is not None:
                only[i] = True
            mask &= only
        return mask

    def _sample(self, mask: np.ndarray, *, advance: bool) -> np.ndarray:
        """The feasible nodes the scheduler scores: ``numFeasibleNodesToFind`` of them, found
        round-robin from ``nextStartNodeIndex`` (schedule_one.go, findNodesThatPassFilters)."""
        n = self.n
        # schedule_one.go: without score plugins the first feasible node is enough.
        k = num_feasible_nodes_to_find(n, self._pct) if self._scorers else 1
        if k >= n:
            idx = np.flatnonzero(mask)
            if advance:
                self._next_start = 0 if n == 0 else (self._next_start + n) % n
            return idx
        start = self._next_start
        order = np.concatenate((self._arange[start:], self._arange[:start]))
        feas = order[mask[order]]
        if len(feas) > k:
            last = feas[k - 1]
            processed = int((last - start) % n) + 1
            feas = feas[:k]
        else:
            processed = n
        if advance:
            self._next_start = (start + processed) % n
        return np.sort(feas)

    def _plugin_scores(self, p: _Plan, idx: np.ndarray) -> tuple[dict[str, np.ndarray], list[str]]:
        """Normalised 0..100 scores of each enabled score plugin over the nodes ``idx`` (sorted,
        unique), and the plugins whose PreScore returned Skip."""
        out: dict[str, np.ndarray] = {}
        skipped: list[str] = []
        for name, plugin, _, state in p.scorers:
            s = None if state is None else plugin.score(self, state, idx)
            if s is None:
                skipped.append(name)
            else:
                out[name] = s
        return out, skipped

    def _totals(self, scores: dict[str, np.ndarray], n: int) -> np.ndarray:
        total = np.zeros(n, dtype=np.int64)
        for name, s in scores.items():
            total += self._weights[name] * s
        return total

    def _pick(self, idx: np.ndarray, total: np.ndarray) -> int:
        best = total.max()
        ties = idx[total == best]
        if len(ties) == 1:
            return int(ties[0])
        return int(ties[self._rng.integers(len(ties))])

    def _decide(self, pod: Pod, *, advance: bool) -> int | None:
        t = self._template(pod)
        p = self._plan(t)
        mask = self._feasible_mask(t, p, pod)
        idx = self._sample(mask, advance=advance)
        if len(idx) == 0:
            return None
        if len(idx) == 1:
            return int(idx[0])
        # the weighted sum, without building the per-plugin detail score() reports
        total = np.zeros(len(idx), dtype=np.int64)
        for _, plugin, w, state in p.scorers:
            if state is not None and (s := plugin.score(self, state, idx)) is not None:
                total += w * s
        return self._pick(idx, total)

    def plugin_scores(self, pod: Pod, candidates: Sequence[int] | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
        """Normalised scores of each enabled plugin over ``candidates`` (node indices; all nodes
        by default) as PreScore/Score/NormalizeScore produce them when those nodes passed Filter,
        and the plugins whose PreScore skipped. Filters are not applied."""
        p = self._plan(self._template(pod))
        idx = self._arange if candidates is None else np.asarray(candidates, dtype=np.int64)
        return self._plugin_scores(p, idx)

    def schedule(self, pod: Pod) -> int | None:
        """The node index kube-scheduler would pick for ``pod`` (None if no node fits). Does not bind."""
        return self._decide(pod, advance=True)

    def score(self, pod: Pod) -> ScoreResult:
        """Feasibility, per-plugin normalised scores and totals for every node, and the pick."""
        t = self._template(pod)
        p = self._plan(t)
        mask = self._feasible_mask(t, p, pod)
        everyone = self._arange
        scores, skipped = self._plugin_scores(p, everyone)
        totals = self._totals(scores, self.n)
        detail = {
            name: {"plugins": {pl: int(s[i]) for pl, s in scores.items()}, "total": int(totals[i])}
            for i, name in enumerate(self.node_names)
        }
        sel = self._decide(pod, advance=False)
        reasons = self._filter_reasons(t, p, pod, mask)
        return ScoreResult(
            profile=self.profile.scheduler_name,
            feasible=tuple(self.node_names[i] for i in np.flatnonzero(mask)),
            skipped=tuple(skipped),
            scores=detail,
            selected=None if sel is None else self.node_names[sel],
            selected_index=sel,
            unschedulable=reasons,
            fit_error=fit_error_message(self.n, reasons) if sel is None else None,
        )

    def score_feasible(self, pod: Pod) -> ScoreResult:
        """The cycle as kube-scheduler runs it (schedule_one.go): only the nodes that pass Filter
        (``numFeasibleNodesToFind`` of them) are scored, normalised over those nodes; every other
        node is in ``unschedulable`` with its reasons, not in ``scores``. What ``scheduler score``
        prints."""
        t = self._template(pod)
        p = self._plan(t)
        mask = self._feasible_mask(t, p, pod)
        idx = self._sample(mask, advance=False)
        scores, skipped = self._plugin_scores(p, idx)
        totals = self._totals(scores, len(idx))
        detail = {self.node_names[i]: {"plugins": {pl: int(s[k]) for pl, s in scores.items()}, "total": int(totals[k])}
                  for k, i in enumerate(idx)}
        sel = self._decide(pod, advance=False)
        reasons = self._filter_reasons(t, p, pod, mask)
        return ScoreResult(
            profile=self.profile.scheduler_name,
            feasible=tuple(self.node_names[i] for i in np.flatnonzero(mask)),
            skipped=tuple(skipped), scores=detail,
            selected=None if sel is None else self.node_names[sel], selected_index=sel,
            unschedulable=reasons, fit_error=fit_error_message(self.n, reasons) if sel is None else None,
        )

    def filter_reasons(self, pod: Pod) -> dict[str, list[str]]:
        """Why each node that fails Filter fails, as kube-scheduler's Filter statuses say it.

        The filters run in the default profile's order (NodeUnschedulable, NodeName,
        TaintToleration, NodeAffinity, NodeResourcesFit) and, as ``RunFilterPlugins`` does, the
        first failing plugin decides; NodeResourcesFit reports every insufficient resource
        (pods, cpu, memory, ephemeral-storage, then the others by name). A not-ready node
        fails on its ``node.kubernetes.io/not-ready`` taint. Diagnostic only: it re-derives
        each node's verdict from the same masks as the fast path, which it never slows."""
        t = self._template(pod)
        p = self._plan(t)
        return self._filter_reasons(t, p, pod, self._feasible_mask(t, p, pod))

    def _filter_reasons(self, t: _Template, p: _Plan, pod: Pod, mask: np.ndarray) -> dict[str, list[str]]:
        return {self.node_names[i]: self._node_reasons(t, p, pod, int(i)) for i in np.flatnonzero(~mask)}

    def _node_reasons(self, t: _Template, p: _Plan, pod: Pod, i: int) -> list[str]:
        node = self._nodes[i]
        f = self._filters
        if "NodeUnschedulable" in f and not t.unsched_ok[i]:
            return [REASON_UNSCHEDULABLE]
        if pod.node_name and "NodeName" in f and pod.node_name != node.name:
            return [REASON_NODE_NAME]
        if "TaintToleration" in f and not t.taint_ok[i]:
            for x in node.taints:
                if x.effect in ("NoSchedule", "NoExecute") and not tolerated(pod.tolerations, x.key, x.value, x.effect):
                    return [taint_reason(x.key, x.value)]
        if not self._ready[i] and not t.tol_not_ready:
            return [taint_reason(NOT_READY_TAINT, "")]
        if "NodeAffinity" in f:
            if not self._added_req_ok[i]:
                return [REASON_ENFORCED_AFFINITY]
            if not t.affinity_ok[i]:
                return [REASON_NODE_AFFINITY]
        out: list[str] = []
        if "NodeResourcesFit" in f:
            if self._pod_count[i] + 1 > self._pods_alloc[i]:
                out.append(REASON_TOO_MANY_PODS)
            short = [self.res_names[r] for r in p.fit_check if self.req_actual[r, i] + t.req[r] > self.alloc[r, i]]
            if t.unknown_requests:
                short += [r for r, v in pod.requests.items() if r not in self.res_index and v > 0 and r != PODS]
            first = {CPU: 0, MEMORY: 1, "ephemeral-storage": 2}
            out += [f"Insufficient {r}" for r in sorted(short, key=lambda r: (first.get(r, 3), r))]
        return out or ["node(s) didn't pass the Filter plugins"]
