"""``scoretune headroom``: the default weights' latency, the oracle's, and the gap between them per
task, with each cluster's heterogeneity, written as a CSV with an explicit schema and a summary."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from agent.actions import ActionCodec
from agent.cli import app
from agent.evaluation.headroom import LAB_PREFIX, _objective, measure_headroom, summary


def test_headroom_is_the_oracles_gain_over_the_default_weights():
    frame = measure_headroom({"a": ["speed-cpu"], "lab": [f"{LAB_PREFIX}lab-small"]}, runs=12)
    assert list(frame["task"]) == ["speed-cpu", "lab:lab-small"]
    for row in frame.itertuples():
        default = _objective(row.task, "mean")(ActionCodec().reference())
        assert row.default_s == default  # the reference run is the default weights
        assert 0 <= row.oracle_s <= row.default_s
        assert abs(row.headroom_pct - 100 * (row.default_s - row.oracle_s) / row.default_s) < 1e-9
    assert frame.loc[0, "speed_ratio"] == 2.5 and frame.loc[0, "nodes"] == 16  # mixed-speed-16's groups
    table = summary(frame)
    assert list(table["group"]) == ["a", "lab"] and list(table["tasks"]) == [1, 1]


@pytest.mark.slow
def test_the_command_writes_the_csv_and_the_summary(tmp_path, use_fixture_traces):
    # the training split's trace scenarios read the fixture traces (a clone has no real ones)
    out = tmp_path / "hr"
    result = CliRunner().invoke(app, ["headroom", "--runs", "10", "--generated", "0", "--validation", "0",
                                      "--jobs", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out / "headroom.csv")
    assert set(frame["group"]) == {"train split", "held-out split", "gensmall (held-out members)", "lab clusters (sim)"}
    assert (frame["headroom_pct"] >= 0).all()
    assert "Command: `scoretune headroom" in (out / "summary.md").read_text()
    file = tmp_path / "f"
    file.write_text("x")
    bad = CliRunner().invoke(app, ["headroom", "--out", str(file)])
    assert bad.exit_code != 0 and "not a directory" in bad.output
