"""The CLI's last line of defence: whatever escapes a command is one line and a non-zero exit."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agent.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("raised", "code", "line"), [
    (RuntimeError("boom"), 2, "Error: unexpected RuntimeError: boom (a scoretune bug"),
    (PermissionError(13, "Permission denied", "/x/registry.yaml"), 1, "Error: /x/registry.yaml: Permission denied"),
])
def test_an_unexpected_exception_is_one_line_not_a_traceback(monkeypatch, raised, code, line):
    import loadgen.traces_cli

    def fail(*_a, **_k):
        raise raised

    monkeypatch.setattr(loadgen.traces_cli, "load_registry", fail)
    r = runner.invoke(app, ["traces", "list"])
    assert r.exit_code == code
    assert r.output.strip().splitlines() == [r.output.strip().splitlines()[0]]
    assert r.output.startswith(line) and "Traceback" not in r.output
