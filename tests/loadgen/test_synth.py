"""Synthetic generators: reproducible by seed, and the rates they promise."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.errors import InputError
from loadgen.synth import diurnal, mmpp, piecewise_poisson, poisson, steps
from loadgen.workload import read_workload, write_workload


@pytest.mark.parametrize(
    "make",
    [
        lambda s: poisson(20, 60, ["a", "b"], seed=s),
        lambda s: mmpp([2, 50], [5, 1], 60, {"a": 3, "b": 1}, seed=s),
        lambda s: diurnal(20, 60, ["a"], amplitude=0.8, seed=s),
        lambda s: steps([5, 40, 10], 20, ["a", "b", "c"], seed=s),
    ],
)
def test_same_seed_same_schedule_other_seed_differs(make, tmp_path) -> None:
    a, b, c = make(1), make(1), make(2)
    assert a.frame.equals(b.frame)
    assert not a.frame["t_s"].equals(c.frame["t_s"])
    assert np.all(np.diff(a.frame["t_s"].to_numpy()) >= 0)
    back = read_workload(write_workload(a, tmp_path / "w.parquet"))
    assert back.frame.equals(a.frame) and back.metadata["seed"] == 1


def test_poisson_count_and_interarrival_moments() -> None:
    wl = poisson(100, 200, ["f"], seed=0)
    n = len(wl)
    # count ~ Poisson(20000): 5 sigma is about 707
    assert abs(n - 20000) < 710
    gaps = np.diff(wl.frame["t_s"].to_numpy())
    assert gaps.mean() == pytest.approx(0.01, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: cv 1


def test_shares_are_respected() -> None:
    wl = poisson(200, 100, {"a": 3, "b": 1}, seed=4)
    frac = (wl.frame["function"] == "a").mean()
    assert frac == pytest.approx(0.75, abs=0.02)
    assert wl.metadata["functions"] == {"a": 0.75, "b": 0.25}


def test_steps_rate_per_step() -> None:
    wl = steps([10, 100, 0], [50, 50, 50], ["f"], seed=3)
    t = wl.frame["t_s"].to_numpy()
    counts = np.histogram(t, bins=[0, 50, 100, 150])[0]
    assert abs(counts[0] - 500) < 5 * np.sqrt(500)
    assert abs(counts[1] - 5000) < 5 * np.sqrt(5000)
    assert counts[2] == 0


def test_diurnal_follows_the_sine() -> None:
    wl = diurnal(100, 400, ["f"], amplitude=1.0, seed=5)
    t = wl.frame["t_s"].to_numpy()
    first, second = (t < 200).sum(), (t >= 200).sum()
    # rate 100(1+sin): mean over first half 100(1+2/pi), second half 100(1-2/pi)
    assert first == pytest.approx(200 * 100 * (1 + 2 / np.pi), rel=0.05)
    assert second == pytest.approx(200 * 100 * (1 - 2 / np.pi), rel=0.1)


def test_mmpp_is_burstier_than_poisson() -> None:
    wl = mmpp([1, 100], [10, 2], 600, ["f"], seed=6)
    counts = np.histogram(wl.frame["t_s"], bins=np.arange(0, 601, 1.0))[0]
    assert counts.var() / counts.mean() > 5  # Poisson has index of dispersion 1
    assert wl.metadata["state_changes"] > 10


def test_piecewise_poisson_zero_rate_segment_is_empty() -> None:
    t = piecewise_poisson(np.array([0.0, 10.0]), np.array([0.0, 5.0]), 20.0, np.random.default_rng(0))
    assert t.size and t.min() >= 10.0 and t.max() < 20.0


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: poisson(-1, 10, ["f"]), "rate_per_s"),
        (lambda: poisson(1, 0, ["f"]), "duration_s"),
        (lambda: poisson(1, 10, []), "functions"),
        (lambda: poisson(1, 10, {"a": 0}), "functions"),
        (lambda: mmpp([1], [1], 10, ["f"]), "rates_per_s"),
        (lambda: diurnal(1, 10, ["f"], amplitude=2), "amplitude"),
        (lambda: steps([1, 2], [1, 2, 3], ["f"]), "step_s"),
    ],
)
def test_bad_parameters_name_the_field(call, field) -> None:
    with pytest.raises(InputError, match=f"field {field}"):
        call()
