"""``KubeSchedulerConfiguration`` (``kubescheduler.config.k8s.io/v1``): read, default, validate, write.

The rules are upstream's:

- Default plugins: ``pkg/scheduler/apis/config/v1/default_plugins.go`` (the v1 ``multiPoint`` list
  and its score weights); user plugin sets are merged into it as ``mergePluginSet`` does (a
  re-listed default is replaced in place, ``disabled`` removes defaults, ``"*"`` removes all).
- Expansion to the score extension point: ``pkg/scheduler/framework/runtime/framework.go``
  (``expandMultiPointPlugins``, ``getScoreWeights``): a plugin listed under ``score.enabled``
  overrides its ``multiPoint`` entry, ``score.disabled`` removes a ``multiPoint`` plugin from
  scoring (``"*"`` all of them), a weight that is unset or 0 means 1, disabling is the only off.
- Validation: ``pkg/scheduler/apis/config/validation/validation.go``; messages read
  ``FIELD: Invalid value: V: why`` like ``field.Error`` does, with the field path from the
  document root.

This module is the configuration wrapper only. Which plugins exist, their extension points and
default weights are the registry's data (:mod:`testbed.scheduler.plugins.registry`); the
``pluginConfig`` args of a modelled score plugin are handed to that plugin, which validates
(``validation_pluginargs.go``), decodes (defaults of ``defaults.go``) and encodes them. Every
function that reads or writes plugin names takes the ``registry`` (the default one unless told).

A :class:`Profile` is the frozen, hashable result for one ``schedulerName``: the effective score
weights, the enabled filters and the typed plugin args the scheduler uses.
"""

from __future__ import annotations

import copy
import json
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from functions.atomic import write_atomic
from testbed.errors import ConfigError
from testbed.scheduler.objects import DEFAULT_SCHEDULER_NAME, parse_documents, read_text
from testbed.scheduler.plugins.interpodaffinity import InterPodAffinityArgs
from testbed.scheduler.plugins.nodeaffinity import NodeAffinityArgs
from testbed.scheduler.plugins.noderesources import DEFAULT_RESOURCES
from testbed.scheduler.plugins.noderesources.balanced_allocation import BalancedAllocationArgs
from testbed.scheduler.plugins.noderesources.fit import STRATEGIES, FitArgs, shape_errors
from testbed.scheduler.plugins.podtopologyspread import PodTopologySpreadArgs
from testbed.scheduler.plugins.registry import DEFAULT_REGISTRY, EXTENSION_POINTS, MULTI_POINT, Registry
from testbed.scheduler.validation import int_errors, invalid, is_int, required, type_error

#: re-exported: the typed args of the modelled plugins live in their plugin modules
__all__ = [
    "DEFAULT_RESOURCES",
    "STRATEGIES",
    "BalancedAllocationArgs",
    "FitArgs",
    "InterPodAffinityArgs",
    "NodeAffinityArgs",
    "PodTopologySpreadArgs",
]

API_VERSION = "kubescheduler.config.k8s.io/v1"
MAX_NODE_SCORE = 100  # staging/src/k8s.io/kube-scheduler/framework/interface.go
MAX_TOTAL_SCORE = 2**63 - 1  # framework.MaxTotalScore = math.MaxInt64
KIND = "KubeSchedulerConfiguration"

#: The score plugins of the default profile, in the order of the v1 multiPoint list, and their
#: weights in ``default_plugins.go`` (data of the registry, :mod:`testbed.scheduler.plugins.registry`).
SCORE_PLUGINS: tuple[str, ...] = DEFAULT_REGISTRY.score_plugins
DEFAULT_SCORE_WEIGHTS: dict[str, int] = DEFAULT_REGISTRY.default_weights
#: The filter plugins this scheduler evaluates (the others of the default profile concern ports,
#: volumes and DRA, which the testbed's pods do not use).
FILTER_PLUGINS: tuple[str, ...] = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodeResourcesFit")

