"""``workload synth`` refuses bad options with one line naming the option, before it allocates."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen import synth
from loadgen.errors import InputError
from loadgen.traces import MAX_REQUESTS

runner = CliRunner()

F = "float-ops"

# (id, arguments after `workload synth`, the option the message names, words it contains)
BAD = [
    ("unknown_kind", ["foo", "--functions", F], "kind", "known: ['diurnal', 'mmpp', 'poisson', 'steps']"),
    ("unknown_function", ["poisson", "--functions", "flot-ops"], "--functions", "unknown suite function"),
    ("empty_name", ["poisson", "--functions", "=3"], "--functions", "NAME=SHARE"),
    ("duplicate_shares", ["poisson", "--functions", f"{F}=1,{F}=2"], "--functions", "given twice"),
    ("duplicate_names", ["poisson", "--functions", f"{F},{F}"], "--functions", "given twice"),
    ("negative_share", ["poisson", "--functions", f"{F}=-1"], "--functions", "must be > 0, got -1.0"),
    ("rate_zero", ["poisson", "--functions", F, "--rate", "0"], "--rate", "> 0"),
    ("rate_negative", ["poisson", "--functions", F, "--rate", "-3"], "--rate", "> 0"),
    ("rate_nan", ["poisson", "--functions", F, "--rate", "nan"], "--rate", "finite"),
    ("diurnal_rate_zero", ["diurnal", "--functions", F, "--rate", "0"], "--rate", "> 0"),
    ("rate_absurd", ["poisson", "--functions", F, "--rate", "1e12"], "--rate x --duration", "lower the rate"),
    ("duration_absurd", ["poisson", "--functions", F, "--duration", "1e15"], "--rate x --duration", "lower the rate or the duration"),
    ("diurnal_absurd", ["diurnal", "--functions", F, "--rate", "1e9"], "--rate x --duration", "over the"),
    ("mmpp_absurd", ["mmpp", "--functions", F, "--rates", "1e12,1"], "--rates x --duration", "lower the highest rate"),
    ("steps_absurd", ["steps", "--functions", F, "--rates", "1e9,1e9", "--step-s", "1e6"], "--rates x --step-s", "lower"),
    ("mmpp_tiny_dwell", ["mmpp", "--functions", F, "--dwell", "1e-9,1e-9"], "--dwell", "state changes"),
    ("mmpp_lengths_differ", ["mmpp", "--functions", F, "--rates", "1,2,3", "--dwell", "1,2"], "--dwell", "3 rates and 2 dwell"),
    ("mmpp_all_zero", ["mmpp", "--functions", F, "--rates", "0,0"], "--rates", "every rate is 0"),
    ("rates_empty", ["steps", "--functions", F, "--rates", ",,"], "--rates", "comma-separated numbers"),
    ("steps_lengths_differ", ["steps", "--functions", F, "--rates", "1,2,3", "--step-s", "1,2"], "--step-s", "3 rates but 2"),
    ("steps_negative_rate", ["steps", "--functions", F, "--rates", "1,-2"], "--rates", ">= 0"),
    ("amplitude_negative", ["diurnal", "--functions", F, "--amplitude", "-0.1"], "--amplitude", "[0, 1]"),
    ("amplitude_big", ["diurnal", "--functions", F, "--amplitude", "1.5"], "--amplitude", "[0, 1]"),
    ("period_zero", ["diurnal", "--functions", F, "--period", "0"], "--period", "> 0"),
]


@pytest.mark.parametrize("args,option,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_options_are_one_line_naming_the_option(tmp_path, args, option, words) -> None:
    out = tmp_path / "w.parquet"
    r = runner.invoke(app, ["workload", "synth", *args, "-o", str(out)])
    assert r.exit_code == 1, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: field {option}: ") and words in lines[0], r.output
    assert list(tmp_path.iterdir()) == []


def test_a_rate_too_small_for_any_arrival_writes_nothing(tmp_path) -> None:
    out = tmp_path / "w.parquet"
    r = runner.invoke(app, ["workload", "synth", "poisson", "--functions", F, "--rate", "1e-6", "--duration", "1",
                            "-o", str(out)])
    assert r.exit_code == 1 and "no requests" in r.output and str(out) in r.output
    assert list(tmp_path.iterdir()) == []


def test_out_naming_a_directory_is_refused_before_generating(tmp_path) -> None:
    r = runner.invoke(app, ["workload", "synth", "poisson", "--functions", F, "-o", str(tmp_path)])
    assert r.exit_code == 1 and f"Error: {tmp_path}: is a directory" in r.output
    assert list(tmp_path.iterdir()) == []


def test_negative_seed_is_a_usage_error(tmp_path) -> None:
    r = runner.invoke(app, ["workload", "synth", "poisson", "--functions", F, "--seed", "-1", "-o", str(tmp_path / "w")])
    assert r.exit_code == 2 and "--seed" in r.output and "unexpected" not in r.output


def test_generators_check_the_budget_before_drawing(monkeypatch) -> None:
    """The size guard runs before any random draw: the generator is never reached."""
    def never(*a, **k):
        raise AssertionError("drew arrivals for an absurd schedule")

    monkeypatch.setattr(synth, "piecewise_poisson", never)
    calls = [
        lambda: synth.poisson(MAX_REQUESTS, 2.0, ["a"]),
        lambda: synth.diurnal(MAX_REQUESTS / 2, 2.0, ["a"], amplitude=0.5),
        lambda: synth.mmpp([MAX_REQUESTS, 0.0], [1.0, 1.0], 2.0, ["a"]),
        lambda: synth.steps([MAX_REQUESTS, MAX_REQUESTS], 1.0, ["a"]),
        lambda: synth.mmpp([1.0, 2.0], [1e-7, 1e-7], 1.0, ["a"]),
    ]
    for call in calls:
        with pytest.raises(InputError, match="limit"):
            call()


def test_mmpp_and_steps_may_have_idle_states() -> None:
    on_off = synth.mmpp([0.0, 50.0], [1.0, 1.0], 20.0, ["a"], seed=1)
    assert len(on_off) > 0
    assert len(synth.steps([0.0, 20.0], 5.0, ["a"], seed=1)) > 0
