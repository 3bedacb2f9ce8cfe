"""The README's one results table quotes the committed results: every figure stands in the table.md
(or, for intervals over tasks, the compare.md) of the source its row names (no hand-typed number
drifts from the files `scoretune` wrote)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _results_rows() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("| setting |"):]
    section = section[:section.index("\n\n")]
    rows = section.splitlines()[2:]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_every_readme_result_is_in_its_source_table():
    rows = _results_rows()
    assert 3 <= len(rows) <= 5, "one short table"
    for setting, twin, policy, gp, source in rows:
        path = REPO / source.strip("`")
        # the evaluation's table, and (simulator rows: intervals over tasks) its `twin compare` output
        table = "\n".join(p.read_text() for p in ([path / "table.md", path / "compare.md"] if path.is_dir() else [path])
                          if p.exists())
        assert twin != "—" and gp != "—", f"{setting}: every row compares the shipped tuner with GP-BO"
        for figure in (twin, policy, gp):
            if figure == "—":  # not measured in that setting (the row says so); never a number left out
                assert "not measured" in setting or "not run" in setting, setting
                continue
            number = figure.replace(" %", "")
            assert any(re.search(re.escape(f) + r"(?!\d)", table) for f in (number, figure)), \
                f"{setting}: {figure} is not in {source}"