#: The v1 default multiPoint list (name, weight or None) and the extension points of every
#: in-tree plugin (``registry.go``), for "does not exist" / "does not extend" errors.
DEFAULT_MULTIPOINT: tuple[tuple[str, int | None], ...] = DEFAULT_REGISTRY.default_multipoint
PLUGIN_EXTENSIONS: dict[str, frozenset[str]] = DEFAULT_REGISTRY.extensions

BIN_PACKING_SHAPE: tuple[tuple[int, int], ...] = ((0, 0), (100, 10))
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
    #: the typed args of the score plugins that have args, by plugin name; args equal to their
    #: type's defaults are dropped and the rest sorted, so equal profiles compare and hash equal
    plugin_args: tuple[tuple[str, Any], ...] = ()
    percentage_of_nodes_to_score: int | None = None
    multipoint_disabled: tuple[str, ...] = ()
    other_plugin_config: tuple[tuple[str, str], ...] = ()  # args of plugins not modelled, as JSON

    def __post_init__(self) -> None:
        kept = tuple(sorted(((n, a) for n, a in self.plugin_args if a != type(a)()), key=lambda na: na[0]))
        object.__setattr__(self, "plugin_args", kept)

    def weight(self, plugin: str) -> int | None:
        for p, w in self.score_weights:
            if p == plugin:
                return w
        return None

    def args(self, plugin: str, registry: Registry = DEFAULT_REGISTRY) -> Any:
        """The typed args of ``plugin`` (its defaults unless the profile sets them)."""
        for n, a in self.plugin_args:
            if n == plugin:
                return a
        return registry.plugin(plugin).default_args()

    def with_args(self, plugin: str, args: Any) -> Profile:
        """This profile with ``plugin``'s args replaced."""
        return replace(self, plugin_args=(*((n, a) for n, a in self.plugin_args if n != plugin), (plugin, args)))

    # the args the filters also read, by their old field names (sim, local and agent code use them)
    @property
    def fit(self) -> FitArgs:
        return self.args("NodeResourcesFit")

    @property
    def node_affinity(self) -> NodeAffinityArgs:
        return self.args("NodeAffinity")

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


