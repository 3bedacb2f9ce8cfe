"""NodeAffinity's score: ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go``, args
rule ``ValidateNodeAffinityArgs``.

The raw score of a node is the sum of the weights of the pod's preferred node-affinity terms it
matches, plus those of ``addedAffinity``'s preferred terms (the plugin args); NormalizeScore is
``DefaultNormalizeScore``. PreScore skips a pod with no preferred term when the args add none.
``addedAffinity``'s required terms are enforced by the framework's Filter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.plugins.helper import DefaultNormalized
from testbed.scheduler.selectors import (
    NodeSelectorTerm,
    node_selector_terms_to_list,
    parse_node_selector_terms,
)
from testbed.scheduler.validation import invalid, is_int, node_terms_errors, type_error

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class NodeAffinityArgs:
    """``addedAffinity``: required terms every pod must also match, preferred terms added to each pod's."""

    added_required: tuple[NodeSelectorTerm, ...] | None = None
    added_preferred: tuple[tuple[int, NodeSelectorTerm], ...] = ()


def preferred_raw(c: Cluster, terms: tuple[tuple[int, NodeSelectorTerm], ...]) -> np.ndarray:
    """Per node, the summed weights of the ``(weight, term)`` preferences it matches."""
    raw = np.zeros(c.n, dtype=np.int64)
    for w, term in terms:
        raw += w * np.array([term.matches(node.name, node.labels) for node in c.nodes], dtype=np.int64)
    return raw


class NodeAffinity(ScorePlugin):
    name: ClassVar[str] = "NodeAffinity"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go"
    args_type: ClassVar[type] = NodeAffinityArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        added = raw.get("addedAffinity")
        ap = f"{path}.addedAffinity"
        if added is None:
            return []
        if not isinstance(added, dict):
            return [type_error(ap, added, "a mapping (a NodeAffinity)")]
        errs: list[str] = []
        req = added.get(_REQUIRED)
        rp = f"{ap}.{_REQUIRED}"
        if req is not None and not isinstance(req, dict):
            errs.append(type_error(rp, req, "a mapping (a NodeSelector)"))
        elif req is not None:
            errs.extend(node_terms_errors(req.get("nodeSelectorTerms"), f"{rp}.nodeSelectorTerms"))
        prefs = added.get(_PREFERRED)
        pfp = f"{ap}.{_PREFERRED}"
        if prefs is not None and not isinstance(prefs, list):
            errs.append(type_error(pfp, prefs, "a list of weighted preferences"))
        for i, pref in enumerate(prefs if isinstance(prefs, list) else []):
            pp = f"{pfp}[{i}]"
            if not isinstance(pref, dict):
                errs.append(type_error(pp, pref, "a mapping with weight and preference"))
                continue
            w = pref.get("weight")
            if not is_int(w) or not 1 <= w <= 100:
                errs.append(invalid(f"{pp}.weight", w, "must be in the range 1-100"))
            term = pref.get("preference")
            if term is not None and not isinstance(term, dict):
                errs.append(type_error(f"{pp}.preference", term, "a mapping (a NodeSelectorTerm)"))
            else:
                errs.extend(node_terms_errors([term or {}], f"{pp}.preference"))
        return errs

    def decode_args(self, raw: Any, path: str) -> NodeAffinityArgs:
        added = raw.get("addedAffinity") or {}
        ap = f"{path}.addedAffinity"
        req = added.get(_REQUIRED)
        preferred = []
        for i, p in enumerate(added.get(_PREFERRED) or []):
            (term,) = parse_node_selector_terms([p.get("preference") or {}], field=f"{ap}.{_PREFERRED}[{i}].preference")
            preferred.append((int(p["weight"]), term))
        return NodeAffinityArgs(
            added_required=None if req is None else parse_node_selector_terms(req.get("nodeSelectorTerms"), field=f"{ap}.{_REQUIRED}"),
            added_preferred=tuple(preferred),
        )

    def encode_args(self, args: NodeAffinityArgs) -> dict[str, Any] | None:
        if args == NodeAffinityArgs():
            return None
        added: dict[str, Any] = {}
        if args.added_required is not None:
            added[_REQUIRED] = {"nodeSelectorTerms": node_selector_terms_to_list(args.added_required)}
        if args.added_preferred:
            added[_PREFERRED] = [{"weight": w, "preference": node_selector_terms_to_list((t,))[0]} for w, t in args.added_preferred]
        return {"addedAffinity": added}

    def prepare(self, c: Cluster, t: Template) -> np.ndarray:
        return preferred_raw(c, t.pod.preferred_node_terms)

    def pre_score(self, c: Cluster, t: Template, prepared: np.ndarray, args: NodeAffinityArgs) -> DefaultNormalized | None:
        if not t.pod.preferred_node_terms and not args.added_preferred:
            return None
        raw = prepared + c.memo((self.name, args.added_preferred), lambda: preferred_raw(c, args.added_preferred))
        return DefaultNormalized.of(raw, reverse=False)

    def score(self, c: Cluster, state: DefaultNormalized, idx: np.ndarray) -> np.ndarray:
        return state.over(idx)
