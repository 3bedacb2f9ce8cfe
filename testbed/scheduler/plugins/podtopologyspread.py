"""PodTopologySpread's score: ``pkg/scheduler/framework/plugins/podtopologyspread/scoring.go``
(PreScore, Score, NormalizeScore) and ``plugin.go`` (``systemDefaultConstraints``), args rule
``ValidatePodTopologySpreadArgs``.

The ``ScheduleAnyway`` constraints of the pod, or, for a pod a ReplicaSet, ReplicationController
or StatefulSet owns and that has none, the default constraints (the system's: hostname maxSkew 3,
zone maxSkew 5; or the args' ``List``). The default selector is the pod's own labels (upstream
derives it from the owning objects, which the inputs do not carry). Per constraint, the matching
pods are counted per topology domain over the nodes the inclusion policies admit; the raw score
``sum(cnt * ln(domains + 2) + maxSkew - 1)`` is rounded and normalised to
``100 * (max + min - s) / max``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from testbed.scheduler import kernels
from testbed.scheduler.objects import HOSTNAME_LABEL, ZONE_LABEL, LabelSelector, SpreadConstraint
from testbed.scheduler.plugins.base import Cluster, ScorePlugin, Template
from testbed.scheduler.selectors import Requirement
from testbed.scheduler.validation import (
    int_errors,
    invalid,
    is_int,
    label_name_errors,
    required,
    show,
    type_error,
)

#: ``systemDefaultConstraints`` (topology key, maxSkew), all ScheduleAnyway
SYSTEM_DEFAULT_CONSTRAINTS: tuple[tuple[str, int], ...] = ((HOSTNAME_LABEL, 3), (ZONE_LABEL, 5))
DEFAULT_OWNER_KINDS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet"})


@dataclass(frozen=True)
class PodTopologySpreadArgs:
    """``defaultingType: System`` uses the built-in defaults (hostname maxSkew 3, zone maxSkew 5)."""

    defaulting_type: str = "System"
    default_constraints: tuple[SpreadConstraint, ...] = ()


class PodTopologySpread(ScorePlugin):
    name: ClassVar[str] = "PodTopologySpread"
    upstream: ClassVar[str] = "pkg/scheduler/framework/plugins/podtopologyspread/scoring.go"
    args_type: ClassVar[type] = PodTopologySpreadArgs

    def validate_args(self, raw: Any, path: str) -> list[str]:
        dt = raw.get("defaultingType", "System") or "System"
        constraints = raw.get("defaultConstraints") or []
        if not isinstance(constraints, list):
            return [type_error(f"{path}.defaultConstraints", constraints, "a list of constraints")]
        errs: list[str] = []
        if dt not in ("System", "List"):
            errs.append(f"{path}.defaultingType: Unsupported value: {show(dt)}: supported values: \"List\", \"System\"")
        elif dt == "System" and constraints:
            errs.append(invalid(f"{path}.defaultingType", dt, "when .defaultConstraints are not empty"))
        seen: set[tuple[str, str]] = set()
        for i, c in enumerate(constraints):
            cp = f"{path}.defaultConstraints[{i}]"
            if not isinstance(c, dict):
                errs.append(type_error(cp, c, "a mapping (a TopologySpreadConstraint)"))
                continue
            skew = c.get("maxSkew")
            if is_int(skew) and skew > 0:
                errs.extend(int_errors(f"{cp}.maxSkew", skew, lo=1, hi=2**31 - 1, msg="not in valid range (0, inf)"))
            else:
                errs.append(invalid(f"{cp}.maxSkew", skew, "not in valid range (0, inf)"))
            if not c.get("topologyKey"):
                errs.append(required(f"{cp}.topologyKey", "can not be empty"))
            else:
                errs.extend(label_name_errors(f"{cp}.topologyKey", c["topologyKey"]))
            when = c.get("whenUnsatisfiable")
            if not when:
                errs.append(required(f"{cp}.whenUnsatisfiable", "can not be empty"))
            elif when not in ("DoNotSchedule", "ScheduleAnyway"):
                errs.append(f"{cp}.whenUnsatisfiable: Unsupported value: {show(when)}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"")
            if c.get("labelSelector") is not None:
                errs.append(f"{cp}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod")
            key = (str(c.get("topologyKey")), str(when))
            if key in seen:
                errs.append(f"{path}.defaultConstraints[{i}]: Duplicate value: \"{{{key[0]}, {key[1]}}}\"")
            seen.add(key)
        return errs

    def decode_args(self, raw: Any, path: str) -> PodTopologySpreadArgs:
        return PodTopologySpreadArgs(
            defaulting_type=raw.get("defaultingType") or "System",
            default_constraints=tuple(
                SpreadConstraint(
                    max_skew=int(c["maxSkew"]),
                    topology_key=c["topologyKey"],
                    when_unsatisfiable=c["whenUnsatisfiable"],
                    selector=None,
                    node_affinity_policy=c.get("nodeAffinityPolicy") or "Honor",
                    node_taints_policy=c.get("nodeTaintsPolicy") or "Ignore",
                )
                for c in raw.get("defaultConstraints") or []
            ),
        )

    def encode_args(self, args: PodTopologySpreadArgs) -> dict[str, Any] | None:
        if args == PodTopologySpreadArgs():
            return None
        out: dict[str, Any] = {"defaultingType": args.defaulting_type}
        if args.default_constraints:
            out["defaultConstraints"] = [
                {"maxSkew": c.max_skew, "topologyKey": c.topology_key, "whenUnsatisfiable": c.when_unsatisfiable} for c in args.default_constraints
            ]
        return out

    def constraints(self, t: Template, args: PodTopologySpreadArgs) -> list[SpreadConstraint]:
        """The pod's ScheduleAnyway constraints, or the defaults that apply to it."""
        pod = t.pod
        if pod.spread_constraints:
            return [c for c in pod.spread_constraints if c.when_unsatisfiable == "ScheduleAnyway"]
        if pod.owner_kind not in DEFAULT_OWNER_KINDS:
            return []
        default_sel = LabelSelector(tuple(Requirement(k, "In", (v,)) for k, v in sorted(pod.labels.items())))
        if args.defaulting_type == "System":
            return [SpreadConstraint(skew, key, "ScheduleAnyway", default_sel) for key, skew in SYSTEM_DEFAULT_CONSTRAINTS]
        return [
            SpreadConstraint(c.max_skew, c.topology_key, c.when_unsatisfiable, default_sel, c.node_affinity_policy, c.node_taints_policy)
            for c in args.default_constraints
            if c.when_unsatisfiable == "ScheduleAnyway"
        ]

    def pre_score(self, c: Cluster, t: Template, prepared: Any, args: PodTopologySpreadArgs) -> tuple | None:
        """The arguments of :func:`kernels.spread_scores` but the candidates; None (Skip) without
        constraints. With explicit constraints or ``List`` defaults, a node lacking any of the
        topology keys is ignored (``requireAllTopologies``)."""
        constraints = self.constraints(t, args)
        if not constraints:
            return None
        require_all = bool(t.pod.spread_constraints) or args.defaulting_type != "System"
        all_keys = np.ones(c.n, dtype=bool)
        for con in constraints:
            all_keys &= c.label_col(con.topology_key)[0]
        sids, eligible = [], []
        for con in constraints:
            sids.append(c.counter((t.pod.namespace,), None, con.selector))
            elig = np.ones(c.n, dtype=bool)
            if con.node_affinity_policy == "Honor":
                elig &= t.affinity_ok
            if con.node_taints_policy == "Honor":
                elig &= t.taint_ok
            if require_all:
                elig &= all_keys
            eligible.append(elig)
        cols = [c.label_col(con.topology_key) for con in constraints]
        return (
            np.array(sids, dtype=np.int64),
            np.stack([has for has, _, _, _ in cols]),
            np.stack([dom for _, dom, _, _ in cols]),
            np.array([nd for _, _, nd, _ in cols], dtype=np.int64),
            np.array([con.topology_key == HOSTNAME_LABEL for con in constraints], dtype=np.bool_),
            np.array([con.max_skew for con in constraints], dtype=np.int64),
            np.stack(eligible),
            require_all,
        )

    def score(self, c: Cluster, state: tuple, idx: np.ndarray) -> np.ndarray:
        sids, has, dom, ndom, host, skews, elig, require_all = state
        return kernels.spread_scores(c.selector_counts, sids, has, dom, ndom, host, skews, elig, idx, require_all)
