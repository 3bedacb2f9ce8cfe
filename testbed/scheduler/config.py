"""``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``): read, default, validate, write.

The rules are upstream's:

- Default plugins: ``pkg/scheduler/apis/config/v1/default_plugins.go`` (the v1 ``multiPoint`` list
  and its score weights); user plugin sets are merged into it as ``mergePluginSet`` does (a
  re-listed default is replaced in place, ``disabled`` removes defaults, ``"*"`` removes all).
- Expansion to the score extension point: ``pkg/scheduler/framework/runtime/framework.go``
  (``expandMultiPointPlugins``, ``getScoreWeights``): a plugin listed under ``score.enabled``
  overrides its ``multiPoint`` entry, ``score.disabled`` removes a ``multiPoint`` plugin from
  scoring (``"*"`` all of them), a weight that is unset or 0 means 1, disabling is the only off.
- Defaults of the plugin args: ``pkg/scheduler/apis/config/v1/defaults.go``.
- Validation: ``pkg/scheduler/apis/config/validation/validation.go`` and
  ``validation_pluginargs.go``; messages read ``FIELD: Invalid value: V: why`` like
  ``field.Error`` does, with the field path from the document root.

A :class:`Profile` is the frozen, hashable result for one ``schedulerName``: the effective score
weights, the enabled filters and the typed plugin args the scheduler uses.
"""

from __future__ import annotations

import copy
import json
import numbers
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import ConfigError
from testbed.scheduler.objects import DEFAULT_SCHEDULER_NAME, SpreadConstraint, parse_documents, read_text
from testbed.scheduler.selectors import (
    NodeSelectorTerm,
    kind_of,
    node_selector_terms_to_list,
    parse_node_selector_terms,
)

API_VERSION = "kubescheduler.config.k8s.io/v1"
MAX_NODE_SCORE = 100  # staging/src/k8s.io/kube-scheduler/framework/interface.go
MAX_TOTAL_SCORE = 2**63 - 1  # framework.MaxTotalScore = math.MaxInt64
KIND = "KubeSchedulerConfiguration"

#: The score plugins of the default profile, in the order of the v1 multiPoint list.
SCORE_PLUGINS: tuple[str, ...] = (
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
)
#: Their weights in ``default_plugins.go``.
DEFAULT_SCORE_WEIGHTS: dict[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodeResourcesFit": 1,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}
#: The filter plugins this scheduler evaluates (the others of the default profile concern ports,
#: volumes and DRA, which the testbed's pods do not use).
FILTER_PLUGINS: tuple[str, ...] = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodeResourcesFit")

#: The v1 default multiPoint list (name, weight or None).
DEFAULT_MULTIPOINT: tuple[tuple[str, int | None], ...] = (
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", None),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", None),
)

EXTENSION_POINTS: tuple[str, ...] = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
)

# The in-tree registry (pkg/scheduler/framework/plugins/registry.go) and the extension points
# each plugin implements, for "does not exist" / "does not extend" errors.
_F, _PF, _PS, _S = "filter", "preFilter", "preScore", "score"
PLUGIN_EXTENSIONS: dict[str, frozenset[str]] = {
    "SchedulingGates": frozenset({"preEnqueue"}),
    "PrioritySort": frozenset({"queueSort"}),
    "NodeUnschedulable": frozenset({_F}),
    "NodeName": frozenset({_F}),
    "TaintToleration": frozenset({_F, _PS, _S}),
    "NodeAffinity": frozenset({_PF, _F, _PS, _S}),
    "NodePorts": frozenset({_PF, _F}),
    "NodeResourcesFit": frozenset({_PF, _F, _PS, _S}),
    "VolumeRestrictions": frozenset({_PF, _F}),
    "NodeVolumeLimits": frozenset({_PF, _F}),
    "VolumeBinding": frozenset({_PF, _F, "reserve", "preBind", _PS, _S}),
    "VolumeZone": frozenset({_PF, _F}),
    "PodTopologySpread": frozenset({_PF, _F, _PS, _S}),
    "InterPodAffinity": frozenset({_PF, _F, _PS, _S}),
    "DefaultPreemption": frozenset({"postFilter"}),
    "NodeResourcesBalancedAllocation": frozenset({_PS, _S}),
    "ImageLocality": frozenset({_S}),
    "DefaultBinder": frozenset({"bind"}),
    "DynamicResources": frozenset({"preEnqueue", _PF, _F, "postFilter", "reserve", "preBind"}),
}

STRATEGIES: tuple[str, ...] = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
DEFAULT_RESOURCES: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
BIN_PACKING_SHAPE: tuple[tuple[int, int], ...] = ((0, 0), (100, 10))
_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_TOP_FIELDS = frozenset(
    {
        "apiVersion",
        "kind",
        "parallelism",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "profiles",
        "extenders",
        "delayCacheUntilActive",
    }
)
_PROFILE_FIELDS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})


# --- typed plugin args ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FitArgs:
    """``NodeResourcesFitArgs``: the scoring strategy, its per-resource weights and the RTCR shape
    (points ``(utilization 0..100, score 0..10)``)."""

    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = ()
    ignored_resources: tuple[str, ...] = ()
    ignored_resource_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class BalancedAllocationArgs:
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES


@dataclass(frozen=True)
class InterPodAffinityArgs:
    hard_pod_affinity_weight: int = 1
    ignore_preferred_terms_of_existing_pods: bool = False


@dataclass(frozen=True)
class NodeAffinityArgs:
    """``addedAffinity``: required terms every pod must also match, preferred terms added to each pod's."""

    added_required: tuple[NodeSelectorTerm, ...] | None = None
    added_preferred: tuple[tuple[int, NodeSelectorTerm], ...] = ()


@dataclass(frozen=True)
class PodTopologySpreadArgs:
    """``defaultingType: System`` uses the built-in defaults (hostname maxSkew 3, zone maxSkew 5)."""

    defaulting_type: str = "System"
    default_constraints: tuple[SpreadConstraint, ...] = ()


