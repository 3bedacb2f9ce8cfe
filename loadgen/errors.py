"""Errors of the workload side: trace readers, generators, replay."""

from functions.errors import InputError, ScoretuneError


class LoadgenError(ScoretuneError):
    """A workload or replay failure that is not a malformed input."""


class TraceError(InputError):
    """A trace file that cannot be turned into a workload; names the file, row and column."""


__all__ = ["InputError", "LoadgenError", "ScoretuneError", "TraceError"]
