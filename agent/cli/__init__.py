"""The ``scoretune`` command line (agent.cli.app assembles every package's commands)."""

from agent.cli.app import app, main

__all__ = ["app", "main"]
