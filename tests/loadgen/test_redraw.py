"""A run's seed on a live backend (loadgen.workload.redraw_arrivals) and cold/warm latency apart
(loadgen.results.by_start)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen.results import by_start
from loadgen.synth import poisson
from loadgen.workload import redraw_arrivals


def _wl():
    return poisson(6.0, 30.0, {"float-ops": 0.5, "aes": 0.5}, seed=0)


def test_a_seed_redraws_arrivals_within_their_interval_and_keeps_every_count():
    wl = _wl()
    a, b, a2 = redraw_arrivals(wl, 1), redraw_arrivals(wl, 2), redraw_arrivals(wl, 1)
    assert len(a) == len(wl)
    pd.testing.assert_frame_equal(a.frame, a2.frame)  # the same seed, the same arrivals (both runs of a pair)
    assert not np.allclose(a.frame["t_s"], b.frame["t_s"])  # another seed, other arrivals (planted: an inert seed)
    def per(x, fn):
        return np.bincount(np.floor(x.frame.loc[x.frame["function"] == fn, "t_s"]).astype(int), minlength=31)[:30]

    for w in (a, b):
        for fn in wl.functions:
            assert (per(w, fn) == per(wl, fn)).all()
    assert redraw_arrivals(wl, None) is wl


def test_a_traces_own_interval_is_the_grain():
    wl = _wl()
    wl.metadata["interval_s"] = 10.0
    t = redraw_arrivals(wl, 3).frame["t_s"].to_numpy()
    assert np.bincount((t // 10).astype(int)).tolist() == np.bincount((wl.frame["t_s"].to_numpy() // 10).astype(int)).tolist()


def test_cold_and_warm_latency_are_reported_apart():
    req = pd.DataFrame({"status": ["ok", "ok", "ok", "error"], "cold_start": [True, False, False, True],
                        "latency_s": [3.0, 0.1, 0.3, np.nan]})
    out = by_start(req)
    assert out["cold"]["count"] == 1 and out["cold"]["p50_s"] == 3.0
    assert out["warm"]["count"] == 2 and out["warm"]["mean_s"] == pytest.approx(0.2)
