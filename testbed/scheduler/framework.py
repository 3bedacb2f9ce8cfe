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
InterPodAffinity and PodTopologySpread cost O(nodes) numpy work per decision. Template data that
depends only on the nodes (filter masks, taint and node-affinity raw scores, image sums) is
computed once per template; data that depends on the profile once per (template, profile).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from testbed.errors import TestbedError
from testbed.scheduler import kernels, scoring
from testbed.scheduler.config import Profile
from testbed.scheduler.objects import (
    CPU,
    HOSTNAME_LABEL,
    MEMORY,
    NAMESPACE_NAME_LABEL,
    PODS,
    ZONE_LABEL,
    AffinityTerm,
    LabelSelector,
    Node,
    Pod,
    SpreadConstraint,
    is_scalar_resource,
    normalized_image_name,
)
from testbed.scheduler.selectors import Requirement, terms_match, tolerated

log = logging.getLogger(__name__)

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_DEFAULT_OWNER_KINDS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet"})
#: System default spreading (``podtopologyspread/plugin.go``, ``systemDefaultConstraints``).
SYSTEM_DEFAULT_CONSTRAINTS: tuple[tuple[str, int], ...] = ((HOSTNAME_LABEL, 3), (ZONE_LABEL, 5))

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
    """Profile-independent data of one pod signature."""

    __slots__ = (
        "id",
        "pod",
        "req",
        "nonzero",
        "unsched_ok",
        "taint_ok",
        "affinity_ok",
        "tol_not_ready",
        "taint_raw",
        "node_aff_raw",
        "image_sum",
        "num_containers",
        "incoming_terms",
        "sels",
        "sel_arr",
        "image_score",
        "taint_full",
        "unknown_requests",
    )


class _Plan:
    """Profile-dependent data of one template."""

    __slots__ = (
        "mask",
        "fit_pod",
        "fit_pod_vec",
        "fit_skip",
        "fit_check",
        "bal_pod",
        "bal_pod_vec",
        "bal_skip",
        "best_effort",
        "node_aff",
        "node_aff_skip",
        "spread",
        "spread_require_all",
        "spread_pack",
        "node_aff_full",
        "ipa",
        "ipa_pack",
        "ipa_version",
    )


