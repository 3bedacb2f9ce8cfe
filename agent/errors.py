"""The agent package's exceptions, rooted in :class:`ScoretuneError` so the CLI prints one line."""

from __future__ import annotations

from functions.errors import InputError, ScoretuneError


class AgentError(ScoretuneError):
    """A tuning, training or evaluation request that cannot be carried out as asked."""


class ExperimentLogError(InputError):
    """An experiment directory (log, config) that cannot be resumed: names the file and the field."""


__all__ = ["AgentError", "ExperimentLogError", "InputError", "ScoretuneError"]
