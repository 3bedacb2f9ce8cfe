"""The in-tree plugin registry as data: ``pkg/scheduler/framework/plugins/registry.go`` (which
plugins exist and the extension points each implements) and the v1 default ``multiPoint`` list
with its score weights (``pkg/scheduler/apis/config/v1/default_plugins.go``).

Each row is one plugin, in the order of the default list; ``plugin`` is the module that scores
for it (None for the plugins this scheduler does not model as scorers: their names and extension
points still validate configurations). Adding a score plugin is its module plus one row here;
ablating one is deleting its row (and its module). :meth:`Registry.with_entry` /
:meth:`Registry.without` give modified registries for experiments and tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from testbed.scheduler.plugins.base import ScorePlugin
from testbed.scheduler.plugins.imagelocality import ImageLocality
from testbed.scheduler.plugins.interpodaffinity import InterPodAffinity
from testbed.scheduler.plugins.nodeaffinity import NodeAffinity
from testbed.scheduler.plugins.noderesources.balanced_allocation import NodeResourcesBalancedAllocation
from testbed.scheduler.plugins.noderesources.fit import NodeResourcesFit
from testbed.scheduler.plugins.podtopologyspread import PodTopologySpread
from testbed.scheduler.plugins.tainttoleration import TaintToleration

PRE_ENQUEUE, QUEUE_SORT, PRE_FILTER, FILTER, POST_FILTER = "preEnqueue", "queueSort", "preFilter", "filter", "postFilter"
PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND, BIND, POST_BIND = "preScore", "score", "reserve", "permit", "preBind", "bind", "postBind"
MULTI_POINT = "multiPoint"
EXTENSION_POINTS: tuple[str, ...] = (
    PRE_ENQUEUE, QUEUE_SORT, PRE_FILTER, FILTER, POST_FILTER, PRE_SCORE, SCORE, RESERVE, PERMIT, PRE_BIND, BIND, POST_BIND, MULTI_POINT,
)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One registered plugin: its extension points, its weight in the default multiPoint list
    (None: unweighted, or not a default plugin), whether it is in that list, and the scorer."""

    name: str
    points: frozenset[str]
    weight: int | None = None
    default: bool = True
    plugin: ScorePlugin | None = None


def _entry(name: str, *points: str, weight: int | None = None, default: bool = True, plugin: ScorePlugin | None = None) -> Entry:
    return Entry(name, frozenset(points), weight, default, plugin)


class Registry:
    """The plugins a configuration may name and the score plugins the scheduler runs."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: tuple[Entry, ...] = tuple(entries)
        self._by_name = {e.name: e for e in self.entries}
        if len(self._by_name) != len(self.entries):
            raise ValueError("plugin names must be unique")
        for e in self.entries:
            if e.plugin is not None and (e.plugin.name != e.name or SCORE not in e.points or not e.weight or not e.default):
                raise ValueError(f"score plugin {e.name}: needs its own name, the score point and a default weight")
        #: the modelled score plugins in default-list order, and their default weights
        self.score_plugins: tuple[str, ...] = tuple(e.name for e in self.entries if e.plugin is not None)
        self.default_weights: dict[str, int] = {e.name: int(e.weight or 0) for e in self.entries if e.plugin is not None}
        #: the v1 default multiPoint list: (name, weight or None)
        self.default_multipoint: tuple[tuple[str, int | None], ...] = tuple((e.name, e.weight) for e in self.entries if e.default)
        self.extensions: dict[str, frozenset[str]] = {e.name: e.points for e in self.entries}

    def plugin(self, name: str) -> ScorePlugin:
        p = self._by_name[name].plugin
        if p is None:
            raise KeyError(name)
        return p

    def has_args(self, name: str) -> bool:
        e = self._by_name.get(name)
        return e is not None and e.plugin is not None and e.plugin.args_type is not None

    def with_entry(self, entry: Entry) -> Registry:
        """This registry plus ``entry`` (replacing a plugin of the same name in place)."""
        if entry.name in self._by_name:
            return Registry(entry if e.name == entry.name else e for e in self.entries)
        return Registry((*self.entries, entry))

    def without(self, name: str) -> Registry:
        return Registry(e for e in self.entries if e.name != name)


_F, _PF, _PS, _S = FILTER, PRE_FILTER, PRE_SCORE, SCORE

DEFAULT_REGISTRY = Registry(
    (
        _entry("SchedulingGates", PRE_ENQUEUE),
        _entry("PrioritySort", QUEUE_SORT),
        _entry("NodeUnschedulable", _F),
        _entry("NodeName", _F),
        _entry("TaintToleration", _F, _PS, _S, weight=3, plugin=TaintToleration()),
        _entry("NodeAffinity", _PF, _F, _PS, _S, weight=2, plugin=NodeAffinity()),
        _entry("NodePorts", _PF, _F),
        _entry("NodeResourcesFit", _PF, _F, _PS, _S, weight=1, plugin=NodeResourcesFit()),
        _entry("VolumeRestrictions", _PF, _F),
        _entry("NodeVolumeLimits", _PF, _F),
        _entry("VolumeBinding", _PF, _F, RESERVE, PRE_BIND, _PS, _S),
        _entry("VolumeZone", _PF, _F),
        _entry("PodTopologySpread", _PF, _F, _PS, _S, weight=2, plugin=PodTopologySpread()),
        _entry("InterPodAffinity", _PF, _F, _PS, _S, weight=2, plugin=InterPodAffinity()),
        _entry("DefaultPreemption", POST_FILTER),
        _entry("NodeResourcesBalancedAllocation", _PS, _S, weight=1, plugin=NodeResourcesBalancedAllocation()),
        _entry("ImageLocality", _S, weight=1, plugin=ImageLocality()),
        _entry("DefaultBinder", BIND),
        _entry("DynamicResources", PRE_ENQUEUE, _PF, _F, POST_FILTER, RESERVE, PRE_BIND, default=False),
    )
)
