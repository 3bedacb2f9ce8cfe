"""``scoretune transfer-reach``: the prior's reach bounds every first pick, figures by hand."""

from __future__ import annotations

import numpy as np
import pytest

from agent.actions import ActionCodec
from agent.compute import Compute
from agent.errors import AgentError
from agent.evaluation.reach import Group, measure_reach, summary
from agent.objectives.sim import scenario_objective
from agent.tuners.transfer import TransferPrior

CODEC = ActionCodec()
TASKS = ("gensmall-0", "gensmall-1", "gensmall-2")


def _prior() -> TransferPrior:
    rng = np.random.default_rng(3)
    actions = rng.uniform(-1, 1, (4, CODEC.dim)).astype(np.float32)
    actions[0] = CODEC.reference_action()
    relative = np.array([[1.0, 1.0], [0.7, 1.1], [1.2, 0.8], [0.9, 0.95]])
    facts = np.array([[0.1, 0.0, 2.0, 0.5], [0.3, 0.0, 1.0, 0.2]])
    return TransferPrior(actions, relative, ["train-a", "train-b"], {}, facts)


@pytest.fixture(scope="module")
def measured():
    prior = _prior()
    latency = {t: [scenario_objective(t, 0)(CODEC.decode(a)) for a in prior.actions] for t in TASKS}
    oracle = {f"{t}@0:500:mean": 0.5 * latency[t][0] for t in TASKS}  # a gap of half the reference
    groups = [Group("first", 0, TASKS[:2]), Group("second", 0, TASKS[2:])]
    frame = measure_reach({"p": prior}, groups, oracle, widths=(0.5,), compute=Compute(jobs=1))
    return prior, latency, frame


def test_each_row_is_the_gap_its_profile_closes(measured):
    prior, latency, frame = measured
    for t in TASKS:
        closed = [min(1.0, max(0.0, 2.0 * (1.0 - lat / latency[t][0]))) for lat in latency[t]]
        rows = frame[frame["task"] == t].set_index("row")["gap_closed"]
        assert rows["pool"] == pytest.approx(max(closed))
        ld = int(np.argmin(prior.relative.mean(axis=1)))  # candidate 1: 0.9 on average
        assert ld == 1 and rows["learned-default"] == pytest.approx(closed[ld])
        # a perfect task match: the better, on this task, of the training tasks' best candidates (1 and 2)
        assert rows["task match"] == pytest.approx(max(closed[1], closed[2]))


def test_the_reach_bounds_every_first_pick(measured):
    _, _, frame = measured
    for _, g in frame.groupby("task"):
        rows = g.set_index("row")["gap_closed"]
        assert (rows <= rows["pool"] + 1e-12).all()
        assert rows["hindsight 1"] <= rows["hindsight 2"] + 1e-12 <= rows["hindsight 3"] + 2e-12
    table, corr = summary(frame)
    means = table.set_index("row")
    for group in ("first", "second"):  # no fixed profile beats the one chosen knowing the group
        assert means.loc["hindsight 1", group] >= means.loc["learned-default", group] - 1e-9
    assert list(corr["judged on"]) == ["second"] and corr["variants"].iloc[0] == 3


def test_a_task_without_an_oracle_is_one_line():
    with pytest.raises(AgentError, match=r"no oracle for gensmall-0@0.*--oracle-only"):
        measure_reach({"p": _prior()}, [Group("g", 0, ("gensmall-0",))], {}, compute=Compute(jobs=1))
    for bad in ("g=gensmall-0", "g@x=gensmall-0", "g@0=", "@0=a"):
        with pytest.raises(AgentError, match="NAME@SEED"):
            Group.parse(bad)


def test_an_oracle_cache_that_is_not_there_is_one_line(tmp_path):
    from agent.evaluation.reach import load_oracles

    with pytest.raises(AgentError, match=r"none.json: no oracle cache here"):
        load_oracles([tmp_path / "none.json"])
    (tmp_path / "oracle.json").write_text('{"gensmall-0@0:500:mean": 0.5, "gensmall-1@0:500:mean": 0.25}')
    assert load_oracles([tmp_path / "oracle.json"]) == {"gensmall-0@0:500:mean": 0.5, "gensmall-1@0:500:mean": 0.25}


def test_the_committed_report_is_its_csv_summarised():
    """docs/results/reach/summary.md holds the tables :func:`summary` makes of the committed reach.csv."""
    from pathlib import Path

    import pandas as pd

    from agent.formatting import md_table

    here = Path(__file__).resolve().parents[2] / "docs" / "results" / "reach"
    frame = pd.read_csv(here / "reach.csv", keep_default_na=False, dtype={"gap_closed": float})
    table, corr = summary(frame)
    text = (here / "summary.md").read_text()
    assert md_table(list(table.columns), table.itertuples(index=False), "{:.0f}") in text
    assert md_table(list(corr.columns), corr.itertuples(index=False), "{:.2f}") in text
    assert corr["rank correlation"].between(-1, 1).all() and len(table) == 25
