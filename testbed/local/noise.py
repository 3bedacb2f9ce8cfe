"""Measurement noise of the embedded lab: how much one profile's latency moves between repeated runs.

Every tuner comparison on the simulator is noise-free unless something adds the noise a real lab
has; this module measures it (``scoretune calibrate --noise``) and states it as a model the
evaluation can draw from (``agent.noisy``).

Measurement: for each cell (workload length ``d`` seconds, load ``r`` requests per second) the lab
workload is replayed ``repeats`` times under the same profile, each from a reset lab, exactly as a
tuning step runs it. The spread of a cell is the coefficient of variation of the metric over its
repeats (sample standard deviation over the mean, ``ddof = 1``).

Model: ``cv^2 = floor^2 + scale^2 / N + drift^2 / d`` with ``N = d * r`` the requests of one run
and ``d`` its length in seconds. The ``scale^2 / N`` term is the sampling noise of a mean over ``N``
requests (a variance falling as ``1 / N``); ``drift^2 / d`` is what averages out with time rather
than with requests (the machine's other work, the cold starts every reset brings back, whose share
of a run falls as it grows); ``floor`` is what does neither. The cells vary length at a fixed load
and load at a fixed length (a cross), so the three terms are separable. They are fitted by
non-negative least squares on the cells' squared CVs, each weighted by its degrees of freedom
(``repeats - 1``), so a cell measured with more repeats counts more. With fewer distinct cells
than terms, the terms that cannot be separated are dropped (``drift`` first, then ``scale``).
Extrapolating to runs much longer than the longest cell trusts the ``1 / d`` and ``1 / N`` shapes.

The file (YAML) keeps every cell and every repeat's value, so the fit can be checked and redone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from testbed.errors import InputError, TestbedError

NOISE_METRICS = ("mean", "p95")
MIN_REPEATS = 2


@dataclass(frozen=True)
class NoiseCell:
    """One (length, load) cell of the measurement: the metric of each repeat."""

    duration_s: float
    rate_per_s: float
    values: tuple[float, ...]

    @property
    def requests(self) -> float:
        return self.duration_s * self.rate_per_s

    @property
    def cv(self) -> float:
        """Sample coefficient of variation of the repeats (``ddof = 1``)."""
        v = np.asarray(self.values, dtype=float)
        return float(np.std(v, ddof=1) / np.mean(v))


@dataclass(frozen=True)
class NoiseModel:
    """``cv = sqrt(floor^2 + scale^2 / N + drift^2 / d)``: the run-to-run spread of a latency
    metric of a run of ``N`` requests over ``d`` seconds, as a coefficient of variation."""

    floor: float
    scale: float
    drift: float = 0.0
    metric: str = "mean"
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("floor", "scale", "drift"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value >= 0):
                raise InputError(f"must be a finite number >= 0, got {value!r}", file=self.source or None,
                                 field=f"model.{name}")

    def cv(self, requests: float, duration_s: float) -> float:
        """The predicted coefficient of variation of one run of ``requests`` requests over
        ``duration_s`` seconds."""
        for name, value in (("requests", requests), ("duration_s", duration_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
                raise InputError(f"a run has a positive {name}, got {value!r}", field=name)
        return math.sqrt(self.floor**2 + self.scale**2 / requests + self.drift**2 / duration_s)

    def to_dict(self) -> dict[str, Any]:
        return {"floor": float(self.floor), "scale": float(self.scale), "drift": float(self.drift),
                "metric": self.metric}


def fit_noise(cells: Sequence[NoiseCell], metric: str = "mean") -> NoiseModel:
    """Fit ``cv^2 = floor^2 + scale^2 / N + drift^2 / d`` by weighted non-negative least squares
    (see the module docstring); the weights are each cell's ``repeats - 1``."""
    from scipy.optimize import nnls

    if not cells:
        raise TestbedError("no noise cells to fit")
    for c in cells:
        if len(c.values) < MIN_REPEATS:
            raise TestbedError(f"a noise cell needs >= {MIN_REPEATS} repeats, got {len(c.values)} "
                               f"({c.duration_s:g} s at {c.rate_per_s:g}/s)")
    y = np.array([c.cv**2 for c in cells])
    w = np.sqrt(np.array([len(c.values) - 1.0 for c in cells]))
    columns = {"floor": np.ones(len(cells)), "scale": np.array([1.0 / c.requests for c in cells]),
               "drift": np.array([1.0 / c.duration_s for c in cells])}
    names = ["floor", "scale", "drift"]
    while len(names) > 1:  # drop the terms the cells cannot separate (drift first, then scale)
        m = np.stack([columns[n] / np.abs(columns[n]).max() for n in names], axis=1)
        if np.linalg.matrix_rank(m, tol=1e-9) == len(names):
            break
        names.pop()
    a = np.stack([columns[n] for n in names], axis=1) * w[:, None]
    coef, _ = nnls(a, y * w)
    fitted = dict.fromkeys(("floor", "scale", "drift"), 0.0)
    fitted.update({n: math.sqrt(max(float(v), 0.0)) for n, v in zip(names, coef, strict=True)})
    return NoiseModel(**fitted, metric=metric)


def noise_cells(durations: Sequence[float], rates: Sequence[float], reference_rate: float,
                reference_duration: float) -> list[tuple[float, float]]:
    """The measured (duration, rate) cells: every duration at ``reference_rate`` and every rate at
    ``reference_duration`` (a cross, not a grid: length and load each vary once, which is what the
    one-variable model needs, at a fraction of a grid's cost)."""
    cells = [(float(d), float(reference_rate)) for d in durations]
    cells += [(float(reference_duration), float(r)) for r in rates if (float(reference_duration), float(r)) not in cells]
    return cells


