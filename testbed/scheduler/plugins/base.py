"""The score-plugin interface, after kube-scheduler's framework (``staging/src/k8s.io/kube-scheduler/
framework/interface.go``: ``PreScorePlugin``, ``ScorePlugin``, ``ScoreExtensions``).

A plugin is one object with

- a ``name`` (upstream's, as configurations spell it) and an ``upstream`` file it ports;
- an argument type (``args_type``, a frozen dataclass whose defaults are upstream's
  ``pkg/scheduler/apis/config/v1/defaults.go``) with ``validate_args`` (the rules of
  ``validation_pluginargs.go``, as field-error lines), ``decode_args`` and ``encode_args``
  (the ``pluginConfig[].args`` mapping in and out);
- ``prepare``: what depends on the pod template and the nodes only (cached per template, so a
  profile switch does not recompute it);
- ``pre_score``: the state of one (template, profile), or None when upstream's PreScore returns
  Skip;
- ``score``: Score plus NormalizeScore over the candidate nodes ``idx``, returning int64 scores in
  0..100 (or None when the state finds nothing to score, a Skip known only at scoring time).

The default weights and the extension points are data of the registry
(:mod:`testbed.scheduler.plugins.registry`), not of the plugins. A plugin reads the cluster
through the :class:`Cluster` view the framework passes it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from testbed.scheduler.objects import Node, Pod
from testbed.scheduler.selectors import LabelSelector


class Template(Protocol):
    """What a plugin may read of one pod template (pods with the same ``Pod.signature``)."""

    id: int
    pod: Pod
    #: requests per framework resource row (actual; ``nonzero`` has cpu/memory's non-zero defaults)
    req: np.ndarray
    nonzero: np.ndarray
    #: Filter masks the framework computed: taints (NoSchedule/NoExecute) tolerated, node
    #: affinity/selector matched (read by PodTopologySpread's node inclusion policies)
    taint_ok: np.ndarray
    affinity_ok: np.ndarray
    #: per-plugin data of :meth:`ScorePlugin.prepare`, by plugin name
    data: dict[str, Any]


class Cluster(Protocol):
    """The framework's node arrays, as the plugins read them (never write them)."""

    n: int
    nodes: Sequence[Node]
    #: (major, minor) of the Kubernetes release whose formulas apply
    kube_release: tuple[int, int]
    #: resource rows: cpu, memory, then every other resource some node has, by name
    res_names: Sequence[str]
    res_index: Mapping[str, int]
    alloc: np.ndarray  # (R, N) allocatable
    req_actual: np.ndarray  # (R, N) actual requests of the bound pods
    req_nonzero: np.ndarray  # (R, N) the same with cpu/memory's non-zero defaults
    has_labels: np.ndarray  # (N,) the node has any label
    #: number of nodes holding each image (normalised name)
    image_nodes: Mapping[str, int]
    #: every template met so far, by id; ``template_counts[id]`` its bound pods per node
    templates: Sequence[Template]
    template_counts: np.ndarray
    #: ``selector_counts[sid]``: bound pods per node matching counter ``sid`` (see :meth:`counter`)
    selector_counts: np.ndarray

    def label_col(self, key: str) -> tuple[np.ndarray, np.ndarray, int, bool]:
        """(has label, domain id of the value, number of ids, every value unique) over the nodes."""
        ...

    def counter(self, namespaces: tuple[str, ...], namespace_selector: LabelSelector | None, selector: LabelSelector | None) -> int:
        """The row of :attr:`selector_counts` counting bound pods in ``namespaces`` (or whose
        namespace ``namespace_selector`` matches) that ``selector`` matches, kept incrementally."""
        ...

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` once per profile (dropped when the profile changes)."""
        ...


class ScorePlugin(abc.ABC):
    """Base class of the score plugins; see the module docstring for the contract. A plugin
    must say how it pre-scores and scores; the rest has defaults."""

    name: ClassVar[str]
    upstream: ClassVar[str]
    args_type: ClassVar[type | None] = None
    #: ``prepare`` reads the nodes' images: the framework drops it when a node's images change
    reads_node_images: ClassVar[bool] = False

    def default_args(self) -> Any:
        return None if self.args_type is None else self.args_type()

    def validate_args(self, raw: Mapping[str, Any], path: str) -> list[str]:
        """Field-error lines for ``raw`` (a mapping), empty when it is valid."""
        return []

    def decode_args(self, raw: Mapping[str, Any], path: str) -> Any:
        """The typed args of a validated ``raw`` mapping, upstream defaults applied."""
        return self.default_args()

    def encode_args(self, args: Any) -> dict[str, Any] | None:
        """The ``pluginConfig`` args mapping of ``args``; None when nothing needs writing."""
        return None

    def prepare(self, c: Cluster, t: Template) -> Any:
        return None

    @abc.abstractmethod
    def pre_score(self, c: Cluster, t: Template, prepared: Any, args: Any) -> Any:
        """Per template and profile: the state ``score`` needs, or None for upstream's Skip."""

    @abc.abstractmethod
    def score(self, c: Cluster, state: Any, idx: np.ndarray) -> np.ndarray | None:
        """Score plus NormalizeScore: int64 0..100 per candidate node ``idx``, or None for a Skip
        known only at scoring time."""