@dataclass(frozen=True)
class Profile:
    """One scheduling profile, as the scheduler evaluates it (hashable; cheap to compare and switch).

    ``score_weights`` holds every enabled score plugin with its effective weight (>= 1);
    ``filters`` the enabled filter plugins among :data:`FILTER_PLUGINS`.
    ``percentage_of_nodes_to_score`` of None or 0 means upstream's adaptive default.
    """

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    score_weights: tuple[tuple[str, int], ...] = tuple((p, DEFAULT_SCORE_WEIGHTS[p]) for p in SCORE_PLUGINS)
    filters: tuple[str, ...] = FILTER_PLUGINS
    fit: FitArgs = FitArgs()
    balanced_allocation: BalancedAllocationArgs = BalancedAllocationArgs()
    inter_pod_affinity: InterPodAffinityArgs = InterPodAffinityArgs()
    node_affinity: NodeAffinityArgs = NodeAffinityArgs()
    topology_spread: PodTopologySpreadArgs = PodTopologySpreadArgs()
    percentage_of_nodes_to_score: int | None = None
    multipoint_disabled: tuple[str, ...] = ()
    other_plugin_config: tuple[tuple[str, str], ...] = ()  # args of plugins not modelled, as JSON

    def weight(self, plugin: str) -> int | None:
        for p, w in self.score_weights:
            if p == plugin:
                return w
        return None

    @property
    def disabled(self) -> tuple[str, ...]:
        """The default score plugins this profile does not score with."""
        enabled = {p for p, _ in self.score_weights}
        return tuple(p for p in SCORE_PLUGINS if p not in enabled)


@dataclass(frozen=True)
class SchedulerConfig:
    profiles: tuple[Profile, ...]
    percentage_of_nodes_to_score: int | None = None
    parallelism: int = 16
    pod_initial_backoff_seconds: int = 1
    pod_max_backoff_seconds: int = 10
    extra: tuple[tuple[str, str], ...] = field(default=())  # other top-level fields, as JSON

    def profile(self, scheduler_name: str | None = None) -> Profile:
        """The profile for ``scheduler_name`` (the first profile when None)."""
        if scheduler_name is None:
            return self.profiles[0]
        for p in self.profiles:
            if p.scheduler_name == scheduler_name:
                return p
        names = ", ".join(p.scheduler_name for p in self.profiles)
        raise ConfigError(f"no profile has schedulerName {scheduler_name!r} (profiles: {names})", field="profiles")


def default_profile(scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> Profile:
    return Profile(scheduler_name=scheduler_name)


# --- compact weights ----------------------------------------------------------------------------

_OFF = frozenset({"disabled", "disable", "off", "none", "null", "-"})


def _check_plugin(name: str) -> None:
    if not name:
        raise ConfigError("an item has no plugin name before '='", field="weights")
    if name not in DEFAULT_SCORE_WEIGHTS:
        raise ConfigError(f"unknown score plugin {name!r}; known: {', '.join(SCORE_PLUGINS)}", field="weights")


_INTEGER = re.compile(r"^[+-]?[0-9]+$")


def parse_int(text: str, *, what: str, field: str) -> int:
    """A decimal integer as Go's ``strconv.Atoi`` reads it (ASCII digits, optional sign): not
    ``1.5``, ``1e3``, ``1_0`` or non-ASCII digits, which Python's ``int()`` would take."""
    t = text.strip()
    if not _INTEGER.match(t) or len(t) > 30:
        raise ConfigError(f"{what} {text.strip()!r} is not an integer", field=field)
    return int(t)


def compact_items(text: str, *, field: str) -> list[str]:
    """The comma-separated items of a compact option value; an empty item (``"A=1,,B=2"``, a
    trailing comma) is an error rather than skipped, since it is usually a typo. An empty or
    blank ``text`` has no items."""
    if not text.strip():
        return []
    parts = [p.strip() for p in text.split(",")]
    for i, part in enumerate(parts):
        if not part:
            raise ConfigError(f"item {i + 1} of {text!r} is empty", field=field)
    return parts


def parse_weights(text: str) -> dict[str, int | None]:
    """``"NodeResourcesFit=5,ImageLocality=disabled"`` -> ``{"NodeResourcesFit": 5, "ImageLocality": None}``.

    Each plugin at most once, each weight an integer in 1..100 or ``disabled``; anything else is a
    ConfigError naming the item."""
    out: dict[str, int | None] = {}
    for part in compact_items(text, field="weights"):
        if "=" not in part:
            raise ConfigError(f"{part!r} is not NAME=WEIGHT", field="weights")
        name, _, value = (s.strip() for s in part.partition("="))
        _check_plugin(name)
        if name in out:
            raise ConfigError(f"{name} is given twice", field=f"weights.{name}")
        if value.lower() in _OFF:
            out[name] = None
            continue
        if not _INTEGER.match(value):
            raise ConfigError(f"weight {value!r} of {name} is not an integer or 'disabled'", field=f"weights.{name}")
        w = int(value) if len(value) <= 30 else 10**30
        if not 1 <= w <= 100:
            raise ConfigError(f"weight {w} of {name} is not in 1..100 (use 'disabled' to turn it off)", field=f"weights.{name}")
        out[name] = w
    return out


def format_weights(weights: Mapping[str, int | None]) -> str:
    """The inverse of :func:`parse_weights`, in :data:`SCORE_PLUGINS` order."""
    return ",".join(f"{p}={'disabled' if weights[p] is None else weights[p]}" for p in SCORE_PLUGINS if p in weights)


def profile_weights(profile: Profile) -> dict[str, int | None]:
    """The weight of each of the 7 default score plugins (None when disabled)."""
    return {p: profile.weight(p) for p in SCORE_PLUGINS}


def profile_from_weights(
    weights: Mapping[str, int | None],
    *,
    strategy: str | None = None,
    shape: list[tuple[int, int]] | tuple[tuple[int, int], ...] | None = None,
    resources: list[tuple[str, int]] | tuple[tuple[str, int], ...] | None = None,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    percentage_of_nodes_to_score: int | None = None,
) -> Profile:
    """A profile from per-plugin weights (1..100, or None to disable); plugins not named keep their
    default weight. ``strategy`` / ``shape`` / ``resources`` set NodeResourcesFit's scoring
    strategy; RequestedToCapacityRatio without a shape gets the bin-packing shape
    ``[(0, 0), (100, 10)]``. The result always exports as a valid configuration."""
    merged: dict[str, int | None] = dict(DEFAULT_SCORE_WEIGHTS)
    for name, w in weights.items():
        _check_plugin(name)
        if w is not None and (isinstance(w, bool) or not isinstance(w, numbers.Integral) or not 1 <= int(w) <= 100):
            raise ConfigError(f"weight {w!r} of {name} is not an integer in 1..100 (None disables)", field=f"weights.{name}")
        merged[name] = None if w is None else int(w)
    fit = FitArgs()
    if strategy is not None:
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}", field="strategy")
        fit = replace(fit, strategy=strategy)
    if not isinstance(scheduler_name, str) or not scheduler_name:
        raise ConfigError("Required value: a profile needs a schedulerName", field="schedulerName")
    if resources is not None:
        res = tuple((str(n), int(w)) for n, w in resources)
        if not res:
            raise ConfigError("resources must not be empty", field="resources")
        seen: set[str] = set()
        for n, w in res:
            if not n:
                raise ConfigError("a resource needs a name", field="resources")
            if n in seen:
                # upstream accepts a repeated resource and scores it twice; in a compact option
                # it can only be a typo
                raise ConfigError(f"resource {n} is given twice", field=f"resources.{n}")
            seen.add(n)
            if not 1 <= w <= 100:
                raise ConfigError(f"resource weight of {n} not in valid range (0, 100]", field=f"resources.{n}")
        fit = replace(fit, resources=res)
    if fit.strategy == "RequestedToCapacityRatio":
        pts = tuple((int(u), int(s)) for u, s in (shape if shape is not None else BIN_PACKING_SHAPE))
        errs = _shape_errors([{"utilization": u, "score": s} for u, s in pts], "shape")
        if errs:
            raise ConfigError(errs[0], field="shape")
        fit = replace(fit, shape=pts)
    elif shape is not None:
        raise ConfigError("a shape applies only to the RequestedToCapacityRatio strategy", field="shape")
    if percentage_of_nodes_to_score is not None and not 0 <= percentage_of_nodes_to_score <= 100:
        raise ConfigError("not in valid range [0-100]", field="percentageOfNodesToScore")
    return Profile(
        scheduler_name=scheduler_name,
        score_weights=tuple((p, w) for p in SCORE_PLUGINS if (w := merged[p]) is not None),
        fit=fit,
        percentage_of_nodes_to_score=percentage_of_nodes_to_score,
    )


