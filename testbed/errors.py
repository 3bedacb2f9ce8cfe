"""Errors of the cluster side: scheduler, cluster specs, backends."""

from functions.errors import InputError, ScoretuneError


class TestbedError(ScoretuneError):
    """A testbed failure that is not a malformed input (a backend that cannot start, a dead lab)."""

    __test__ = False  # not a pytest class, despite the name


class ConfigError(InputError):
    """An invalid KubeSchedulerConfiguration or profile; names the file and the field path."""


class ClusterSpecError(InputError):
    """An invalid or impossible cluster spec."""


__all__ = ["ClusterSpecError", "ConfigError", "InputError", "ScoretuneError", "TestbedError"]
