"""The CLI root: every group is reachable, options are typed and consistent, and a ScoretuneError
becomes one line and exit 1."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from agent.cli import app
from agent.loop.backends import BACKENDS
from agent.metrics import METRICS
from agent.tuners.factory import METHODS

runner = CliRunner()
ROOT = typer.main.get_command(app)


def _leaves(group=ROOT, path=()):
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def _command(*path: str):
    cmd = ROOT
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _option(cmd, flag: str):
    (param,) = [p for p in cmd.params if flag in p.opts]
    return param


def test_every_group_is_a_registered_command_and_listed_in_help() -> None:
    expected = {"scheduler", "functions", "workload", "replay", "sim", "testbed", "train", "evaluate", "tune", "bench",
                "kube", "traces", "combine", "fidelity", "calibrate"}
    assert expected <= set(ROOT.commands)
    result = runner.invoke(app, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    # each name as the first word of a line of the command list, not anywhere in the text
    listed = {line.split()[0] for line in result.output.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert expected <= listed


def test_help_lists_the_choices_from_one_list() -> None:
    for path, flag, values in [
        (("tune",), "--backend", BACKENDS),
        (("tune",), "--metric", METRICS),
        (("evaluate",), "--metric", METRICS),
        (("train",), "--metric", METRICS),
        (("train",), "--algo", ("ppo", "sac", "recurrent-ppo")),
        (("train",), "--action", ("box", "lattice")),
    ]:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert f"{flag} <{'|'.join(values)}>" in result.output, (path, flag)  # --help lists the choices
    # --method has too many choices for its metavar: its help line lists them, from the same list
    result = runner.invoke(app, ["tune", "--help"], terminal_width=200)
    text = re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(result.output.split()))  # rich wraps at a hyphen
    assert "--method METHOD" in result.output and ", ".join(METHODS) in text


def test_an_unknown_choice_is_a_usage_error_naming_the_option() -> None:
    result = runner.invoke(app, ["tune", "--backend", "nope", "--method", "tpe", "--out", "x"])
    assert result.exit_code == 2
    assert "--backend" in result.output and "nope" in result.output


def test_every_out_option_also_takes_dash_o() -> None:
    with_out = [path for path, cmd in _leaves() if any("--out" in p.opts for p in cmd.params)]
    assert ("tune",) in with_out and ("evaluate",) in with_out and ("replay",) in with_out and len(with_out) >= 10
    for path in with_out:
        assert "-o" in _option(_command(*path), "--out").opts, path


def test_evaluate_does_not_write_into_the_committed_results_by_default() -> None:
    default = _option(_command("evaluate"), "--out").default
    assert "docs" not in str(default).split("/")


def test_scoretune_error_is_one_line_and_exit_1(tmp_path) -> None:
    missing = tmp_path / "missing.parquet"
    result = runner.invoke(app, ["workload", "show", str(missing)])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [f"Error: {missing}: no such workload file"]


def test_a_functions_error_goes_through_the_root_handler() -> None:
    """The functions group has no handler of its own: the root group's one line, exit 1."""
    result = runner.invoke(app, ["functions", "manifest", "no-such-function"])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: unknown function(s) no-such-function")
