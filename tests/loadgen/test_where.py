"""Where the time went (loadgen/where.py): the per-node breakdown every run's summary carries."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen.results import read_run, write_run
from loadgen.where import current_where, where_table_lines, where_time_went


def _requests() -> pd.DataFrame:
    rows = [  # function, node, status, latency, cold
        ("a", "n1", "ok", 1.0, True),
        ("a", "n1", "ok", 0.2, False),
        ("a", "n1", "ok", 0.4, False),
        ("b", "n2", "ok", 0.3, False),
        ("b", "n2", "error", 0.1, False),
        ("b", None, "timeout", 30.0, None),
    ]
    return pd.DataFrame({
        "request_id": np.arange(len(rows), dtype=np.int64),
        "function": [r[0] for r in rows],
        "scheduled_s": np.zeros(len(rows)), "sent_s": np.zeros(len(rows)),
        "finished_s": [r[3] for r in rows], "latency_s": [r[3] for r in rows],
        "status": [r[2] for r in rows],
        "http_status": pd.array([200, 200, 200, 200, 500, None], dtype="Int32"),
        "node": [r[1] for r in rows],
        "cold_start": pd.array([r[4] for r in rows], dtype="boolean"),
    })


def _placements() -> pd.DataFrame:
    return pd.DataFrame({"pod": ["p1", "p2", "p3"], "function": ["a", "b", "b"], "node": ["n1", "n2", "n2"],
                         "created_s": [0.0, 0.0, 0.0], "scheduled_s": [0.0, 0.0, 0.0], "ready_s": [1.0, 1.0, 1.0],
                         "deleted_s": [np.nan] * 3, "image_pull_s": [2.0, 0.0, np.nan],
                         "start_s": [0.1] * 3, "init_s": [0.1] * 3})


def test_per_node_figures_by_hand() -> None:
    w = where_time_went(_requests(), _placements())
    n1, n2 = w["nodes"]["n1"], w["nodes"]["n2"]
    assert (n1["requests"], n1["ok"], n1["failures"], n1["cold_starts"]) == (3, 3, 0, 1)
    assert n1["mean_s"] == pytest.approx(0.5333333)
    assert n1["warm_mean_s"] == pytest.approx(0.3) and n1["warm_ok"] == 2
    assert (n1["pods"], n1["pulls"], n1["pull_s"]) == (1, 1, 2.0)
    assert (n2["requests"], n2["ok"], n2["failures"]) == (2, 1, 1)
    assert n2["mean_s"] == pytest.approx(0.3)  # latency over ok requests only
    assert (n2["pods"], n2["pulls"], n2["pull_s"]) == (2, 0, None)  # a zero pull is a cached image
    assert w["functions"]["a"]["n1"]["requests"] == 3 and set(w["functions"]["b"]) == {"n2"}


def test_every_request_is_counted_once() -> None:
    """Conservation: the nodes' requests plus the unserved ones are the run's requests."""
    req = _requests()
    w = where_time_went(req, _placements())
    assert sum(c["requests"] for c in w["nodes"].values()) + w["unserved"] == len(req)
    assert sum(c["requests"] for per in w["functions"].values() for c in per.values()) == len(req) - w["unserved"]


def test_the_summary_carries_it_and_the_table_fits_80_columns(tmp_path) -> None:
    run = write_run(tmp_path / "run", _requests(), _placements())
    assert read_run(tmp_path / "run").summary["where"] == run.summary["where"]
    lines = where_table_lines(run.summary["where"])
    assert len(lines) == 4 and lines[-1].startswith("1 request(s) reached no node")
    assert max(len(line) for line in lines) <= 80


def test_a_backends_own_summary_passed_as_info_does_not_hide_the_pulls(tmp_path) -> None:
    """The embedded lab and the kube backend hand write_run their load generator's summary as
    ``info``; its ``where`` was computed without placements (no pods, no pulls). The bug this names:
    that stale section replaced the run's, so the twin never saw a pull on a lab run."""
    stale = where_time_went(_requests())  # what Locust's replay knows: requests, no placements
    assert stale["nodes"]["n1"]["pulls"] == 0
    run = write_run(tmp_path / "run", _requests(), _placements(), info={"backend": "local", "where": stale})
    n1 = read_run(tmp_path / "run").summary["where"]["nodes"]["n1"]
    assert (n1["pods"], n1["pulls"], n1["pull_s"]) == (1, 1, 2.0)
    assert run.summary["backend"] == "local"  # the rest of info is kept


def test_a_section_of_an_older_version_is_not_current(tmp_path) -> None:
    run = write_run(tmp_path / "run", _requests(), _placements())
    assert current_where(run.summary) == run.summary["where"]
    assert current_where({**run.summary, "where": {**run.summary["where"], "version": 1}}) is None
    assert current_where({"count": 6}) is None
