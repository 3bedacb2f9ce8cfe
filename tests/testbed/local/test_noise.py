"""The lab-noise calibration's arithmetic: the spread of a cell, the model's fit, the file."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from testbed.errors import InputError, TestbedError
from testbed.local.noise import NoiseCell, NoiseModel, fit_noise, load_noise_model, noise_cells, write_noise


def cell_with_cv(duration: float, rate: float, cv: float, repeats: int = 5, mean: float = 0.3) -> NoiseCell:
    """A cell whose repeats have exactly this sample CV (ddof = 1)."""
    z = np.linspace(-1.0, 1.0, repeats)
    z = (z - z.mean()) / z.std(ddof=1)
    return NoiseCell(duration, rate, tuple(mean * (1.0 + cv * z)))


def test_cell_cv_is_the_sample_cv():
    c = NoiseCell(10.0, 6.0, (1.0, 2.0, 3.0))
    assert c.cv == pytest.approx(0.5)  # sd (ddof=1) 1, mean 2
    assert c.requests == 60.0


def test_fit_recovers_all_three_terms_from_a_cross():
    truth = NoiseModel(floor=0.03, scale=0.5, drift=0.2)
    cells = [cell_with_cv(d, r, truth.cv(d * r, d)) for d, r in noise_cells([10, 20, 40], [3, 12], 6.0, 20.0)]
    fitted = fit_noise(cells)
    assert fitted.floor == pytest.approx(0.03, rel=1e-3)
    assert fitted.scale == pytest.approx(0.5, rel=1e-3)
    assert fitted.drift == pytest.approx(0.2, rel=1e-3)


def test_fit_drops_the_term_a_fixed_load_cannot_separate():
    # at one rate, 1/N and 1/d are the same column: drift is dropped, the cells are still predicted
    truth = NoiseModel(floor=0.02, scale=0.4)
    cells = [cell_with_cv(d, 6.0, truth.cv(d * 6.0, d)) for d in (10, 20, 40)]
    fitted = fit_noise(cells)
    assert fitted.drift == 0.0
    for c in cells:
        assert fitted.cv(c.requests, c.duration_s) == pytest.approx(c.cv, rel=1e-3)


def test_one_cell_is_all_floor():
    fitted = fit_noise([cell_with_cv(20, 6, 0.08)])
    assert (fitted.floor, fitted.scale, fitted.drift) == (pytest.approx(0.08), 0.0, 0.0)


def test_weights_favour_cells_with_more_repeats():
    a, b = cell_with_cv(20, 6, 0.05, repeats=21), cell_with_cv(20, 6, 0.15, repeats=3)
    fitted = fit_noise([a, b])  # one distinct cell size: a weighted mean of cv^2, 20:2
    assert fitted.floor == pytest.approx(math.sqrt((20 * 0.05**2 + 2 * 0.15**2) / 22))


def test_fit_refuses_a_cell_without_a_spread():
    with pytest.raises(TestbedError, match="repeats"):
        fit_noise([NoiseCell(10, 6, (0.3,))])


def test_model_refuses_impossible_runs():
    m = NoiseModel(0.05, 0.5, 0.1)
    with pytest.raises(InputError, match="requests"):
        m.cv(0, 10)
    with pytest.raises(InputError, match="duration_s"):
        m.cv(10, float("nan"))
    with pytest.raises(InputError, match="floor"):
        NoiseModel(-0.1, 0.5)


def test_noise_cells_are_a_cross():
    assert noise_cells([10, 20, 40], [3, 12], 6.0, 20.0) == [(10, 6), (20, 6), (40, 6), (20, 3), (20, 12)]


def test_file_round_trip(tmp_path):
    cells = [cell_with_cv(d, r, 0.05 + 1.0 / d) for d, r in noise_cells([10, 20], [3], 6.0, 20.0)]
    path = write_noise(tmp_path / "noise.yaml", {"mean": cells, "p95": cells}, {"cluster": "lab-small"})
    loaded = load_noise_model(path, "mean")
    fitted = fit_noise(cells)
    assert loaded.floor == pytest.approx(fitted.floor, abs=1e-6)
    assert loaded.scale == pytest.approx(fitted.scale, abs=1e-6)
    doc = yaml.safe_load(path.read_text())
    assert [c["values"] for c in doc["metrics"]["mean"]["cells"]] == [[round(v, 6) for v in c.values] for c in cells]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not UTF-8"),
        (b"metrics: [unclosed", "not YAML"),
        (b"just text", "no 'metrics' mapping"),
        (b"metrics: {p95: {model: {floor: 0.1, scale: 0.1}}}", "no model for metric 'mean'"),
        (b"metrics: {mean: {model: {scale: 0.1}}}", "field metrics.mean.model.floor"),
        (b"metrics: {mean: {model: {floor: -1, scale: 0.1}}}", "field model.floor"),
        (b"metrics: {mean: {model: {floor: .inf, scale: 0.1}}}", "field model.floor"),
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
