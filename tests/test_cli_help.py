"""Every command's ``--help``: flags read as flags, and the text fits an 80-column terminal."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from agent.cli import app

runner = CliRunner()


def _leaves(group, path=()):
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name)


def test_every_help_shows_flags_as_flags_within_80_columns():
    root = typer.main.get_command(app)
    leaves = list(_leaves(root))
    assert ("traces", "fetch") in leaves and ("tune",) in leaves and len(leaves) > 30
    for argv in leaves:
        r = runner.invoke(app, [*argv, "--help"], terminal_width=80)
        assert r.exit_code == 0, (argv, r.output)
        assert "<bool>" not in r.output, argv  # a flag takes no value
        wide = [line for line in r.output.splitlines() if len(line) > 80]
        assert not wide, (argv, wide)
