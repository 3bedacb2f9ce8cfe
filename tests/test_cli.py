"""The CLI root: every group is reachable and a ScoretuneError becomes one line and exit 1."""

from __future__ import annotations

from typer.testing import CliRunner

from agent.cli import app

runner = CliRunner()


def test_every_group_has_help() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for group in ("scheduler", "functions", "workload", "replay", "sim", "testbed", "train", "evaluate", "tune", "bench"):
        assert group in result.output


def test_scoretune_error_is_one_line_and_exit_1(tmp_path) -> None:
    missing = tmp_path / "missing.parquet"
    result = runner.invoke(app, ["workload", "show", str(missing)])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [f"Error: {missing}: no such workload file"]
