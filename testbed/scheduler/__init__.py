"""A kube-scheduler-compatible scheduler: filters, the seven default score plugins with upstream
normalisation, weights with upstream semantics, and KubeSchedulerConfiguration in and out.

- :mod:`testbed.scheduler.objects`: Nodes and Pods from real Kubernetes objects.
- :mod:`testbed.scheduler.config`: profiles, weights, KubeSchedulerConfiguration read/validate/write.
- :mod:`testbed.scheduler.scoring`: the score formulas as pure array functions.
- :mod:`testbed.scheduler.framework`: the scheduling cycle over incrementally updated node arrays.
"""

from testbed.scheduler.config import (
    DEFAULT_SCORE_WEIGHTS,
    SCORE_PLUGINS,
    Profile,
    SchedulerConfig,
    config_for_profile,
    config_to_dict,
    default_profile,
    dump_config_yaml,
    load_config,
    parse_config,
    parse_weights,
    profile_from_weights,
    profile_record,
    profile_weights,
    validate_config_dict,
)
from testbed.scheduler.framework import Scheduler, ScoreResult
from testbed.scheduler.objects import Node, Pod, load_objects, node_from_k8s, pod_from_k8s

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
