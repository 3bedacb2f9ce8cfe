"""The profiler: real measurements in a fresh process, statistics, and writing specs back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from functions.errors import InputError
from functions.profile import Measurement, measure, median_io_s, summarize, write_measured
from functions.spec import MeasuredProfile, discover_specs, load_spec

SPECS = discover_specs()


def test_measuring_the_trace_driven_function_recovers_what_it_was_asked_to_do() -> None:
    m = measure(SPECS["trace-driven"], samples=2, payload={"cpu_s": 0.05, "memory_bytes": 8 << 20})
    assert len(m.cpu_s) == 2 and all(c >= 0.05 for c in m.cpu_s)
    assert all(w >= c * 0.99 for w, c in zip(m.wall_s, m.cpu_s, strict=True))
    assert 7 << 20 <= m.peak_memory_bytes <= 64 << 20, "8 MiB touched per request"
    assert 10 << 20 < m.baseline_rss_bytes < 200 << 20 and m.init_s > 0


def test_summary_statistics() -> None:
    m = Measurement(
        "x",
        cpu_s=(1.0, 2.0, 3.0, 4.0),
        wall_s=(1.5, 2.0, 3.0, 4.5),
        init_s=0.2,
        baseline_rss_bytes=100,
        peak_rss_bytes=350,
        runqueue_s=(0.25, 0.0, 0.5, 0.0),
    )
    p = summarize(m, machine="test machine")
    assert (p.cpu_s_mean, p.cpu_s_p50, p.cpu_s_p95) == (2.5, 2.5, pytest.approx(3.85))
    assert (
        p.wall_s_mean == 2.75
        and p.peak_memory_bytes == 250
        and p.samples == 4
        and p.machine == "test machine"
    )
    # I/O wait excludes time spent waiting for a CPU, and never goes negative.
    assert m.io_s == (0.25, 0.0, 0.0, 0.5)
    assert median_io_s(m) == 0.125


def _copy_spec(tmp_path: Path, name: str) -> Path:
    target = tmp_path / SPECS[name].path.parent.name
    shutil.copytree(SPECS[name].path.parent, target)
    return target / "spec.yaml"


def _profile(**overrides) -> MeasuredProfile:
    base = dict(
        cpu_s_mean=0.03,
        cpu_s_p50=0.0291,
        cpu_s_p95=0.04,
        wall_s_mean=0.05,
        peak_memory_bytes=5 * 2**20 + 1,
        samples=3,
        machine="m",
        measured_at="2026-01-01T00:00:00+00:00",
        init_s=0.17,
        baseline_rss_bytes=30 << 20,
    )
    return MeasuredProfile(**{**base, **overrides})


def test_write_measured_keeps_comments_and_spelling_and_refits_work(tmp_path: Path) -> None:
    path = _copy_spec(tmp_path, "float-ops")
    header = [line for line in path.read_text().splitlines() if line.startswith("#")]
    write_measured(path, _profile(), refit=True, io_s=0.012)
    text = path.read_text()
    assert [line for line in text.splitlines() if line.startswith("#")] == header
    raw = yaml.safe_load(text)
    assert raw["resources"]["requests"]["cpu"] == "250m"  # written quantities keep their spelling
    spec = load_spec(path)
    assert spec.measured == _profile()
    assert spec.work_cpu_s.mean == 0.0291 and spec.work_memory_bytes == 6 * 2**20 and spec.work_io_s == 0.012
    assert spec.init_s == 0.17 and spec.work_cpu_s.cv == SPECS["float-ops"].work_cpu_s.cv


def test_write_measured_without_refit_changes_only_the_measured_block(tmp_path: Path) -> None:
    path = _copy_spec(tmp_path, "aes")
    before = load_spec(path)
    write_measured(path, _profile())
    after = load_spec(path)
    assert after.measured == _profile()
    assert (after.work_cpu_s, after.work_memory_bytes, after.init_s) == (
        before.work_cpu_s,
        before.work_memory_bytes,
        before.init_s,
    )


def test_a_write_that_would_break_the_spec_is_undone(tmp_path: Path) -> None:
    path = _copy_spec(tmp_path, "aes")
    original = path.read_text()
    with pytest.raises(InputError, match=r"field measured.cpu_s_mean"):
        write_measured(path, _profile(cpu_s_mean=-1.0))
    assert path.read_text() == original
