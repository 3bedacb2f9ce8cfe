"""Every committed evaluation under docs/results is reproduced by ``combine`` from its raw results.

``evaluation.json`` says how each table was made: from its own ``results.csv``, or combined from
several directories with a selection of methods. Rescoring the same inputs with today's code must
give the committed ``table.md``, ``budget.md``, ``table.csv`` and ``budget.csv`` byte for byte: a
change to the protocol's arithmetic that moves a published figure fails here, naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agent.evaluation.tables
from agent.evaluation.study import combine

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"
EVALUATIONS = sorted(p.parent for p in RESULTS.rglob("results.csv")
                     if p.parent.name != "lab" and (p.parent / "evaluation.json").exists())
STALE = {
    "validation/noisy": "scored before the noisy gap became a ratio of means (0711ddf); the code of that commit "
                        "gives today's figures, kept as the record of that validation run",
}
"""Committed tables written by an earlier definition, with why they are kept as they are."""


def _name(d: Path) -> str:
    return str(d.relative_to(RESULTS)) or "."


@pytest.mark.parametrize("directory", EVALUATIONS, ids=_name)
def test_combine_reproduces_the_committed_tables(directory, tmp_path, monkeypatch):
    monkeypatch.setattr(agent.evaluation.tables, "plot_curves", lambda frame, out: [])  # pictures are not compared
    meta = json.loads((directory / "evaluation.json").read_text())
    sources = [REPO / d for d in meta.get("combined", [])] or [directory]
    combine(sources, tmp_path, meta["methods"] if meta.get("combined") else None,
            steps=meta["steps"] if meta.get("protocol") == "noisy" else None, scenarios=meta.get("scenario_patterns"))
    tables = [n for n in ("table.md", "budget.md", "table.csv", "budget.csv") if (directory / n).exists()]
    differ = [n for n in tables if (directory / n).read_text() != (tmp_path / n).read_text()]
    if _name(directory) in STALE:
        assert differ, f"{directory} is reproduced now: remove it from STALE"
        return
    assert tables and not differ, f"{directory}: {differ} differ from a rescoring of its raw results"


def test_every_committed_evaluation_is_checked():
    assert len(EVALUATIONS) >= 20 and all(RESULTS / k in EVALUATIONS for k in STALE)
