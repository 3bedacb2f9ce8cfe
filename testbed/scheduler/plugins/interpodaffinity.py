"""InterPodAffinity's score: ``pkg/scheduler/framework/plugins/interpodaffinity/scoring.go``
(PreScore, Score, NormalizeScore), args rule ``ValidateInterPodAffinityArgs``.

A node's raw score sums, per topology key, over the pods in its topology domain: the incoming
pod's preferred (anti-)affinity terms (+/- weight for each existing pod a term matches), and each
existing pod's terms that match the incoming pod (its required affinity terms with
``hardPodAffinityWeight``, its preferred ones with +/- weight). Pods on nodes without labels do not
count. NormalizeScore is min-max to 0..100 in float64; PreScore skips when no term matches any
pod, or, with ``ignorePreferredTermsOfExistingPods``, when the incoming pod has no term.

The counts come from the framework's incremental counters: a selector counter per incoming term,
a template counter per existing pod template, so a decision is O(nodes) work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from testbed.scheduler import kernels
from testbed.scheduler.objects import AffinityTerm
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.validation import int_errors, type_error

#: a contribution: (coefficient, source 0 = selector counter / 1 = template counter, row)
Part = tuple[int, int, int]


@dataclass(frozen=True)
class InterPodAffinityArgs:
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


@dataclass
class _State:
    """The contributions by topology key; extended when new pod templates appear."""

    pod: Any
    hard: int
    by_key: dict[str, list[Part]]
    scanned: int = 0
    pack: tuple | None = None
    dirty: bool = True


def _has_terms(pod: Any) -> bool:
    return bool(pod.affinity_required or pod.affinity_preferred or pod.anti_affinity_preferred)


class InterPodAffinity(ScorePlugin):
    name: ClassVar[str] = "InterPodAffinity"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/interpodaffinity/scoring.go"
    args_type: ClassVar[type] = InterPodAffinityArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        errs = int_errors(f"{path}.hardPodAffinityWeight", raw.get("hardPodAffinityWeight", 1), lo=0, hi=100, msg="not in valid range [0, 100]")
        ign = raw.get("ignorePreferredTermsOfExistingPods", False)
        if not isinstance(ign, bool):
            errs.append(type_error(f"{path}.ignorePreferredTermsOfExistingPods", ign, "true or false"))
        return errs

    def decode_args(self, raw: Any, path: str) -> InterPodAffinityArgs:
        return InterPodAffinityArgs(
            hard_pod_affinity_weight=int(raw.get("hardPodAffinityWeight", 1)),
            ignore_preferred_terms_of_existing_pods=bool(raw.get("ignorePreferredTermsOfExistingPods", False)),
        )

    def encode_args(self, args: InterPodAffinityArgs) -> dict[str, Any] | None:
        if args == InterPodAffinityArgs():
            return None
        return {
            "hardPodAffinityWeight": args.hard_pod_affinity_weight,
            "ignorePreferredTermsOfExistingPods": args.ignore_preferred_terms_of_existing_pods,
        }

    def prepare(self, c: Cluster, t: Template) -> list[tuple[int, str, int]]:
        """The incoming pod's preferred terms as (sign x weight, topologyKey, selector counter)."""
        pod = t.pod
        return [
            (sign * term.weight, term.topology_key, c.counter(term.namespaces, term.namespace_selector, term.selector))
            for sign, terms in ((1, pod.affinity_preferred), (-1, pod.anti_affinity_preferred))
            for term in terms
        ]

    def pre_score(self, c: Cluster, t: Template, prepared: list[tuple[int, str, int]], args: InterPodAffinityArgs) -> _State | None:
        if args.ignore_preferred_terms_of_existing_pods and not prepared:
            return None
        by_key: dict[str, list[Part]] = {}
        for coef, key, sid in prepared:
            by_key.setdefault(key, []).append((coef, 0, sid))
        return _State(t.pod, args.hard_pod_affinity_weight, by_key)

    def _scan(self, c: Cluster, s: _State) -> None:
        """Add the terms of the templates met since the last scan that match the incoming pod."""
        for other in c.templates[s.scanned :]:
            if not _has_terms(other.pod):
                continue
            terms: list[tuple[int, AffinityTerm]] = []
            if s.hard > 0:
                terms += [(s.hard, x) for x in other.pod.affinity_required]
            terms += [(x.weight, x) for x in other.pod.affinity_preferred]
            terms += [(-x.weight, x) for x in other.pod.anti_affinity_preferred]
            for coef, term in terms:
                if term.matches(s.pod.namespace, s.pod.labels):
                    s.by_key.setdefault(term.topology_key, []).append((coef, 1, other.id))
                    s.dirty = True
        s.scanned = len(c.templates)

    def _pack(self, c: Cluster, s: _State) -> tuple | None:
        """The contributions as the flat arrays of :func:`kernels.ipa_scores`."""
        if not s.by_key:
            return None
        keys = list(s.by_key)
        cols = [c.label_col(key) for key in keys]
        parts = [(k, src, row, coef) for k, key in enumerate(keys) for coef, src, row in s.by_key[key]]
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

    def score(self, c: Cluster, state: _State, idx: np.ndarray) -> np.ndarray | None:
        if state.scanned != len(c.templates):
            self._scan(c, state)
        if state.dirty:
            state.pack = self._pack(c, state)
            state.dirty = False
        if state.pack is None:
            return None
        out, any_entry = kernels.ipa_scores(c.selector_counts, c.template_counts, c.has_labels, *state.pack, idx)
        return out if any_entry else None