def _check_plugin(name: str, registry: Registry = DEFAULT_REGISTRY) -> None:
    if not name:
        raise ConfigError("an item has no plugin name before '='", field="weights")
    if name not in registry.default_weights:
        raise ConfigError(f"unknown score plugin {name!r}; known: {', '.join(registry.score_plugins)}", field="weights")


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
    registry: Registry = DEFAULT_REGISTRY,
) -> Profile:
    """A profile from per-plugin weights (1..100, or None to disable); plugins not named keep their
    default weight. ``strategy`` / ``shape`` / ``resources`` set NodeResourcesFit's scoring
    strategy; RequestedToCapacityRatio without a shape gets the bin-packing shape
    ``[(0, 0), (100, 10)]``. The result always exports as a valid configuration."""
    merged: dict[str, int | None] = dict(registry.default_weights)
    for name, w in weights.items():
        _check_plugin(name, registry)
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
        errs = shape_errors([{"utilization": u, "score": s} for u, s in pts], "shape")
        if errs:
            raise ConfigError(errs[0], field="shape")
        fit = replace(fit, shape=pts)
    elif shape is not None:
        raise ConfigError("a shape applies only to the RequestedToCapacityRatio strategy", field="shape")
    if percentage_of_nodes_to_score is not None and not 0 <= percentage_of_nodes_to_score <= 100:
        raise ConfigError("not in valid range [0-100]", field="percentageOfNodesToScore")
    return Profile(
        scheduler_name=scheduler_name,
        score_weights=tuple((p, w) for p in registry.score_plugins if (w := merged[p]) is not None),
        plugin_args=(("NodeResourcesFit", fit),),
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


def _default_preemption_errors(args: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateDefaultPreemptionArgs``."""
    pct = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    pe = int_errors(f"{path}.minCandidateNodesPercentage", pct, lo=0, hi=100, msg="not in valid range [0, 100]")
    ae = int_errors(f"{path}.minCandidateNodesAbsolute", absolute, lo=0, hi=2**31 - 1, msg="not in valid range [0, inf)")
    errs = pe + ae
    if not pe and not ae and pct == 0 and absolute == 0:
        errs.append(invalid(f"{path}.minCandidateNodesPercentage", pct, "cannot be zero at the same time as minCandidateNodesAbsolute"))
        errs.append(invalid(f"{path}.minCandidateNodesAbsolute", absolute, "cannot be zero at the same time as minCandidateNodesPercentage"))
    return errs


def _volume_binding_errors(args: Mapping[str, Any], path: str) -> list[str]:
    """``ValidateVolumeBindingArgs``."""
    return int_errors(
        f"{path}.bindTimeoutSeconds", args.get("bindTimeoutSeconds", 600), lo=0, hi=2**63 - 1,
        msg="invalid BindTimeoutSeconds, should not be a negative value", go_type="int64",
    )  # fmt: skip


#: args rules of the plugins that are validated but not modelled (their args are kept as JSON)
_OTHER_ARGS_RULES = {"DefaultPreemption": _default_preemption_errors, "VolumeBinding": _volume_binding_errors}


def _args_errors(name: str, args: Any, path: str, registry: Registry = DEFAULT_REGISTRY) -> list[str]:
    """The plugin-args rules of ``validation_pluginargs.go``, after the type checks the strict
    decoder makes first: a modelled plugin's own (``validate_args``), or those of
    :data:`_OTHER_ARGS_RULES`."""
    if args is None:
        return []
    if not isinstance(args, dict):
        return [invalid(path, args, "args must be a mapping")]
    if registry.has_args(name):
        return registry.plugin(name).validate_args(args, path)
    rule = _OTHER_ARGS_RULES.get(name)
    return [] if rule is None else rule(args, path)


def _plugin_set_errors(ps: Any, path: str, point: str, registry: Registry = DEFAULT_REGISTRY) -> list[str]:
    if ps is None:
        return []
    if not isinstance(ps, dict):
        return [invalid(path, ps, "must be a mapping with enabled/disabled lists")]
    errs = []
    for k in ps:
        if k not in ("enabled", "disabled"):
            errs.append(f"{path}: unknown field \"{k}\"")
    for kind in ("enabled", "disabled"):
        lst = ps.get(kind) or []
        if not isinstance(lst, list):
            errs.append(invalid(f"{path}.{kind}", lst, "must be a list of {name, weight}"))
            continue
        seen: set[str] = set()
        for i, pl in enumerate(lst):
            p = f"{path}.{kind}[{i}]"
            if not isinstance(pl, dict) or not isinstance(pl.get("name"), str) or not pl["name"]:
                errs.append(required(f"{p}.name", "a plugin needs a name"))
                continue
            name = pl["name"]
            for k in pl:
                if k not in ("name", "weight"):
                    errs.append(f"{p}: unknown field \"{k}\"")
            if kind == "disabled":
                continue
            if name not in registry.extensions:
                errs.append(invalid(f"{p}.name", name, f"plugin {name!r} does not exist; known plugins: {', '.join(sorted(registry.extensions))}"))
                continue
            if point != MULTI_POINT and point not in registry.extensions[name]:
                errs.append(invalid(f"{p}.name", name, f"plugin {name!r} does not extend {point} plugin"))
            if name in seen:
                errs.append(f"{p}.name: Duplicate value: {json.dumps(name)}")
            seen.add(name)
            w = pl.get("weight")
            if w is not None:
                # Plugin.weight is an int32 (pkg/scheduler/apis/config/v1 types): a larger number
                # does not decode.
                errs.extend(
                    int_errors(
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


def validate_config_dict(d: Any, *, registry: Registry = DEFAULT_REGISTRY) -> list[str]:
    """Every error upstream validation (and framework construction) would report, with field paths;
    plugin names, extension points and args rules come from ``registry``."""
    if not isinstance(d, dict):
        return ["<root>: Invalid value: the configuration must be a mapping"]
    errs: list[str] = []
    if d.get("apiVersion") != API_VERSION:
        errs.append(invalid("apiVersion", d.get("apiVersion"), f"must be {API_VERSION}"))
    if d.get("kind") != KIND:
        errs.append(invalid("kind", d.get("kind"), f"must be {KIND}"))
    for k in d:
        if k not in _TOP_FIELDS:
            errs.append(f"{k}: strict decoding error: unknown field \"{k}\"")
    errs.extend(int_errors("parallelism", d.get("parallelism", 16), lo=1, hi=2**31 - 1, msg="should be an integer value greater than zero"))
    pct = d.get("percentageOfNodesToScore")
    if pct is not None:
        errs.extend(int_errors("percentageOfNodesToScore", pct, lo=0, hi=100, msg="not in valid range [0-100]"))
    ib = d.get("podInitialBackoffSeconds", 1)
    mb = d.get("podMaxBackoffSeconds", 10)
    ib_errs = int_errors("podInitialBackoffSeconds", ib, lo=1, hi=2**63 - 1, msg="must be greater than 0", go_type="int64")
    errs.extend(ib_errs)
    if not ib_errs:
        errs.extend(
            int_errors("podMaxBackoffSeconds", mb, lo=ib, hi=2**63 - 1, msg="must be greater than or equal to PodInitialBackoffSeconds", go_type="int64")
        )
    errs.extend(_component_errors(d))
    profiles = d.get("profiles")
    if profiles is None:
        profiles = [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    if not isinstance(profiles, list) or not profiles:
        errs.append(required("profiles", "must have at least one profile"))
        return errs
    names: set[str] = set()
    queue_sorts: list[Any] = []
    for i, prof in enumerate(profiles):
        pp = f"profiles[{i}]"
        if not isinstance(prof, dict):
            errs.append(invalid(pp, prof, "a profile must be a mapping"))
            continue
        for k in prof:
            if k not in _PROFILE_FIELDS:
                errs.append(f"{pp}: strict decoding error: unknown field \"{k}\"")
        name = prof.get("schedulerName", DEFAULT_SCHEDULER_NAME)
        if not isinstance(name, str) or not name:
            errs.append(required(f"{pp}.schedulerName", "schedulerName is required"))
        elif name in names:
            errs.append(f"{pp}.schedulerName: Duplicate value: {json.dumps(name)}")
        names.add(str(name))
        ppct = prof.get("percentageOfNodesToScore")
        if ppct is not None:
            errs.extend(int_errors(f"{pp}.percentageOfNodesToScore", ppct, lo=0, hi=100, msg="not in valid range [0-100]"))
        plugins = prof.get("plugins") or {}
        if not isinstance(plugins, dict):
            errs.append(invalid(f"{pp}.plugins", plugins, "must be a mapping of extension point to plugin set"))
            plugins = {}
        for point, ps in plugins.items():
            if point not in EXTENSION_POINTS:
                errs.append(f"{pp}.plugins: strict decoding error: unknown field \"{point}\"")
                continue
            errs.extend(_plugin_set_errors(ps, f"{pp}.plugins.{point}", point, registry))
        queue_sorts.append(json.dumps(plugins.get("queueSort"), sort_keys=True))
        pcs = prof.get("pluginConfig") or []
        if not isinstance(pcs, list):
            errs.append(invalid(f"{pp}.pluginConfig", pcs, "must be a list of {name, args}"))
            continue
        seen: set[str] = set()
        for j, pc in enumerate(pcs):
            cp = f"{pp}.pluginConfig[{j}]"
            if not isinstance(pc, dict) or not isinstance(pc.get("name"), str):
                errs.append(required(f"{cp}.name", "a plugin config needs a name"))
                continue
            if pc["name"] in seen:
                errs.append(f"{cp}: Duplicate value: {json.dumps(pc['name'])}")
            seen.add(pc["name"])
            errs.extend(_args_errors(pc["name"], pc.get("args"), f"{cp}.args", registry))
        if not errs:
            try:
                _profile_from_dict(prof, global_pct=pct, path=pp, registry=registry)
            except ConfigError as err:
                errs.append(f"{err.field}: {err.detail}")
    for i in range(1, len(queue_sorts)):
        if queue_sorts[i] != queue_sorts[0]:
            errs.append(invalid(f"profiles[{i}].plugins.queueSort", json.loads(queue_sorts[i]), "has to match for all profiles"))
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
        errs.append(type_error("leaderElection", le, "a mapping (a LeaderElectionConfiguration)"))
    elif le:
        elect = le.get("leaderElect", True)
        if not isinstance(elect, bool):
            errs.append(type_error("leaderElection.leaderElect", elect, "true or false"))
        elif elect and le.get("resourceLock", "leases") != "leases":
            errs.append(invalid("leaderElection.resourceLock", le.get("resourceLock"), 'resourceLock value must be "leases"'))
    cc = d.get("clientConnection")
    if cc is not None and not isinstance(cc, dict):
        errs.append(type_error("clientConnection", cc, "a mapping (a ClientConnectionConfiguration)"))
    elif cc and "burst" in cc:
        errs.extend(int_errors("clientConnection.burst", cc["burst"], lo=0, hi=2**31 - 1, msg="must be non-negative"))
    for k in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if k in d and not isinstance(d[k], bool):
            errs.append(type_error(k, d[k], "true or false"))
    for k in ("healthzBindAddress", "metricsBindAddress"):
        if d.get(k) is not None and not isinstance(d[k], str):
            errs.append(type_error(k, d[k], "a string"))
    return errs


def _extender_errors(extenders: Any) -> list[str]:
    """``validateExtenders``: a prioritizing extender needs a positive weight; one binder at most."""
    if extenders is None:
        return []
    if not isinstance(extenders, list):
        return [invalid("extenders", extenders, "must be a list")]
    errs = []
    binders = 0
    for i, e in enumerate(extenders):
        if not isinstance(e, dict):
            errs.append(invalid(f"extenders[{i}]", e, "must be a mapping"))
            continue
        w = e.get("weight", 0)
        if not is_int(w) or not -(2**63) <= w < 2**63:
            errs.append(type_error(f"extenders[{i}].weight", w, "an int64"))
        elif e.get("prioritizeVerb") and w <= 0:
            errs.append(invalid(f"extenders[{i}].weight", w, "must have a positive weight applied to it"))
        if e.get("bindVerb"):
            binders += 1
    if binders > 1:
        errs.append(invalid("extenders", f"found {binders} extenders implementing bind", "only one extender can implement bind"))
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


def _profile_from_dict(prof: Mapping[str, Any], *, global_pct: int | None, path: str, registry: Registry = DEFAULT_REGISTRY) -> Profile:
    plugins = prof.get("plugins") or {}
    multi, multi_disabled = _merge_plugin_set(list(registry.default_multipoint), plugins.get(MULTI_POINT))

    def expand(point: str) -> list[tuple[str, int | None]]:
        ps = plugins.get(point) or {}
        specific = [(p["name"], p.get("weight")) for p in ps.get("enabled") or []]
        disabled = {p["name"] for p in ps.get("disabled") or []}
        if "*" in disabled:
            return specific
        names = {n for n, _ in specific}
        return specific + [(n, w) for n, w in multi if point in registry.extensions.get(n, ()) and n not in disabled and n not in names]

    weights: dict[str, int] = {}
    for n, w in expand("score"):
        # VolumeBinding also scores, but its PreScore skips every pod without volume claims,
        # which is every pod of the testbed, so it never contributes.
        if n in weights or n not in registry.default_weights:
            continue
        weights[n] = 1 if not w else int(w)
    overflow = total_weight_error(weights)
    if overflow is not None:
        raise ConfigError(overflow, field=f"{path}.plugins.score")
    filters = {n for n, _ in expand("filter")}
    plugin_args = []
    other = []
    for pc in prof.get("pluginConfig") or []:
        name, raw = pc["name"], pc.get("args") or {}
        if registry.has_args(name):
            plugin_args.append((name, registry.plugin(name).decode_args(raw, f"{path}.pluginConfig.{name}.args")))
        else:
            other.append((name, json.dumps(raw, sort_keys=True)))
    pct = prof.get("percentageOfNodesToScore")
    if pct is None:
        pct = global_pct
    return Profile(
        scheduler_name=prof.get("schedulerName", DEFAULT_SCHEDULER_NAME),
        score_weights=tuple((n, weights[n]) for n in registry.score_plugins if n in weights),
        filters=tuple(n for n in FILTER_PLUGINS if n in filters),
        plugin_args=tuple(plugin_args),
        percentage_of_nodes_to_score=pct,
        multipoint_disabled=tuple(sorted(multi_disabled)),
        other_plugin_config=tuple(other),
    )


def parse_config(d: Any, *, file: str | Path = "<config>", registry: Registry = DEFAULT_REGISTRY) -> SchedulerConfig:
    """A validated configuration, upstream defaults applied. Raises ConfigError naming the field."""
    errs = validate_config_dict(d, registry=registry)
    if errs:
        first = errs[0]
        fld, _, msg = first.partition(": ")
        more = f" (and {len(errs) - 1} more error(s))" if len(errs) > 1 else ""
        raise ConfigError(msg + more, file=file, field=fld)
    profiles = d.get("profiles") or [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    pct = d.get("percentageOfNodesToScore")
    parsed = tuple(_profile_from_dict(p, global_pct=pct, path=f"profiles[{i}]", registry=registry) for i, p in enumerate(profiles))
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


def _profile_to_dict(p: Profile, registry: Registry = DEFAULT_REGISTRY) -> dict[str, Any]:
    out: dict[str, Any] = {"schedulerName": p.scheduler_name}
    if p.percentage_of_nodes_to_score is not None:
        out["percentageOfNodesToScore"] = p.percentage_of_nodes_to_score
    plugins: dict[str, Any] = {}
    if p.multipoint_disabled:
        plugins["multiPoint"] = {"disabled": [{"name": n} for n in p.multipoint_disabled]}
    gone = set(p.multipoint_disabled)
    if p.score_weights != tuple(registry.default_weights.items()) or gone:
        score: dict[str, Any] = {"enabled": [{"name": n, "weight": w} for n, w in p.score_weights]}
        dis = [n for n in registry.score_plugins if p.weight(n) is None and n not in gone and "*" not in gone]
        if dis:
            score["disabled"] = [{"name": n} for n in dis]
        plugins["score"] = score
    fdis = [n for n in FILTER_PLUGINS if n not in p.filters and n not in gone and "*" not in gone]
    if fdis:
        plugins["filter"] = {"disabled": [{"name": n} for n in fdis]}
    if plugins:
        out["plugins"] = plugins
    pcs: list[dict[str, Any]] = []
    for name in registry.score_plugins:
        if registry.has_args(name):
            args = registry.plugin(name).encode_args(p.args(name, registry))
            if args is not None:
                pcs.append({"name": name, "args": args})
    for name, raw in p.other_plugin_config:
        pcs.append({"name": name, "args": json.loads(raw)})
    out["pluginConfig"] = pcs
    return out


def config_to_dict(cfg: SchedulerConfig, *, registry: Registry = DEFAULT_REGISTRY) -> dict[str, Any]:
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
    out["profiles"] = [_profile_to_dict(p, registry) for p in cfg.profiles]
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
    """Write ``text`` to ``path`` all at once (:func:`functions.atomic.write_atomic`): a reader never
    sees half a file and a failure leaves no file (and no temporary) behind. A path naming a
    directory, or under a regular file, is a ConfigError."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError("is a directory; name the file to write", file=p)
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"cannot create it: {parent} is a file, not a directory", file=p)
            break
    try:
        write_atomic(p, text)
    except OSError as err:
        raise ConfigError(f"cannot write: {err.strerror or err}", file=p) from None
    return p


def write_config(cfg: SchedulerConfig, path: str | Path) -> Path:
    return write_text_atomic(path, dump_config_yaml(cfg))
