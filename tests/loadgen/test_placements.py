"""One pod record for every backend (loadgen.results.PodTimes): the placements table has one shape,
whichever backend wrote it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.results import PLACEMENTS_SCHEMA, PodTimes, placements_table


def test_records_and_rows_make_the_same_typed_table():
    cold = PodTimes(pod="p-1", function="aes", node="n1", created_s=0.5, scheduled_s=0.6, ready_s=1.9,
                    image_pull_s=1.0, start_s=0.2, init_s=0.1)
    pending = PodTimes(pod="p-2", function="aes", node=None, created_s=2.0)
    from_records = placements_table([cold, pending])
    from_rows = placements_table([cold.to_row(), {**pending.to_row(), "failure": "unschedulable"}])
    assert list(from_records.columns) == PLACEMENTS_SCHEMA.names
    assert from_records.equals(from_rows)  # what the lab sends over JSON reads back the same
    for col in ("created_s", "scheduled_s", "ready_s", "deleted_s", "image_pull_s", "start_s", "init_s"):
        assert from_records[col].dtype == np.float64, col
    assert math.isnan(from_records.loc[1, "scheduled_s"]) and pd.isna(from_records.loc[1, "node"])
    assert from_records.loc[0, "image_pull_s"] == 1.0


def test_no_pod_is_the_empty_table():
    table = placements_table([])
    assert table.empty and list(table.columns) == PLACEMENTS_SCHEMA.names