def measure_noise(
    local: Any,
    cells: Sequence[tuple[float, float]],
    repeats: int,
    out_dir: Path,
    *,
    seed: int = 0,
    profile: Any = None,
    progress: Any = None,
) -> dict[str, list[NoiseCell]]:
    """Replay the lab workload of each cell ``repeats`` times under ``profile`` (default weights
    when None), each run from a reset lab; returns the cells per metric. A failed run is an error
    naming its directory: a spread with a failure in it would measure the failure, not the noise."""
    from testbed.local.scenario import lab_workload
    from testbed.scheduler.config import default_profile

    if repeats < MIN_REPEATS:
        raise InputError(f"a spread needs >= {MIN_REPEATS} repeats, got {repeats}", field="repeats")
    profile = profile or default_profile()
    values: dict[str, dict[tuple[float, float], list[float]]] = {m: {} for m in NOISE_METRICS}
    for d, r in cells:
        wl = lab_workload(seed, duration_s=d, rate_per_s=r)
        for k in range(repeats):
            local.apply(profile)
            local.reset()
            run_dir = Path(out_dir) / f"d{d:g}-r{r:g}" / f"repeat-{k:02d}"
            t0 = time.monotonic()
            res = local.run(wl, run_dir, seed=seed)
            if res.failed or res.summary.get("latency_mean_s") is None:
                raise TestbedError(f"{run_dir}: the run failed ({res.summary.get('failure') or 'no successful request'})")
            for m in NOISE_METRICS:
                values[m].setdefault((d, r), []).append(float(res.summary[f"latency_{m}_s"]))
            if progress is not None:
                progress(d, r, k, float(res.summary["latency_mean_s"]), time.monotonic() - t0)
    return {m: [NoiseCell(d, r, tuple(v)) for (d, r), v in per.items()] for m, per in values.items()}


def write_noise(path: Path, cells: Mapping[str, Sequence[NoiseCell]], info: Mapping[str, Any]) -> Path:
    """The calibration file: per metric the fitted model and every cell with its raw repeats."""
    doc: dict[str, Any] = {"noise": dict(info), "metrics": {}}
    for metric, cs in cells.items():
        model = fit_noise(cs, metric)
        doc["metrics"][metric] = {
            "model": {"floor": round(float(model.floor), 6), "scale": round(float(model.scale), 6),
                      "drift": round(float(model.drift), 6)},
            "cells": [
                {"duration_s": float(c.duration_s), "rate_per_s": float(c.rate_per_s), "requests": float(c.requests),
                 "cv": round(float(c.cv), 6), "predicted_cv": round(float(model.cv(c.requests, c.duration_s)), 6),
                 "values": [round(float(v), 6) for v in c.values]}
                for c in cs
            ],
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(path)
    return path


def _read_doc(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise InputError("no such noise calibration file (write one with `scoretune calibrate --noise`)",
                         file=path) from None
    except IsADirectoryError:
        raise InputError("a directory, not a noise calibration file", file=path) from None
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", file=path) from None
    except yaml.YAMLError as err:
        raise InputError(f"not YAML: {str(err).splitlines()[0]}", file=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise InputError("not a noise calibration (no 'metrics' mapping)", file=path, field="metrics")
    return data


def read_noise_cells(path: Path) -> tuple[dict[str, list[NoiseCell]], dict[str, Any]]:
    """The measured cells of a calibration file (to fit them again: ``calibrate --noise --refit``)."""
    data = _read_doc(path)
    out: dict[str, list[NoiseCell]] = {}
    for metric, entry in data["metrics"].items():
        cells = entry.get("cells") if isinstance(entry, dict) else None
        if not isinstance(cells, list) or not cells:
            raise InputError("no measured cells", file=path, field=f"metrics.{metric}.cells")
        out[str(metric)] = []
        for i, c in enumerate(cells):
            try:
                cell = NoiseCell(float(c["duration_s"]), float(c["rate_per_s"]), tuple(float(v) for v in c["values"]))
            except (KeyError, TypeError, ValueError):
                raise InputError("a cell has duration_s, rate_per_s and a list of numeric values", file=path,
                                 field=f"metrics.{metric}.cells[{i}]") from None
            if not all(math.isfinite(v) and v > 0 for v in (cell.duration_s, cell.rate_per_s, *cell.values)):
                raise InputError("values must be positive and finite", file=path, field=f"metrics.{metric}.cells[{i}]")
            out[str(metric)].append(cell)
    info = data.get("noise") if isinstance(data.get("noise"), dict) else {}
    return out, dict(info)


def load_noise_model(path: Path, metric: str = "mean") -> NoiseModel:
    """The fitted model for ``metric`` from a calibration file, every field checked."""
    metrics = _read_doc(path)["metrics"]
    entry = metrics.get(metric)
    if not isinstance(entry, dict) or not isinstance(entry.get("model"), dict):
        raise InputError(f"no model for metric {metric!r} (has: {sorted(map(str, metrics))})", file=path,
                         field=f"metrics.{metric}.model")
    model = entry["model"]
    for name in ("floor", "scale"):
        if name not in model:
            raise InputError("missing", file=path, field=f"metrics.{metric}.model.{name}")
    return NoiseModel(floor=model["floor"], scale=model["scale"], drift=model.get("drift", 0.0), metric=metric,
                      source=str(path))
