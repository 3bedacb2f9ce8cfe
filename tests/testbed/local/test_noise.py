"""The lab-noise calibration's arithmetic: the spread of a cell, the model's fit, the file."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import yaml

from testbed.errors import InputError, TestbedError
from testbed.local.studies.noise import noise_cells
from testbed.noise_model import NoiseCell, NoiseModel, fit_noise, load_noise_model, write_noise


def cell_with_cv(duration: float, rate: float, cv: float, repeats: int = 5, mean: float = 0.3) -> NoiseCell:
    """A cell whose repeats have exactly this sample CV (ddof = 1)."""
    z = np.linspace(-1.0, 1.0, repeats)
    z = (z - z.mean()) / z.std(ddof=1)
    return NoiseCell(duration, rate, tuple(mean * (1.0 + cv * z)))


def test_cell_cv_is_the_sample_cv():
    c = NoiseCell(10.0, 6.0, (1.0, 2.0, 3.0))
    assert c.cv == pytest.approx(0.5)  # sd (ddof=1) 1, mean 2
    assert c.requests == 60.0


def test_fit_recovers_a_power_law_from_a_cross():
    truth = NoiseModel(c0=0.1, n_exp=0.8, d_exp=-0.3, n0=100.0, d0=20.0)
    cells = [cell_with_cv(d, r, truth.cv(d * r, d)) for d, r in noise_cells([10, 20, 40], [3, 12], 6.0, 20.0)]
    fitted = fit_noise(cells)
    for c in cells:
        assert fitted.cv(c.requests, c.duration_s) == pytest.approx(c.cv, rel=1e-6)
    assert fitted.n_exp == pytest.approx(0.8) and fitted.d_exp == pytest.approx(-0.3)
    assert (fitted.n_range, fitted.d_range) == ((60.0, 240.0), (10.0, 40.0))


def test_the_model_never_extrapolates_beyond_the_measured_cells():
    m = NoiseModel(c0=0.1, n_exp=1.0, d_exp=-0.5, n0=100.0, d0=20.0, n_range=(50.0, 200.0), d_range=(10.0, 40.0))
    assert m.cv(12_000, 300) == pytest.approx(m.cv(200, 40)) == pytest.approx(0.1 * 2.0 * 2.0**-0.5)
    assert m.cv(1, 1) == pytest.approx(m.cv(50, 10))
    assert m.cv(100, 20) == pytest.approx(0.1)


def test_fit_drops_the_exponent_a_fixed_load_cannot_separate():
    # at one rate, log N and log d are the same column up to a constant: d_exp is dropped
    cells = [cell_with_cv(d, 6.0, 0.05 * (d / 10) ** 0.5) for d in (10, 20, 40)]
    fitted = fit_noise(cells)
    assert fitted.d_exp == 0.0 and fitted.n_exp == pytest.approx(0.5)
    for c in cells:
        assert fitted.cv(c.requests, c.duration_s) == pytest.approx(c.cv, rel=1e-6)


def test_one_cell_size_is_a_constant():
    fitted = fit_noise([cell_with_cv(20, 6, 0.08)])
    assert (fitted.c0, fitted.n_exp, fitted.d_exp) == (pytest.approx(0.08), 0.0, 0.0)


def test_weights_favour_cells_with_more_repeats():
    a, b = cell_with_cv(20, 6, 0.05, repeats=21), cell_with_cv(20, 6, 0.15, repeats=3)
    fitted = fit_noise([a, b])  # one cell size: a weighted mean of log cv, 20:2
    assert fitted.c0 == pytest.approx(math.exp((20 * math.log(0.05) + 2 * math.log(0.15)) / 22))


def test_fit_refuses_a_cell_without_a_spread():
    with pytest.raises(TestbedError, match="repeats"):
        fit_noise([NoiseCell(10, 6, (0.3,))])


def test_model_refuses_impossible_runs():
    m = NoiseModel(0.05, 0.5, 0.1)
    with pytest.raises(InputError, match="requests"):
        m.cv(0, 10)
    with pytest.raises(InputError, match="duration_s"):
        m.cv(10, float("nan"))
    with pytest.raises(InputError, match="c0"):
        NoiseModel(-0.1, 0.5)
    with pytest.raises(TestbedError, match="no spread"):
        fit_noise([NoiseCell(10, 6, (0.3, 0.3))])


def test_noise_cells_are_a_cross():
    assert noise_cells([10, 20, 40], [3, 12], 6.0, 20.0) == [(10, 6), (20, 6), (40, 6), (20, 3), (20, 12)]


def test_file_round_trip(tmp_path):
    cells = [cell_with_cv(d, r, 0.05 + 1.0 / d) for d, r in noise_cells([10, 20], [3], 6.0, 20.0)]
    path = write_noise(tmp_path / "noise.yaml", {"mean": cells, "p95": cells}, {"cluster": "lab-small"})
    loaded = load_noise_model(path, "mean")
    fitted = fit_noise(cells)
    for c in cells:
        assert loaded.cv(c.requests, c.duration_s) == pytest.approx(fitted.cv(c.requests, c.duration_s), rel=1e-4)
    assert NoiseModel.from_dict(fitted.to_dict()) == fitted
    doc = yaml.safe_load(path.read_text())
    assert [c["values"] for c in doc["metrics"]["mean"]["cells"]] == [[round(v, 6) for v in c.values] for c in cells]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8"),
        (b"metrics: [unclosed", "not YAML"),
        (b"just text", "no 'metrics' mapping"),
        (b"metrics: {p95: {model: {c0: 0.1}}}", "no model for metric 'mean'"),
        (b"metrics: {mean: {model: {n_exp: 0.1}}}", "field model.c0"),
        (b"metrics: {mean: {model: {c0: -1}}}", "field model.c0"),
        (b"metrics: {mean: {model: {c0: .inf}}}", "field model.c0"),
        (b"metrics: {mean: {model: {c0: 0.1, n_exp: yes}}}", "field model.n_exp"),
        (b"metrics: {mean: {model: {c0: 0.1, n_range: [5]}}}", "field model.n_range"),
        (b"metrics: {mean: {model: {c0: 0.1, d_range: [9, 3]}}}", "field model.d_range"),
    ],
)
def test_bad_files_are_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "noise.yaml"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        load_noise_model(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(InputError, match="calibrate --noise"):
        load_noise_model(tmp_path / "none.yaml")


def test_the_cpu_hog_spins_for_the_block_and_is_gone_after():
    """``calibrate --noise --beside-hog N``'s contender: N processes burning CPU, killed on exit
    (also when the block raises)."""
    import psutil

    from testbed.local.studies.noise import cpu_hog

    with cpu_hog(1) as procs:
        (proc,) = procs
        ps = psutil.Process(proc.pid)
        before = sum(ps.cpu_times()[:2])
        deadline = time.monotonic() + 60.0  # on a busy machine it gets its CPU later, never if it sleeps
        while sum(ps.cpu_times()[:2]) - before <= 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum(ps.cpu_times()[:2]) - before > 0.2  # it burns CPU, not sleeps
    assert proc.poll() is not None
    try:
        with cpu_hog(2) as procs:
            raise RuntimeError("the measurement failed")
    except RuntimeError:
        pass
    assert all(p.poll() is not None for p in procs)
