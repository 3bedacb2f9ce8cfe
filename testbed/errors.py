"""Errors of the cluster side: scheduler, cluster specs, backends."""

from functions.errors import InputError, ScoretuneError


class TestbedError(ScoretuneError):
    """A testbed failure that is not a malformed input (a backend that cannot start, a dead lab)."""

    __test__ = False  # not a pytest class, despite the name


class LabFault(TestbedError):
    """The lab could not be brought to the state a run must start from (a node's image cache, a
    node's health, a scheduler rollout, the load generators): not the profile's doing and often
    passing, so the tuning loop voids the step and retries it (bounded) instead of ending the
    experiment on it."""


class ConfigError(InputError):
    """An invalid KubeSchedulerConfiguration or profile; names the file and the field path."""


class ClusterSpecError(InputError):
    """An invalid or impossible cluster spec."""


class InfeasibleClusterError(ClusterSpecError):
    """A function's pod fits on no node of the cluster, even an empty one (every node too small
    for its requests, tainted, unschedulable or not matching its selector). Deterministic: the
    same cluster, functions and scheduler filters fail the same way on every run and seed, so a
    caller must not retry it (the tuning loop stops on it rather than voiding the trial)."""


__all__ = ["ClusterSpecError", "ConfigError", "InfeasibleClusterError", "InputError", "LabFault", "ScoretuneError",
           "TestbedError"]