def config_for_profile(profile: Profile) -> SchedulerConfig:
    """A configuration a real kube-scheduler accepts for ``profile``. A profile under another
    ``schedulerName`` is shipped as a second profile beside an untouched ``default-scheduler``,
    so pods that do not opt in keep the default behaviour."""
    if profile.scheduler_name == DEFAULT_SCHEDULER_NAME:
        return SchedulerConfig(profiles=(profile,))
    return SchedulerConfig(profiles=(default_profile(), profile))


# --- validation -----------------------------------------------------------------------------------


def _invalid(path: str, value: Any, msg: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {msg}"


def _required(path: str, msg: str) -> str:
    return f"{path}: Required value: {msg}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape_errors(shape: Any, path: str) -> list[str]:
    """``validateFunctionShape``: at least one point, utilization strictly increasing and in
    [0, 100], score in [0, 10]."""
    if not isinstance(shape, list) or not shape:
        return [_required(path, "at least one point must be specified")]
    errs = []
    for i, pt in enumerate(shape):
        if not isinstance(pt, dict) or not _is_int(pt.get("utilization", 0)) or not _is_int(pt.get("score", 0)):
            return [_invalid(f"{path}[{i}]", pt, "a point needs integer utilization and score")]
    for i in range(1, len(shape)):
        if shape[i - 1].get("utilization", 0) >= shape[i].get("utilization", 0):
            errs.append(_invalid(f"{path}[{i}].utilization", shape[i].get("utilization", 0), "values must be sorted in increasing order"))
            break
    for i, pt in enumerate(shape):
        u, s = pt.get("utilization", 0), pt.get("score", 0)
        if not 0 <= u <= 100:
            errs.append(_invalid(f"{path}[{i}].utilization", u, "not in valid range [0, 100]"))
        if not 0 <= s <= 10:
            errs.append(_invalid(f"{path}[{i}].score", s, "not in valid range [0, 10]"))
    return errs


def _resources_errors(resources: Any, path: str, *, exactly_one: bool = False) -> list[str]:
    if not isinstance(resources, list):
        return [_invalid(path, resources, "must be a list of {name, weight}")]
    errs = []
    seen: set[str] = set()
    for i, r in enumerate(resources):
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r.get("name"):
            errs.append(_required(f"{path}[{i}].name", "a resource needs a name"))
            continue
        w = r.get("weight", 0)
        w = 1 if w in (0, None) else w  # v1 defaulting: a weight of 0 becomes 1 before validation
        if exactly_one:
            if r["name"] in seen:
                errs.append(f"{path}[{i}].name: Duplicate value: {json.dumps(r['name'])}")
            if w != 1:
                errs.append(_invalid(f"{path}[{i}].weight", w, "must be 1"))
        elif not _is_int(w) or w <= 0 or w > 100:
            errs.append(_invalid(f"{path}[{i}].weight", w, f"resource weight of {r['name']} not in valid range (0, 100]"))
        seen.add(r["name"])
    return errs


def _node_terms_errors(raw: Any, path: str) -> list[str]:
    try:
        parse_node_selector_terms(raw, field=path)
    except ConfigError as err:
        return [f"{err.field}: Invalid value: {err.detail}"]
    return []


def _type_error(path: str, value: Any, want: str) -> str:
    """A value of the wrong JSON type: kube-scheduler's strict decoder refuses it before
    validation runs (``cannot unmarshal ... into Go struct field``)."""
    return f"{path}: Invalid value: {_show(value)}: must be {want}, not {kind_of(value)}"


def _show(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)


def _int_errors(path: str, value: Any, *, lo: int, hi: int, msg: str, go_type: str = "int32") -> list[str]:
    """An integer field: not an integer (or a bool, or NaN) is a decoding error, outside the Go
    type's range too (``go_type``), then ``lo..hi`` is upstream's validation rule with its message."""
    if not _is_int(value):
        return [_type_error(path, value, "an integer")]
    if not -(2 ** (_GO_BITS[go_type] - 1)) <= value < 2 ** (_GO_BITS[go_type] - 1):
        return [_invalid(path, value, f"does not fit {go_type}, the type of this field")]
    if not lo <= value <= hi:
        return [_invalid(path, value, msg)]
    return []


_GO_BITS = {"int32": 32, "int64": 64}


def _label_name_error(path: str, v: Any) -> list[str]:
    """``metav1validation.ValidateLabelName``: a qualified name (optional DNS prefix ``/`` name)."""
    if not isinstance(v, str):
        return [_type_error(path, v, "a string")]
    if not _LABEL_NAME.match(v) or len(v.rpartition("/")[2]) > 63:
        return [_invalid(path, v, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")]
    return []


def _args_errors(name: str, args: Any, path: str) -> list[str]:
    """The plugin-args rules of ``validation_pluginargs.go`` (``ValidateNodeResourcesFitArgs``,
    ``ValidateNodeResourcesBalancedAllocationArgs``, ``ValidateInterPodAffinityArgs``,
    ``ValidateNodeAffinityArgs``, ``ValidatePodTopologySpreadArgs``, ``ValidateDefaultPreemptionArgs``,
    ``ValidateVolumeBindingArgs``), after the type checks the strict decoder makes first."""
    if args is None:
        return []
    if not isinstance(args, dict):
        return [_invalid(path, args, "args must be a mapping")]
    errs: list[str] = []
    if name == "NodeResourcesFit":
        ign = args.get("ignoredResources")
        if ign is not None and not isinstance(ign, list):
            errs.append(_type_error(f"{path}.ignoredResources", ign, "a list of resource names"))
        for i, res in enumerate(ign if isinstance(ign, list) else []):
            errs.extend(_label_name_error(f"{path}.ignoredResources[{i}]", res))
        groups = args.get("ignoredResourceGroups")
        if groups is not None and not isinstance(groups, list):
            errs.append(_type_error(f"{path}.ignoredResourceGroups", groups, "a list of resource group names"))
        for i, g in enumerate(groups if isinstance(groups, list) else []):
            gp = f"{path}.ignoredResourceGroups[{i}]"
            if isinstance(g, str) and "/" in g:
                errs.append(_invalid(gp, g, "resource group name can't contain '/'"))
            else:
                errs.extend(_label_name_error(gp, g))
        st = args.get("scoringStrategy")
        if st is not None:
            sp = f"{path}.scoringStrategy"
            if not isinstance(st, dict):
                return [_invalid(sp, st, "must be a mapping")]
            if st.get("type") not in STRATEGIES:
                errs.append(f"{sp}.type: Unsupported value: {_show(st.get('type'))}: supported values: " + ", ".join(f'"{s}"' for s in STRATEGIES))
            if st.get("resources") is not None:
                errs.extend(_resources_errors(st["resources"], f"{sp}.resources"))
            rtcr = st.get("requestedToCapacityRatio")
            rp = f"{sp}.requestedToCapacityRatio"
            if rtcr is not None and not isinstance(rtcr, dict):
                errs.append(_type_error(rp, rtcr, "a mapping with a shape"))
            elif st.get("type") == "RequestedToCapacityRatio":
                if rtcr is None:
                    errs.append(_required(rp, "must be specified when type is RequestedToCapacityRatio"))
                else:
                    errs.extend(_shape_errors(rtcr.get("shape"), f"{rp}.shape"))
            elif rtcr is not None:
                errs.append(f"{rp}: Forbidden: must be nil when type is not RequestedToCapacityRatio")
    elif name == "NodeResourcesBalancedAllocation":
        if args.get("resources") is not None:
            errs.extend(_resources_errors(args["resources"], f"{path}.resources", exactly_one=True))
    elif name == "InterPodAffinity":
        errs.extend(_int_errors(f"{path}.hardPodAffinityWeight", args.get("hardPodAffinityWeight", 1), lo=0, hi=100, msg="not in valid range [0, 100]"))
        ign = args.get("ignorePreferredTermsOfExistingPods", False)
        if not isinstance(ign, bool):
            errs.append(_type_error(f"{path}.ignorePreferredTermsOfExistingPods", ign, "true or false"))
    elif name == "NodeAffinity":
        added = args.get("addedAffinity")
        ap = f"{path}.addedAffinity"
        if added is not None and not isinstance(added, dict):
            errs.append(_type_error(ap, added, "a mapping (a NodeAffinity)"))
        elif added is not None:
            req = added.get("requiredDuringSchedulingIgnoredDuringExecution")
            rp = f"{ap}.requiredDuringSchedulingIgnoredDuringExecution"
            if req is not None and not isinstance(req, dict):
                errs.append(_type_error(rp, req, "a mapping (a NodeSelector)"))
            elif req is not None:
                errs.extend(_node_terms_errors(req.get("nodeSelectorTerms"), f"{rp}.nodeSelectorTerms"))
            prefs = added.get("preferredDuringSchedulingIgnoredDuringExecution")
            pfp = f"{ap}.preferredDuringSchedulingIgnoredDuringExecution"
            if prefs is not None and not isinstance(prefs, list):
                errs.append(_type_error(pfp, prefs, "a list of weighted preferences"))
            for i, pref in enumerate(prefs if isinstance(prefs, list) else []):
                pp = f"{pfp}[{i}]"
                if not isinstance(pref, dict):
                    errs.append(_type_error(pp, pref, "a mapping with weight and preference"))
                    continue
                w = pref.get("weight")
                if not _is_int(w) or not 1 <= w <= 100:
                    errs.append(_invalid(f"{pp}.weight", w, "must be in the range 1-100"))
                term = pref.get("preference")
                if term is not None and not isinstance(term, dict):
                    errs.append(_type_error(f"{pp}.preference", term, "a mapping (a NodeSelectorTerm)"))
                else:
                    errs.extend(_node_terms_errors([term or {}], f"{pp}.preference"))
    elif name == "PodTopologySpread":
        dt = args.get("defaultingType", "System") or "System"
        constraints = args.get("defaultConstraints") or []
        if not isinstance(constraints, list):
            return [_type_error(f"{path}.defaultConstraints", constraints, "a list of constraints")]
        if dt not in ("System", "List"):
            errs.append(f"{path}.defaultingType: Unsupported value: {_show(dt)}: supported values: \"List\", \"System\"")
        elif dt == "System" and constraints:
            errs.append(_invalid(f"{path}.defaultingType", dt, "when .defaultConstraints are not empty"))
        seen: set[tuple[str, str]] = set()
        for i, c in enumerate(constraints):
            cp = f"{path}.defaultConstraints[{i}]"
            if not isinstance(c, dict):
                errs.append(_type_error(cp, c, "a mapping (a TopologySpreadConstraint)"))
                continue
            skew = c.get("maxSkew")
            if _is_int(skew) and skew > 0:
                errs.extend(_int_errors(f"{cp}.maxSkew", skew, lo=1, hi=2**31 - 1, msg="not in valid range (0, inf)"))
            else:
                errs.append(_invalid(f"{cp}.maxSkew", skew, "not in valid range (0, inf)"))
            if not c.get("topologyKey"):
                errs.append(_required(f"{cp}.topologyKey", "can not be empty"))
            else:
                errs.extend(_label_name_error(f"{cp}.topologyKey", c["topologyKey"]))
            when = c.get("whenUnsatisfiable")
            if not when:
                errs.append(_required(f"{cp}.whenUnsatisfiable", "can not be empty"))
            elif when not in ("DoNotSchedule", "ScheduleAnyway"):
                errs.append(f"{cp}.whenUnsatisfiable: Unsupported value: {_show(when)}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"")
            if c.get("labelSelector") is not None:
                errs.append(f"{cp}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod")
            key = (str(c.get("topologyKey")), str(when))
            if key in seen:
                errs.append(f"{path}.defaultConstraints[{i}]: Duplicate value: \"{{{key[0]}, {key[1]}}}\"")
            seen.add(key)
    elif name == "DefaultPreemption":
        pct = args.get("minCandidateNodesPercentage", 10)
        absolute = args.get("minCandidateNodesAbsolute", 100)
        pe = _int_errors(f"{path}.minCandidateNodesPercentage", pct, lo=0, hi=100, msg="not in valid range [0, 100]")
        ae = _int_errors(f"{path}.minCandidateNodesAbsolute", absolute, lo=0, hi=2**31 - 1, msg="not in valid range [0, inf)")
        errs.extend(pe + ae)
        if not pe and not ae and pct == 0 and absolute == 0:
            errs.append(_invalid(f"{path}.minCandidateNodesPercentage", pct, "cannot be zero at the same time as minCandidateNodesAbsolute"))
            errs.append(_invalid(f"{path}.minCandidateNodesAbsolute", absolute, "cannot be zero at the same time as minCandidateNodesPercentage"))
    elif name == "VolumeBinding":
        errs.extend(
            _int_errors(
                f"{path}.bindTimeoutSeconds", args.get("bindTimeoutSeconds", 600), lo=0, hi=2**63 - 1,
                msg="invalid BindTimeoutSeconds, should not be a negative value", go_type="int64",
            )
        )
    return errs


def _plugin_set_errors(ps: Any, path: str, point: str) -> list[str]:
    if ps is None:
        return []
    if not isinstance(ps, dict):
        return [_invalid(path, ps, "must be a mapping with enabled/disabled lists")]
    errs = []
    for k in ps:
        if k not in ("enabled", "disabled"):
            errs.append(f"{path}: unknown field \"{k}\"")
    for kind in ("enabled", "disabled"):
        lst = ps.get(kind) or []
        if not isinstance(lst, list):
            errs.append(_invalid(f"{path}.{kind}", lst, "must be a list of {name, weight}"))
            continue
        seen: set[str] = set()
        for i, pl in enumerate(lst):
            p = f"{path}.{kind}[{i}]"
            if not isinstance(pl, dict) or not isinstance(pl.get("name"), str) or not pl["name"]:
                errs.append(_required(f"{p}.name", "a plugin needs a name"))
                continue
            name = pl["name"]
            for k in pl:
                if k not in ("name", "weight"):
                    errs.append(f"{p}: unknown field \"{k}\"")
            if kind == "disabled":
                continue
            if name not in PLUGIN_EXTENSIONS:
                errs.append(_invalid(f"{p}.name", name, f"plugin {name!r} does not exist; known plugins: {', '.join(sorted(PLUGIN_EXTENSIONS))}"))
                continue
            if point != "multiPoint" and point not in PLUGIN_EXTENSIONS[name]:
                errs.append(_invalid(f"{p}.name", name, f"plugin {name!r} does not extend {point} plugin"))
            if name in seen:
                errs.append(f"{p}.name: Duplicate value: {json.dumps(name)}")
            seen.add(name)
            w = pl.get("weight")
            if w is not None:
                # Plugin.weight is an int32 (pkg/scheduler/apis/config/v1 types): a larger number
                # does not decode.
                errs.extend(
                    _int_errors(
                        f"{p}.weight", w, lo=0, hi=2**31 - 1, msg="must not be negative (0 means 1; disable a plugin to turn it off)"
                    )
                )
    return errs


def total_weight_error(weights: Mapping[str, int]) -> str | None:
    """``framework.NewFramework`` (``pkg/scheduler/framework/runtime/framework.go``): the running
    sum of ``weight * MaxNodeScore`` over the score plugins must stay below ``MaxTotalScore``
    (``math.MaxInt64``), else "total score of Score plugins could overflow"."""
    total = 0
    for w in weights.values():
        if w * MAX_NODE_SCORE > MAX_TOTAL_SCORE - total:
            return "total score of Score plugins could overflow"
        total += w * MAX_NODE_SCORE
    return None


def validate_config_dict(d: Any) -> list[str]:
    """Every error upstream validation (and framework construction) would report, with field paths."""
    if not isinstance(d, dict):
        return ["<root>: Invalid value: the configuration must be a mapping"]
    errs: list[str] = []
    if d.get("apiVersion") != API_VERSION:
        errs.append(_invalid("apiVersion", d.get("apiVersion"), f"must be {API_VERSION}"))
    if d.get("kind") != KIND:
        errs.append(_invalid("kind", d.get("kind"), f"must be {KIND}"))
    for k in d:
        if k not in _TOP_FIELDS:
            errs.append(f"{k}: strict decoding error: unknown field \"{k}\"")
    errs.extend(_int_errors("parallelism", d.get("parallelism", 16), lo=1, hi=2**31 - 1, msg="should be an integer value greater than zero"))
    pct = d.get("percentageOfNodesToScore")
    if pct is not None:
        errs.extend(_int_errors("percentageOfNodesToScore", pct, lo=0, hi=100, msg="not in valid range [0-100]"))
    ib = d.get("podInitialBackoffSeconds", 1)
    mb = d.get("podMaxBackoffSeconds", 10)
    ib_errs = _int_errors("podInitialBackoffSeconds", ib, lo=1, hi=2**63 - 1, msg="must be greater than 0", go_type="int64")
    errs.extend(ib_errs)
    if not ib_errs:
        errs.extend(
            _int_errors("podMaxBackoffSeconds", mb, lo=ib, hi=2**63 - 1, msg="must be greater than or equal to PodInitialBackoffSeconds", go_type="int64")
        )
    errs.extend(_component_errors(d))
    profiles = d.get("profiles")
    if profiles is None:
        profiles = [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    if not isinstance(profiles, list) or not profiles:
        errs.append(_required("profiles", "must have at least one profile"))
        return errs
    names: set[str] = set()
    queue_sorts: list[Any] = []
    for i, prof in enumerate(profiles):
        pp = f"profiles[{i}]"
        if not isinstance(prof, dict):
            errs.append(_invalid(pp, prof, "a profile must be a mapping"))
            continue
        for k in prof:
            if k not in _PROFILE_FIELDS:
                errs.append(f"{pp}: strict decoding error: unknown field \"{k}\"")
        name = prof.get("schedulerName", DEFAULT_SCHEDULER_NAME)
        if not isinstance(name, str) or not name:
            errs.append(_required(f"{pp}.schedulerName", "schedulerName is required"))
        elif name in names:
            errs.append(f"{pp}.schedulerName: Duplicate value: {json.dumps(name)}")
        names.add(str(name))
        ppct = prof.get("percentageOfNodesToScore")
        if ppct is not None:
            errs.extend(_int_errors(f"{pp}.percentageOfNodesToScore", ppct, lo=0, hi=100, msg="not in valid range [0-100]"))
        plugins = prof.get("plugins") or {}
        if not isinstance(plugins, dict):
            errs.append(_invalid(f"{pp}.plugins", plugins, "must be a mapping of extension point to plugin set"))
            plugins = {}
        for point, ps in plugins.items():
            if point not in EXTENSION_POINTS:
                errs.append(f"{pp}.plugins: strict decoding error: unknown field \"{point}\"")
                continue
            errs.extend(_plugin_set_errors(ps, f"{pp}.plugins.{point}", point))
        queue_sorts.append(json.dumps(plugins.get("queueSort"), sort_keys=True))
        pcs = prof.get("pluginConfig") or []
        if not isinstance(pcs, list):
            errs.append(_invalid(f"{pp}.pluginConfig", pcs, "must be a list of {name, args}"))
            continue
        seen: set[str] = set()
        for j, pc in enumerate(pcs):
            cp = f"{pp}.pluginConfig[{j}]"
            if not isinstance(pc, dict) or not isinstance(pc.get("name"), str):
                errs.append(_required(f"{cp}.name", "a plugin config needs a name"))
                continue
            if pc["name"] in seen:
                errs.append(f"{cp}: Duplicate value: {json.dumps(pc['name'])}")
            seen.add(pc["name"])
            errs.extend(_args_errors(pc["name"], pc.get("args"), f"{cp}.args"))
        if not errs:
            try:
                _profile_from_dict(prof, global_pct=pct, path=pp)
            except ConfigError as err:
                errs.append(f"{err.field}: {err.detail}")
    for i in range(1, len(queue_sorts)):
        if queue_sorts[i] != queue_sorts[0]:
            errs.append(_invalid(f"profiles[{i}].plugins.queueSort", json.loads(queue_sorts[i]), "has to match for all profiles"))
    errs.extend(_extender_errors(d.get("extenders")))
    return errs


def _component_errors(d: Mapping[str, Any]) -> list[str]:
    """The shapes of the component-base fields and the rules of ``ValidateKubeSchedulerConfiguration``
    on them: ``leaderElection`` and ``clientConnection`` are mappings, a leader-electing scheduler
    uses the ``leases`` lock (validation.go), ``clientConnection.burst`` is not negative
    (component-base ``ValidateClientConnectionConfiguration``); the flags are booleans, the
    addresses strings."""
    errs: list[str] = []
    le = d.get("leaderElection")
    if le is not None and not isinstance(le, dict):
        errs.append(_type_error("leaderElection", le, "a mapping (a LeaderElectionConfiguration)"))
    elif le:
        elect = le.get("leaderElect", True)
        if not isinstance(elect, bool):
            errs.append(_type_error("leaderElection.leaderElect", elect, "true or false"))
        elif elect and le.get("resourceLock", "leases") != "leases":
            errs.append(_invalid("leaderElection.resourceLock", le.get("resourceLock"), 'resourceLock value must be "leases"'))
    cc = d.get("clientConnection")
    if cc is not None and not isinstance(cc, dict):
        errs.append(_type_error("clientConnection", cc, "a mapping (a ClientConnectionConfiguration)"))
    elif cc and "burst" in cc:
        errs.extend(_int_errors("clientConnection.burst", cc["burst"], lo=0, hi=2**31 - 1, msg="must be non-negative"))
    for k in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if k in d and not isinstance(d[k], bool):
            errs.append(_type_error(k, d[k], "true or false"))
    for k in ("healthzBindAddress", "metricsBindAddress"):
        if d.get(k) is not None and not isinstance(d[k], str):
            errs.append(_type_error(k, d[k], "a string"))
    return errs


def _extender_errors(extenders: Any) -> list[str]:
    """``validateExtenders``: a prioritizing extender needs a positive weight; one binder at most."""
    if extenders is None:
        return []
    if not isinstance(extenders, list):
        return [_invalid("extenders", extenders, "must be a list")]
    errs = []
    binders = 0
    for i, e in enumerate(extenders):
        if not isinstance(e, dict):
            errs.append(_invalid(f"extenders[{i}]", e, "must be a mapping"))
            continue
        w = e.get("weight", 0)
        if not _is_int(w) or not -(2**63) <= w < 2**63:
            errs.append(_type_error(f"extenders[{i}].weight", w, "an int64"))
        elif e.get("prioritizeVerb") and w <= 0:
            errs.append(_invalid(f"extenders[{i}].weight", w, "must have a positive weight applied to it"))
        if e.get("bindVerb"):
            binders += 1
    if binders > 1:
        errs.append(_invalid("extenders", f"found {binders} extenders implementing bind", "only one extender can implement bind"))
    return errs


# --- parsing --------------------------------------------------------------------------------------


def _merge_plugin_set(defaults: list[tuple[str, int | None]], custom: Mapping[str, Any] | None) -> tuple[list[tuple[str, int | None]], set[str]]:
    """``mergePluginSet`` (v1 defaults): re-listed defaults are replaced in place, the rest appended."""
    custom = custom or {}
    disabled = {p["name"] for p in custom.get("disabled") or []}
    enabled = [(p["name"], p.get("weight")) for p in custom.get("enabled") or []]
    by_name = {n: w for n, w in enabled}
    out: list[tuple[str, int | None]] = []
    replaced: set[str] = set()
    if "*" not in disabled:
        for n, w in defaults:
            if n in disabled:
                continue
            if n in by_name:
                out.append((n, by_name[n]))
                replaced.add(n)
            else:
                out.append((n, w))
    out.extend((n, w) for n, w in enabled if n not in replaced)
    return out, disabled


def _terms_with_weights(raw: Any, path: str) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    out = []
    for i, p in enumerate(raw or []):
        (term,) = parse_node_selector_terms([p.get("preference") or {}], field=f"{path}[{i}].preference")
        out.append((int(p["weight"]), term))
    return tuple(out)


def _profile_from_dict(prof: Mapping[str, Any], *, global_pct: int | None, path: str) -> Profile:
    plugins = prof.get("plugins") or {}
    multi, multi_disabled = _merge_plugin_set(list(DEFAULT_MULTIPOINT), plugins.get("multiPoint"))

    def expand(point: str) -> list[tuple[str, int | None]]:
        ps = plugins.get(point) or {}
        specific = [(p["name"], p.get("weight")) for p in ps.get("enabled") or []]
        disabled = {p["name"] for p in ps.get("disabled") or []}
        if "*" in disabled:
            return specific
        names = {n for n, _ in specific}
        return specific + [(n, w) for n, w in multi if point in PLUGIN_EXTENSIONS.get(n, ()) and n not in disabled and n not in names]

    weights: dict[str, int] = {}
    for n, w in expand("score"):
        # VolumeBinding also scores, but its PreScore skips every pod without volume claims,
        # which is every pod of the testbed, so it never contributes.
        if n in weights or n not in DEFAULT_SCORE_WEIGHTS:
            continue
        weights[n] = 1 if not w else int(w)
    overflow = total_weight_error(weights)
    if overflow is not None:
        raise ConfigError(overflow, field=f"{path}.plugins.score")
    filters = {n for n, _ in expand("filter")}
    args: dict[str, Any] = {}
    other = []
    for pc in prof.get("pluginConfig") or []:
        a = pc.get("args") or {}
        if pc["name"] in ("NodeResourcesFit", "NodeResourcesBalancedAllocation", "InterPodAffinity", "NodeAffinity", "PodTopologySpread"):
            args[pc["name"]] = a
        else:
            other.append((pc["name"], json.dumps(a, sort_keys=True)))
    fit = FitArgs()
    fa = args.get("NodeResourcesFit", {})
    st = fa.get("scoringStrategy")
    if st is not None:
        res = tuple((r["name"], int(r.get("weight") or 1)) for r in st.get("resources") or []) or DEFAULT_RESOURCES
        shape: tuple[tuple[int, int], ...] = ()
        if st.get("type") == "RequestedToCapacityRatio":
            shape = tuple((int(p.get("utilization", 0)), int(p.get("score", 0))) for p in (st.get("requestedToCapacityRatio") or {}).get("shape") or [])
        fit = FitArgs(strategy=st.get("type"), resources=res, shape=shape)
    fit = replace(fit, ignored_resources=tuple(fa.get("ignoredResources") or ()), ignored_resource_groups=tuple(fa.get("ignoredResourceGroups") or ()))
    ba = args.get("NodeResourcesBalancedAllocation", {})
    balanced = BalancedAllocationArgs(tuple((r["name"], int(r.get("weight") or 1)) for r in ba.get("resources") or []) or DEFAULT_RESOURCES)
    ia = args.get("InterPodAffinity", {})
    ipa = InterPodAffinityArgs(
        hard_pod_affinity_weight=int(ia.get("hardPodAffinityWeight", 1)),
        ignore_preferred_terms_of_existing_pods=bool(ia.get("ignorePreferredTermsOfExistingPods", False)),
    )
    nd = (args.get("NodeAffinity", {}) or {}).get("addedAffinity") or {}
    ap = f"{path}.pluginConfig.NodeAffinity.args.addedAffinity"
    req = nd.get("requiredDuringSchedulingIgnoredDuringExecution")
    naf = NodeAffinityArgs(
        added_required=None if req is None else parse_node_selector_terms(req.get("nodeSelectorTerms"), field=f"{ap}.requiredDuringSchedulingIgnoredDuringExecution"),
        added_preferred=_terms_with_weights(nd.get("preferredDuringSchedulingIgnoredDuringExecution"), f"{ap}.preferredDuringSchedulingIgnoredDuringExecution"),
    )
    ta = args.get("PodTopologySpread", {})
    tsa = PodTopologySpreadArgs(
        defaulting_type=ta.get("defaultingType") or "System",
        default_constraints=tuple(
            SpreadConstraint(
                max_skew=int(c["maxSkew"]),
                topology_key=c["topologyKey"],
                when_unsatisfiable=c["whenUnsatisfiable"],
                selector=None,
                node_affinity_policy=c.get("nodeAffinityPolicy") or "Honor",
                node_taints_policy=c.get("nodeTaintsPolicy") or "Ignore",
            )
            for c in ta.get("defaultConstraints") or []
        ),
    )
    pct = prof.get("percentageOfNodesToScore")
    if pct is None:
        pct = global_pct
    return Profile(
        scheduler_name=prof.get("schedulerName", DEFAULT_SCHEDULER_NAME),
        score_weights=tuple((n, weights[n]) for n in SCORE_PLUGINS if n in weights),
        filters=tuple(n for n in FILTER_PLUGINS if n in filters),
        fit=fit,
        balanced_allocation=balanced,
        inter_pod_affinity=ipa,
        node_affinity=naf,
        topology_spread=tsa,
        percentage_of_nodes_to_score=pct,
        multipoint_disabled=tuple(sorted(multi_disabled)),
        other_plugin_config=tuple(other),
    )


def parse_config(d: Any, *, file: str | Path = "<config>") -> SchedulerConfig:
    """A validated configuration, upstream defaults applied. Raises ConfigError naming the field."""
    errs = validate_config_dict(d)
    if errs:
        first = errs[0]
        fld, _, msg = first.partition(": ")
        more = f" (and {len(errs) - 1} more error(s))" if len(errs) > 1 else ""
        raise ConfigError(msg + more, file=file, field=fld)
    profiles = d.get("profiles") or [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    pct = d.get("percentageOfNodesToScore")
    parsed = tuple(_profile_from_dict(p, global_pct=pct, path=f"profiles[{i}]") for i, p in enumerate(profiles))
    extra = tuple(
        (k, json.dumps(v, sort_keys=True))
        for k, v in d.items()
        if k not in ("apiVersion", "kind", "profiles", "percentageOfNodesToScore", "parallelism", "podInitialBackoffSeconds", "podMaxBackoffSeconds")
    )
    return SchedulerConfig(
        profiles=parsed,
        percentage_of_nodes_to_score=pct,
        parallelism=int(d.get("parallelism", 16)),
        pod_initial_backoff_seconds=int(d.get("podInitialBackoffSeconds", 1)),
        pod_max_backoff_seconds=int(d.get("podMaxBackoffSeconds", 10)),
        extra=extra,
    )


def read_config_dict(path: str | Path) -> Any:
    """The one document of a configuration file (YAML or JSON), as ``kube-scheduler --config``
    reads it: missing, binary, non-UTF-8, unparsable and empty files, several documents and
    repeated keys are a ConfigError naming the file, on one line."""
    p = Path(path)
    docs = parse_documents(read_text(p), file=p, multi=False)
    if not docs:
        raise ConfigError(f"empty file: expected a {KIND}", file=p)
    return docs[0]


def load_config(path: str | Path) -> SchedulerConfig:
    return parse_config(read_config_dict(path), file=path)


# --- writing --------------------------------------------------------------------------------------


def _fit_args_dict(fit: FitArgs) -> dict[str, Any]:
    st: dict[str, Any] = {"type": fit.strategy, "resources": [{"name": n, "weight": w} for n, w in fit.resources]}
    if fit.strategy == "RequestedToCapacityRatio":
        st["requestedToCapacityRatio"] = {"shape": [{"utilization": u, "score": s} for u, s in fit.shape]}
    out: dict[str, Any] = {"scoringStrategy": st}
    if fit.ignored_resources:
        out["ignoredResources"] = list(fit.ignored_resources)
    if fit.ignored_resource_groups:
        out["ignoredResourceGroups"] = list(fit.ignored_resource_groups)
    return out


def _profile_to_dict(p: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {"schedulerName": p.scheduler_name}
    if p.percentage_of_nodes_to_score is not None:
        out["percentageOfNodesToScore"] = p.percentage_of_nodes_to_score
    plugins: dict[str, Any] = {}
    if p.multipoint_disabled:
        plugins["multiPoint"] = {"disabled": [{"name": n} for n in p.multipoint_disabled]}
    gone = set(p.multipoint_disabled)
    if p.score_weights != default_profile().score_weights or gone:
        score: dict[str, Any] = {"enabled": [{"name": n, "weight": w} for n, w in p.score_weights]}
        dis = [n for n in SCORE_PLUGINS if p.weight(n) is None and n not in gone and "*" not in gone]
        if dis:
            score["disabled"] = [{"name": n} for n in dis]
        plugins["score"] = score
    fdis = [n for n in FILTER_PLUGINS if n not in p.filters and n not in gone and "*" not in gone]
    if fdis:
        plugins["filter"] = {"disabled": [{"name": n} for n in fdis]}
    if plugins:
        out["plugins"] = plugins
    pcs: list[dict[str, Any]] = [{"name": "NodeResourcesFit", "args": _fit_args_dict(p.fit)}]
    if p.balanced_allocation != BalancedAllocationArgs():
        pcs.append({"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": n, "weight": w} for n, w in p.balanced_allocation.resources]}})
    if p.inter_pod_affinity != InterPodAffinityArgs():
        pcs.append(
            {
                "name": "InterPodAffinity",
                "args": {
                    "hardPodAffinityWeight": p.inter_pod_affinity.hard_pod_affinity_weight,
                    "ignorePreferredTermsOfExistingPods": p.inter_pod_affinity.ignore_preferred_terms_of_existing_pods,
                },
            }
        )
    if p.node_affinity != NodeAffinityArgs():
        added: dict[str, Any] = {}
        if p.node_affinity.added_required is not None:
            added["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": node_selector_terms_to_list(p.node_affinity.added_required)}
        if p.node_affinity.added_preferred:
            added["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "preference": node_selector_terms_to_list((t,))[0]} for w, t in p.node_affinity.added_preferred
            ]
        pcs.append({"name": "NodeAffinity", "args": {"addedAffinity": added}})
    if p.topology_spread != PodTopologySpreadArgs():
        ts: dict[str, Any] = {"defaultingType": p.topology_spread.defaulting_type}
        if p.topology_spread.default_constraints:
            ts["defaultConstraints"] = [
                {"maxSkew": c.max_skew, "topologyKey": c.topology_key, "whenUnsatisfiable": c.when_unsatisfiable}
                for c in p.topology_spread.default_constraints
            ]
        pcs.append({"name": "PodTopologySpread", "args": ts})
    for name, raw in p.other_plugin_config:
        pcs.append({"name": name, "args": json.loads(raw)})
    out["pluginConfig"] = pcs
    return out


def config_to_dict(cfg: SchedulerConfig) -> dict[str, Any]:
    """A complete ``KubeSchedulerConfiguration`` document; parsing it gives ``cfg`` back."""
    out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    if cfg.percentage_of_nodes_to_score is not None:
        out["percentageOfNodesToScore"] = cfg.percentage_of_nodes_to_score
    if cfg.parallelism != 16:
        out["parallelism"] = cfg.parallelism
    if cfg.pod_initial_backoff_seconds != 1:
        out["podInitialBackoffSeconds"] = cfg.pod_initial_backoff_seconds
    if cfg.pod_max_backoff_seconds != 10:
        out["podMaxBackoffSeconds"] = cfg.pod_max_backoff_seconds
    for k, v in cfg.extra:
        out[k] = json.loads(v)
    out["profiles"] = [_profile_to_dict(p) for p in cfg.profiles]
    return copy.deepcopy(out)


def profile_record(profile: Profile | None) -> dict[str, Any] | None:
    """How a run records the profile it was scheduled with (``summary.json["profile"]``), the same
    JSON-serialisable shape from every backend so runs of ``sim``, ``local`` and ``kube`` compare:

    - ``scheduler_name``: the profile's ``schedulerName``;
    - ``weights``: each of the 7 default score plugins, in :data:`SCORE_PLUGINS` order, to its
      weight (None when disabled), as :func:`profile_weights`;
    - ``config``: the complete ``KubeSchedulerConfiguration`` of :func:`config_for_profile`, which
      :func:`parse_config` reads back into this profile (strategy, shape and args included).

    None (no profile was applied, so the backend's scheduler ran with whatever it had) gives None,
    written as ``"profile": null`` rather than a guess."""
    if profile is None:
        return None
    return {
        "scheduler_name": profile.scheduler_name,
        "weights": profile_weights(profile),
        "config": config_to_dict(config_for_profile(profile)),
    }


def dump_config_yaml(cfg: SchedulerConfig) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` all at once: into a temporary file beside it, then
    ``os.replace``, so a reader never sees half a file and a failure leaves no file (and no
    temporary) behind. A path naming a directory, or under a regular file, is a ConfigError."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError("is a directory; name the file to write", file=p)
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"cannot create it: {parent} is a file, not a directory", file=p)
            break
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as err:
        raise ConfigError(f"cannot write: {err.strerror or err}", file=p) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # mkstemp creates 0600; give the file the mode a plain open() would
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fh.fileno(), 0o666 & ~umask)
            fh.write(text)
        os.replace(tmp, p)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise ConfigError(f"cannot write: {err.strerror or err}", file=p) from None
        raise
    return p


def write_config(cfg: SchedulerConfig, path: str | Path) -> Path:
    return write_text_atomic(path, dump_config_yaml(cfg))
