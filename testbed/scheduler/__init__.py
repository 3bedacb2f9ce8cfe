"""A kube-scheduler-compatible scheduler: filters, the seven default score plugins with upstream
normalisation, weights with upstream semantics, and KubeSchedulerConfiguration in and out.

- :mod:`testbed.scheduler.objects`: Nodes and Pods from real Kubernetes objects.
- :mod:`testbed.scheduler.config`: profiles, weights, KubeSchedulerConfiguration read/validate/write.
- :mod:`testbed.scheduler.plugins`: one module per default score plugin, the plugin interface and
  the registry (default weights, extension points).
- :mod:`testbed.scheduler.kernels`: the compiled score formulas (the hot path).
- :mod:`testbed.scheduler.reference`: the same formulas in readable numpy, the kernels' test oracle.
- :mod:`testbed.scheduler.framework`: the scheduling cycle over incrementally updated node arrays.

Names are resolved on first use (PEP 562), so importing a light submodule such as
:mod:`testbed.scheduler.selectors` (the cluster spec does, for ``Taint``) does not load numba
and the kernels.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    **dict.fromkeys(
        (
            "DEFAULT_SCORE_WEIGHTS",
            "SCORE_PLUGINS",
            "Profile",
            "SchedulerConfig",
            "config_for_profile",
            "config_to_dict",
            "default_profile",
            "dump_config_yaml",
            "load_config",
            "parse_config",
            "parse_weights",
            "profile_from_weights",
            "profile_record",
            "profile_weights",
            "validate_config_dict",
        ),
        "config",
    ),
    "Scheduler": "framework",
    "ScoreResult": "framework",
    **dict.fromkeys(("Node", "Pod", "load_objects", "node_from_k8s", "pod_from_k8s"), "objects"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "DEFAULT_SCORE_WEIGHTS",
    "SCORE_PLUGINS",
    "Node",
    "Pod",
    "Profile",
    "SchedulerConfig",
    "Scheduler",
    "ScoreResult",
    "config_for_profile",
    "config_to_dict",
    "default_profile",
    "dump_config_yaml",
    "load_config",
    "load_objects",
    "node_from_k8s",
    "parse_config",
    "parse_weights",
    "pod_from_k8s",
    "profile_from_weights",
    "profile_record",
    "profile_weights",
    "validate_config_dict",
]