class Scheduler:
    """kube-scheduler's scheduling cycle for one profile over a fixed set of nodes.

    ``schedule(pod)`` is the fast path (returns a node index or None and does not bind);
    ``score(pod)`` returns the full detail. ``kube_version`` selects the BalancedAllocation
    formula ("1.35": score with the pod placed; "1.36": change of the node's balance).
    """

    def __init__(self, nodes: Sequence[Node], profile: Profile, *, kube_version: str = "1.36", seed: int = 0) -> None:
        if not nodes:
            raise TestbedError("a scheduler needs at least one node")
        self._nodes = list(nodes)
        self.node_names: list[str] = [n.name for n in self._nodes]
        self._index = {name: i for i, name in enumerate(self.node_names)}
        if len(self._index) != len(self.node_names):
            raise TestbedError("node names must be unique")
        self.kube_version = kube_version
        try:
            self._balance_change = scoring.uses_balance_change(kube_version)
        except ValueError as err:
            raise TestbedError(str(err)) from None
        n = len(self._nodes)
        self._n = n
        extra = sorted({r for node in self._nodes for r in node.allocatable if r not in (CPU, MEMORY, PODS)})
        self._res_names = [CPU, MEMORY, *extra]
        self._res_index = {r: i for i, r in enumerate(self._res_names)}
        self._alloc = np.array([[node.allocatable.get(r, 0) for node in self._nodes] for r in self._res_names], dtype=np.int64)
        self._pods_alloc = np.array([node.allocatable.get(PODS, 0) for node in self._nodes], dtype=np.int64)
        self._requested = np.zeros((len(self._res_names), n), dtype=np.int64)
        # cpu/memory rows hold NonZeroRequested; the other rows the actual requests.
        self._nonzero = np.zeros((len(self._res_names), n), dtype=np.int64)
        self._pod_count = np.zeros(n, dtype=np.int64)
        self._ready = np.array([node.ready for node in self._nodes], dtype=bool)
        self._has_labels = np.array([bool(node.labels) for node in self._nodes], dtype=bool)
        self._arange = np.arange(n)
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._next_start = 0
        self._label_cols: dict[str, tuple[np.ndarray, np.ndarray, int, bool]] = {}
        image_nodes: dict[str, int] = {}
        for node in self._nodes:
            for img in node.images:
                image_nodes[img] = image_nodes.get(img, 0) + 1
        self._image_nodes = image_nodes
        self._templates: dict[str, _Template] = {}
        self._template_list: list[_Template] = []
        self._tmpl = _Rows(n)  # per template: bound pods per node
        self._matchers: dict[_Matcher, int] = {}
        self._matcher_list: list[_Matcher] = []
        self._sel = _Rows(n)  # per selector: matching bound pods per node
        self._affinity_templates: list[int] = []
        self._plans: dict[int, _Plan] = {}
        self.profile = profile
        self.set_profile(profile)

    # --- profile ----------------------------------------------------------------------------------

    def set_profile(self, profile: Profile) -> None:
        """Switch the profile; template data is kept, profile-dependent plans are rebuilt lazily."""
        self.profile = profile
        self._plans = {}
        self._weights = dict(profile.score_weights)
        self._filters = frozenset(profile.filters)
        fit = profile.fit
        self._fit_rows = np.array([self._res_index.get(r, -1) for r, _ in fit.resources], dtype=np.int64)
        self._fit_weights = np.array([w for _, w in fit.resources], dtype=np.int64)
        self._fit_names = [r for r, _ in fit.resources]
        self._bal_names = [r for r, _ in profile.balanced_allocation.resources]
        self._bal_rows = np.array([self._res_index.get(r, -1) for r in self._bal_names], dtype=np.int64)
        ignored = set(fit.ignored_resources)
        groups = set(fit.ignored_resource_groups)
        self._fit_ignored = {r for r in self._res_names if r in ignored or (is_scalar_resource(r) and r.split("/")[0] in groups)}
        self._pct = profile.percentage_of_nodes_to_score
        self._added_pref = profile.node_affinity.added_preferred
        self._added_req = profile.node_affinity.added_required
        na = np.zeros(self._n, dtype=np.int64)
        for w, term in self._added_pref:
            na += w * np.array([term.matches(node.name, node.labels) for node in self._nodes], dtype=np.int64)
        self._added_pref_raw = na
        if self._added_req is None:
            self._added_req_ok = np.ones(self._n, dtype=bool)
        else:
            self._added_req_ok = np.array([terms_match(self._added_req, node.name, node.labels) for node in self._nodes], dtype=bool)

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
        self._requested[:, i] += sign * t.req
        self._nonzero[:, i] += sign * t.nonzero
        self._pod_count[i] += sign
        self._tmpl.mat[t.id, i] += sign
        if t.sel_arr.size:
            self._sel.mat[t.sel_arr, i] += sign

    def requested(self, resource: str) -> np.ndarray:
        """Actual requests per node (cpu in millicores); a copy."""
        return self._requested[self._res_index[resource]].copy()

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

    def _label_col(self, key: str) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(has label, domain id of ``labels.get(key, "")``, number of ids, every value unique)."""
        col = self._label_cols.get(key)
        if col is None:
            ids: dict[str, int] = {}
            dom = np.array([ids.setdefault(node.labels.get(key, ""), len(ids)) for node in self._nodes], dtype=np.int64)
            has = np.array([key in node.labels for node in self._nodes], dtype=bool)
            unique = bool(has.all()) and len(ids) == self._n
            col = (has, dom, len(ids), unique)
            self._label_cols[key] = col
        return col

    def _matcher_id(self, m: _Matcher) -> int:
        sid = self._matchers.get(m)
        if sid is not None:
            return sid
        counts = np.zeros(self._n, dtype=np.int64)
        matching = [t for t in self._template_list if m.matches(t.pod.namespace, t.pod.labels)]
        for t in matching:
            counts += self._tmpl.mat[t.id]
        sid = self._sel.add(counts)
        self._matchers[m] = sid
        self._matcher_list.append(m)
        for t in matching:
            t.sels.append(sid)
            t.sel_arr = np.array(t.sels, dtype=np.int64)
        return sid

    def _template(self, pod: Pod) -> _Template:
        t = self._templates.get(pod.signature)
        if t is not None:
            return t
        t = _Template()
        t.id = len(self._template_list)
        t.pod = pod
        nodes = self._nodes
        t.req = np.zeros(len(self._res_names), dtype=np.int64)
        t.unknown_requests = False
        for r, v in pod.requests.items():
            if r in self._res_index:
                t.req[self._res_index[r]] = v
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
        # TaintToleration score: PreferNoSchedule taints not tolerated by the pod's tolerations
        # with an empty or PreferNoSchedule effect (tainttoleration/taint_toleration.go).
        soft = tuple(x for x in tol if x.effect in ("", "PreferNoSchedule"))
        t.taint_raw = np.array(
            [sum(1 for x in node.taints if x.effect == "PreferNoSchedule" and not tolerated(soft, x.key, x.value, x.effect)) for node in nodes],
            dtype=np.int64,
        )
        t.node_aff_raw = np.zeros(self._n, dtype=np.int64)
        for w, term in pod.preferred_node_terms:
            t.node_aff_raw += w * np.array([term.matches(node.name, node.labels) for node in nodes], dtype=np.int64)
        t.num_containers = len(pod.init_containers) + len(pod.containers)
        t.image_sum = self._image_sums(pod)
        t.image_score = scoring.image_locality(t.image_sum, t.num_containers)
        t.taint_full = scoring.default_normalize(t.taint_raw, reverse=True)
        t.sels = []
        self._templates[pod.signature] = t
        self._template_list.append(t)
        row = self._tmpl.add()
        assert row == t.id
        for sid, m in enumerate(self._matcher_list):
            if m.matches(pod.namespace, pod.labels):
                t.sels.append(sid)
        t.sel_arr = np.array(t.sels, dtype=np.int64)
        # The incoming pod's preferred terms, as (sign * weight, topologyKey, selector id).
        t.incoming_terms = [
            (sign * term.weight, term.topology_key, self._matcher_id(_Matcher(term.namespaces, term.namespace_selector, term.selector)))
            for sign, terms in ((1, pod.affinity_preferred), (-1, pod.anti_affinity_preferred))
            for term in terms
        ]
        if pod.affinity_required or pod.affinity_preferred or pod.anti_affinity_preferred:
            self._affinity_templates.append(t.id)
        return t

    def _image_sums(self, pod: Pod) -> np.ndarray:
        """ImageLocality's per-node sum of scaled image sizes (imagelocality/image_locality.go,
        ``sumImageScores``): init and regular containers, spread over all nodes of the snapshot."""
        total = self._n
        sums = np.zeros(total, dtype=np.int64)
        for c in pod.init_containers + pod.containers:
            name = normalized_image_name(c.image)
            k = self._image_nodes.get(name, 0)
            if not k:
                continue
            for i, node in enumerate(self._nodes):
                size = node.images.get(name)
                if size is not None:
                    sums[i] += scoring.scaled_image_score(size, k, total)
        return sums

    def _refresh_images(self, name: str) -> None:
        for t in self._template_list:
            if any(normalized_image_name(c.image) == name for c in t.pod.init_containers + t.pod.containers):
                t.image_sum = self._image_sums(t.pod)
                t.image_score = scoring.image_locality(t.image_sum, t.num_containers)

    def add_node_image(self, node_index: int, image: str, size_bytes: int) -> None:
        """The node now holds ``image`` (the kubelet reports pulled images in ``status.images``);
        ImageLocality's spread factor changes for every node holding it, so affected templates
        are recomputed."""
        name = normalized_image_name(image)
        node = self._nodes[node_index]
        if name in node.images:
            return
        self._nodes[node_index] = replace(node, images={**node.images, name: int(size_bytes)})
        self._image_nodes[name] = self._image_nodes.get(name, 0) + 1
        self._refresh_images(name)

    def remove_node_image(self, node_index: int, image: str) -> None:
        """The node no longer holds ``image`` (image garbage collection)."""
        name = normalized_image_name(image)
        node = self._nodes[node_index]
        if name not in node.images:
            return
        self._nodes[node_index] = replace(node, images={k: v for k, v in node.images.items() if k != name})
        self._image_nodes[name] -= 1
        self._refresh_images(name)

    def _plan(self, t: _Template) -> _Plan:
        p = self._plans.get(t.id)
        if p is None:
            p = self._build_plan(t)
            self._plans[t.id] = p
        if p.ipa_version != len(self._affinity_templates):
            p.ipa = self._ipa_contributions(t)
            p.ipa_pack = self._ipa_pack(p.ipa)
            p.ipa_version = len(self._affinity_templates)
        return p

    def _ipa_pack(self, contributions: list[tuple[str, list[tuple[int, int, int]]]]) -> tuple | None:
        """The contributions as flat arrays for :func:`kernels.ipa_scores`."""
        if not contributions:
            return None
        cols = [self._label_col(key) for key, _ in contributions]
        parts = [(k, src, row, coef) for k, (_, ps) in enumerate(contributions) for coef, src, row in ps]
        return (
            np.stack([has for has, _, _, _ in cols]),
            np.stack([dom for _, dom, _, _ in cols]),
            np.array([nd for _, _, nd, _ in cols], dtype=np.int64),
            np.array([u for _, _, _, u in cols], dtype=np.bool_),
            np.array([k for k, _, _, _ in parts], dtype=np.int64),
            np.array([src for _, src, _, _ in parts], dtype=np.int64),
            np.array([row for _, _, row, _ in parts], dtype=np.int64),
            np.array([coef for _, _, _, coef in parts], dtype=np.int64),
        )

    def _build_plan(self, t: _Template) -> _Plan:
        pod = t.pod
        prof = self.profile
        p = _Plan()
        mask = np.ones(self._n, dtype=bool)
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
        p.fit_check = np.array(
            [i for i, r in enumerate(self._res_names) if t.req[i] > 0 and r not in self._fit_ignored], dtype=np.int64
        )
        # NodeResourcesFit score: non-zero requests for cpu/memory, actual for the others.
        fit_pod = []
        fit_skip = []
        for r, row in zip(self._fit_names, self._fit_rows, strict=True):
            v = int(t.nonzero[row]) if row >= 0 else int(pod.requests.get(r, 0))
            fit_pod.append(v)
            fit_skip.append(row < 0 or (is_scalar_resource(r) and v == 0))
        p.fit_pod_vec = np.array(fit_pod, dtype=np.int64)
        p.fit_pod = p.fit_pod_vec[:, None]
        p.fit_skip = np.array(fit_skip, dtype=bool)
        bal_pod = []
        bal_skip = []
        for r, row in zip(self._bal_names, self._bal_rows, strict=True):
            v = int(t.req[row]) if row >= 0 else int(pod.requests.get(r, 0))
            bal_pod.append(v)
            bal_skip.append(row < 0 or (is_scalar_resource(r) and v == 0))
        p.bal_pod_vec = np.array(bal_pod, dtype=np.int64)
        p.bal_pod = p.bal_pod_vec[:, None]
        p.bal_skip = np.array(bal_skip, dtype=bool)
        p.best_effort = not any(bal_pod)
        p.node_aff = t.node_aff_raw + self._added_pref_raw
        p.node_aff_skip = not pod.preferred_node_terms and not self._added_pref
        p.node_aff_full = scoring.default_normalize(p.node_aff)
        # PodTopologySpread: the ScheduleAnyway constraints, or the defaults for pods a
        # ReplicaSet/ReplicationController/StatefulSet owns (the default selector is taken as the
        # pod's own labels, which the controller's selector matches).
        spread: list[tuple[int, str, int, np.ndarray]] = []
        explicit = pod.spread_constraints
        constraints: list[SpreadConstraint] = []
        if explicit:
            constraints = [c for c in explicit if c.when_unsatisfiable == "ScheduleAnyway"]
        elif pod.owner_kind in _DEFAULT_OWNER_KINDS:
            default_sel = LabelSelector(tuple(Requirement(k, "In", (v,)) for k, v in sorted(pod.labels.items())))
            ts = prof.topology_spread
            if ts.defaulting_type == "System":
                constraints = [SpreadConstraint(skew, key, "ScheduleAnyway", default_sel) for key, skew in SYSTEM_DEFAULT_CONSTRAINTS]
            else:
                constraints = [
                    SpreadConstraint(c.max_skew, c.topology_key, c.when_unsatisfiable, default_sel, c.node_affinity_policy, c.node_taints_policy)
                    for c in ts.default_constraints
                    if c.when_unsatisfiable == "ScheduleAnyway"
                ]
        p.spread_require_all = bool(explicit) or prof.topology_spread.defaulting_type != "System"
        keys = [c.topology_key for c in constraints]
        all_keys = np.ones(self._n, dtype=bool)
        for k in keys:
            all_keys &= self._label_col(k)[0]
        for c in constraints:
            sid = self._matcher_id(_Matcher((pod.namespace,), None, c.selector))
            elig = np.ones(self._n, dtype=bool)
            if c.node_affinity_policy == "Honor":
                elig &= t.affinity_ok
            if c.node_taints_policy == "Honor":
                elig &= t.taint_ok
            if p.spread_require_all:
                elig &= all_keys
            spread.append((sid, c.topology_key, c.max_skew, elig))
        p.spread = spread
        p.spread_pack = None
        if spread:
            cols = [self._label_col(key) for _, key, _, _ in spread]
            p.spread_pack = (
                np.array([sid for sid, _, _, _ in spread], dtype=np.int64),
                np.stack([has for has, _, _, _ in cols]),
                np.stack([dom for _, dom, _, _ in cols]),
                np.array([nd for _, _, nd, _ in cols], dtype=np.int64),
                np.array([key == HOSTNAME_LABEL for _, key, _, _ in spread], dtype=np.bool_),
                np.array([skew for _, _, skew, _ in spread], dtype=np.int64),
                np.stack([elig for _, _, _, elig in spread]),
            )
        p.ipa = []
        p.ipa_pack = None
        p.ipa_version = -1
        return p

    def _ipa_contributions(self, t: _Template) -> list[tuple[str, list[tuple[int, int, int]]]]:
        """InterPodAffinity's topologyScore recipe (interpodaffinity/scoring.go, PreScore): per
        topology key, (coefficient, source, row) triples: the per-node pod counts of row ``row``
        of the selector counters (source 0) or of the template counters (source 1)."""
        pod = t.pod
        args = self.profile.inter_pod_affinity
        by_key: dict[str, list[tuple[int, int, int]]] = {}
        if args.ignore_preferred_terms_of_existing_pods and not t.incoming_terms:
            return []
        for coef, key, sid in t.incoming_terms:
            by_key.setdefault(key, []).append((coef, 0, sid))
        hard = args.hard_pod_affinity_weight
        for tid in self._affinity_templates:
            other = self._template_list[tid].pod
            terms: list[tuple[int, AffinityTerm]] = []
            if hard > 0:
                terms += [(hard, x) for x in other.affinity_required]
            terms += [(x.weight, x) for x in other.affinity_preferred]
            terms += [(-x.weight, x) for x in other.anti_affinity_preferred]
            for coef, term in terms:
                if term.matches(pod.namespace, pod.labels):
                    by_key.setdefault(term.topology_key, []).append((coef, 1, tid))
        return list(by_key.items())

    # --- the cycle --------------------------------------------------------------------------------

    def _feasible_mask(self, t: _Template, p: _Plan, pod: Pod) -> np.ndarray:
        mask = p.mask & (self._ready | t.tol_not_ready)
        if "NodeResourcesFit" in self._filters:
            mask = mask & (self._pod_count + 1 <= self._pods_alloc)
            for r in p.fit_check:
                mask &= self._requested[r] + t.req[r] <= self._alloc[r]
        if pod.node_name and "NodeName" in self._filters:
            i = self._index.get(pod.node_name)
            only = np.zeros(self._n, dtype=bool)
            if i is not None:
                only[i] = True
            mask &= only
        return mask

    def _sample(self, mask: np.ndarray, *, advance: bool) -> np.ndarray:
        """The feasible nodes the scheduler scores: ``numFeasibleNodesToFind`` of them, found
        round-robin from ``nextStartNodeIndex`` (schedule_one.go, findNodesThatPassFilters)."""
        n = self._n
        # schedule_one.go: without score plugins the first feasible node is enough.
        k = scoring.num_feasible_nodes_to_find(n, self._pct) if self._weights else 1
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

    def _plugin_scores(self, t: _Template, p: _Plan, idx: np.ndarray) -> tuple[dict[str, np.ndarray], list[str]]:
        """Normalised 0..100 scores of each enabled score plugin over the nodes ``idx``, and the
        plugins whose PreScore returned Skip."""
        w = self._weights
        out: dict[str, np.ndarray] = {}
        skipped: list[str] = []
        fast = kernels.AVAILABLE
        full = len(idx) == self._n  # idx is sorted and unique, so this means every node
        if "TaintToleration" in w:
            if full:
                out["TaintToleration"] = t.taint_full
            elif fast:
                out["TaintToleration"] = kernels.default_normalize(t.taint_raw, idx, True)
            else:
                out["TaintToleration"] = scoring.default_normalize(t.taint_raw[idx], reverse=True)
        if "NodeAffinity" in w:
            if p.node_aff_skip:
                skipped.append("NodeAffinity")
            elif full:
                out["NodeAffinity"] = p.node_aff_full
            elif fast:
                out["NodeAffinity"] = kernels.default_normalize(p.node_aff, idx, False)
            else:
                out["NodeAffinity"] = scoring.default_normalize(p.node_aff[idx])
        if "NodeResourcesFit" in w:
            out["NodeResourcesFit"] = self._fit_score(p, idx)
        if "PodTopologySpread" in w:
            if not p.spread:
                skipped.append("PodTopologySpread")
            else:
                out["PodTopologySpread"] = self._spread_score(p, idx)
        if "InterPodAffinity" in w:
            s = self._ipa_score(p, idx)
            if s is None:
                skipped.append("InterPodAffinity")
            else:
                out["InterPodAffinity"] = s
        if "NodeResourcesBalancedAllocation" in w:
            if p.best_effort:
                skipped.append("NodeResourcesBalancedAllocation")
            else:
                out["NodeResourcesBalancedAllocation"] = self._balanced_score(p, idx)
        if "ImageLocality" in w:
            out["ImageLocality"] = t.image_score if full else t.image_score[idx]
        return out, skipped

    def _fit_score(self, p: _Plan, idx: np.ndarray) -> np.ndarray:
        strategy = self.profile.fit.strategy
        if kernels.AVAILABLE and strategy != "RequestedToCapacityRatio":
            return kernels.fit_scores(
                self._nonzero, self._alloc, self._fit_rows, idx, p.fit_pod_vec, p.fit_skip, self._fit_weights, strategy == "MostAllocated"
            )
        rows = np.where(self._fit_rows >= 0, self._fit_rows, 0)
        req = self._nonzero[rows][:, idx] + p.fit_pod
        alloc = self._alloc[rows][:, idx]
        if p.fit_skip.any():
            alloc = np.where(p.fit_skip[:, None], 0, alloc)
        if strategy == "LeastAllocated":
            return scoring.least_allocated(req, alloc, self._fit_weights)
        if strategy == "MostAllocated":
            return scoring.most_allocated(req, alloc, self._fit_weights)
        return scoring.requested_to_capacity_ratio(req, alloc, self._fit_weights, self.profile.fit.shape)

    def _balanced_score(self, p: _Plan, idx: np.ndarray) -> np.ndarray:
        if kernels.AVAILABLE:
            return kernels.balanced_scores(self._requested, self._alloc, self._bal_rows, idx, p.bal_pod_vec, p.bal_skip, self._balance_change)
        rows = np.where(self._bal_rows >= 0, self._bal_rows, 0)
        without = self._requested[rows][:, idx]
        alloc = self._alloc[rows][:, idx]
        if p.bal_skip.any():
            alloc = np.where(p.bal_skip[:, None], 0, alloc)
        with_pod = without + p.bal_pod
        if self._balance_change:
            return scoring.balanced_allocation(with_pod, without, alloc, kube_version="1.36")
        return scoring.balance_score(with_pod, alloc)

    def _spread_score(self, p: _Plan, idx: np.ndarray) -> np.ndarray:
        if kernels.AVAILABLE:
            sids, has, dom, ndom, host, skews, elig = p.spread_pack
            return kernels.spread_scores(self._sel.mat, sids, has, dom, ndom, host, skews, elig, idx, p.spread_require_all)
        ignored = np.zeros(len(idx), dtype=bool)
        cols = [self._label_col(key) for _, key, _, _ in p.spread]
        if p.spread_require_all:
            for has, _, _, _ in cols:
                ignored |= ~has[idx]
        keep = idx[~ignored]
        total = np.zeros(len(idx), dtype=np.float64)
        for (sid, key, skew, elig), (has, dom, ndom, _) in zip(p.spread, cols, strict=True):
            counts = self._sel.mat[sid]
            if key == HOSTNAME_LABEL:
                size = len(keep)
                cnt = counts[idx]
            else:
                present = np.zeros(ndom, dtype=bool)
                present[dom[keep]] = True
                size = int(present.sum())
                per_dom = np.bincount(dom[elig], weights=counts[elig], minlength=ndom)
                cnt = per_dom[dom[idx]]
            weight = scoring.topology_normalizing_weight(size)
            total += np.where(has[idx], cnt * weight + float(skew - 1), 0.0)
        raw = np.where(ignored, 0, scoring.go_round(total))
        return scoring.topology_spread_normalize(raw, ignored)

    def _ipa_score(self, p: _Plan, idx: np.ndarray) -> np.ndarray | None:
        if not p.ipa:
            return None
        if kernels.AVAILABLE:
            out, any_entry = kernels.ipa_scores(self._sel.mat, self._tmpl.mat, self._has_labels, *p.ipa_pack, idx)
            return out if any_entry else None
        raw = np.zeros(len(idx), dtype=np.int64)
        any_entry = False
        for key, parts in p.ipa:
            has, dom, ndom, unique = self._label_col(key)
            src = has & self._has_labels
            vec = np.zeros(self._n, dtype=np.int64)
            for coef, source, row in parts:
                c = (self._sel.mat[row] if source == 0 else self._tmpl.mat[row]) * src
                if not any_entry and c.any():
                    any_entry = True
                vec += coef * c
            if unique:
                raw += np.where(has[idx], vec[idx], 0)
            else:
                per_dom = np.bincount(dom, weights=vec, minlength=ndom).astype(np.int64)
                raw += np.where(has[idx], per_dom[dom[idx]], 0)
        if not any_entry:
            return None
        return scoring.inter_pod_affinity_normalize(raw)

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
        scores, _ = self._plugin_scores(t, p, idx)
        return self._pick(idx, self._totals(scores, len(idx)))

    def plugin_scores(self, pod: Pod, candidates: Sequence[int] | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
        """Normalised scores of each enabled plugin over ``candidates`` (node indices; all nodes
        by default) as PreScore/Score/NormalizeScore produce them when those nodes passed Filter,
        and the plugins whose PreScore skipped. Filters are not applied."""
        t = self._template(pod)
        p = self._plan(t)
        idx = self._arange if candidates is None else np.asarray(candidates, dtype=np.int64)
        return self._plugin_scores(t, p, idx)

    def schedule(self, pod: Pod) -> int | None:
        """The node index kube-scheduler would pick for ``pod`` (None if no node fits). Does not bind."""
        return self._decide(pod, advance=True)

    def score(self, pod: Pod) -> ScoreResult:
        """Feasibility, per-plugin normalised scores and totals for every node, and the pick."""
        t = self._template(pod)
        p = self._plan(t)
        mask = self._feasible_mask(t, p, pod)
        everyone = self._arange
        scores, skipped = self._plugin_scores(t, p, everyone)
        totals = self._totals(scores, self._n)
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
            fit_error=fit_error_message(self._n, reasons) if sel is None else None,
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
            short = [self._res_names[r] for r in p.fit_check if self._requested[r, i] + t.req[r] > self._alloc[r, i]]
            if t.unknown_requests:
                short += [r for r, v in pod.requests.items() if r not in self._res_index and v > 0 and r != PODS]
            first = {CPU: 0, MEMORY: 1, "ephemeral-storage": 2}
            out += [f"Insufficient {r}" for r in sorted(short, key=lambda r: (first.get(r, 3), r))]
        return out or ["node(s) didn't pass the Filter plugins"]
