"""Bad input to the noisy protocol's and the noise calibration's options: one line, non-zero exit,
nothing run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agent.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["evaluate", "--protocol", "noisy", "--noise", "{tmp}/none.yaml", "--scenarios", "lab-web"],
     "no such noise calibration file"),
    (["evaluate", "--protocol", "noisy", "--noise", "{tmp}/bad.yaml", "--scenarios", "lab-web"], "not YAML"),
    (["evaluate", "--protocol", "noisy", "--sim-seed", "0", "--scenarios", "lab-web"], "--sim-seed"),
    (["evaluate", "--protocol", "noisy", "--budgets", "0,10", "--scenarios", "lab-web"], "--budgets"),
    (["evaluate", "--protocol", "noisy", "--budgets", "x", "--scenarios", "lab-web"], "--budgets"),
    (["evaluate", "--protocol", "noisy", "--methods", "gp+twice", "--policy", "none", "--scenarios", "lab-web"],
     "reeval"),
    (["evaluate", "--protocol", "noisy", "--oracle-only", "--scenarios", "lab-web"], "--oracle-only"),
    (["calibrate", "--noise", "--durations", "10,abc"], "field --durations"),
    (["calibrate", "--noise", "--durations", "10,10"], "twice"),
    (["calibrate", "--noise", "--rates", "-3"], "field --rates"),
    (["calibrate", "--refit", "{tmp}/bad.yaml"], "add --noise"),
    (["calibrate", "--noise", "--refit", "{tmp}/bad.yaml"], "not YAML"),
    (["lab-table", "--methods", "gpp"], "not a baseline"),
    (["lab-table", "--methods", "gp", "--shipped", "policy"], "--shipped"),
])
def test_bad_options_are_one_line(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("metrics: [unclosed")
    r = runner.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert r.exit_code != 0
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.output, r.output
