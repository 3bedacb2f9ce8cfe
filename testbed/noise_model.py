"""The embedded lab's measurement noise as a model: how much one profile's latency moves between
repeated runs, and the calibration file that keeps it.

The lab measures it (:mod:`testbed.local.studies.noise`, ``scoretune calibrate --noise``); the
evaluation and training draw from it (``agent.objectives.noisy``). The model sits here, beside
the other shared models of ``testbed``, so neither side reaches into the lab's folder for it.

Model: ``cv = c0 * (N / N0)^a * (d / d0)^b`` with ``N = d * r`` the requests of one run, ``d`` its
length in seconds and ``(N0, d0)`` the geometric centre of the measured cells; ``log cv`` is fitted
by weighted least squares (weights ``repeats - 1``: a cell measured with more repeats counts more).
A power law because the lab does not follow the textbook ``1 / sqrt(N)``: on this machine the
spread *grows* with length and load (a longer or busier run crosses more of the autoscaler's
scale-up decisions, each a cold start that lands at a different moment), so the form has to be
able to go either way. ``N`` and ``d`` are clamped to the measured ranges before the law is
applied: outside them nothing was measured, and the model says what the nearest measured edge
says rather than extrapolating a trend from a handful of cells. With cells that cannot separate
the two exponents (every cell at one load), ``b`` is dropped; with one cell size, ``a`` too.

The file (YAML) keeps every cell and every repeat's value, so the fit can be checked and redone.
"""

from __future__ import annotations

import dataclasses
import math
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
    """``cv = c0 * (N / n0)^n_exp * (d / d0)^d_exp``, ``N`` clamped to ``n_range`` and ``d`` to
    ``d_range``: the run-to-run spread, as a coefficient of variation, of a latency metric of a run
    of ``N`` requests over ``d`` seconds."""

    c0: float
    n_exp: float = 0.0
    d_exp: float = 0.0
    n0: float = 1.0
    d0: float = 1.0
    n_range: tuple[float, float] = (0.0, math.inf)
    d_range: tuple[float, float] = (0.0, math.inf)
    metric: str = "mean"
    source: str = ""

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, positive: bool) -> bool:
            return (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
                    or (positive and value <= 0))

        for name, positive in (("c0", False), ("n_exp", False), ("d_exp", False), ("n0", True), ("d0", True)):
            value = getattr(self, name)
            if bad(name, value, positive) or (name == "c0" and value < 0):
                raise InputError(f"must be a finite number{' > 0' if positive else ''}{' >= 0' if name == 'c0' else ''}, "
                                 f"got {value!r}", file=self.source or None, field=f"model.{name}")
        for name in ("n_range", "d_range"):
            low, high = getattr(self, name)
            if isinstance(low, bool) or isinstance(high, bool) or not (0 <= low <= high):
                raise InputError(f"must be [low, high] with 0 <= low <= high, got {[low, high]!r}",
                                 file=self.source or None, field=f"model.{name}")

    def scaled(self, factor: float) -> NoiseModel:
        """The same model with every spread multiplied by ``factor`` (a lab ``factor`` times as noisy:
        the sensitivity rows of the noisy protocol, and training at that noise)."""
        if isinstance(factor, bool) or not (math.isfinite(factor) and factor >= 0):
            raise InputError(f"a noise scale is a finite number >= 0, got {factor!r}", field="noise_scale")
        return dataclasses.replace(self, c0=self.c0 * float(factor))

    def cv(self, requests: float, duration_s: float) -> float:
        """The predicted coefficient of variation of one run of ``requests`` requests over
        ``duration_s`` seconds (each clamped to the measured range)."""
        for name, value in (("requests", requests), ("duration_s", duration_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
                raise InputError(f"a run has a positive {name}, got {value!r}", field=name)
        n = min(max(float(requests), self.n_range[0]), self.n_range[1])
        d = min(max(float(duration_s), self.d_range[0]), self.d_range[1])
        return self.c0 * (n / self.n0) ** self.n_exp * (d / self.d0) ** self.d_exp

    def to_dict(self) -> dict[str, Any]:
        return {"c0": float(self.c0), "n_exp": float(self.n_exp), "d_exp": float(self.d_exp), "n0": float(self.n0),
                "d0": float(self.d0), "n_range": [float(x) for x in self.n_range],
                "d_range": [float(x) for x in self.d_range], "metric": self.metric}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, metric: str = "mean", source: str = "") -> NoiseModel:
        """The ``model`` mapping of a calibration file (or :meth:`to_dict`), every field checked."""
        where = source or None
        if "c0" not in data:
            raise InputError("missing", file=where, field="model.c0")
        ranges = {}
        for name in ("n_range", "d_range"):
            value = data.get(name, [0.0, math.inf])
            if (not isinstance(value, list | tuple) or len(value) != 2
                    or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)):
                raise InputError(f"must be [low, high], got {value!r}", file=where, field=f"model.{name}")
            ranges[name] = (float(value[0]), float(value[1]))
        return cls(c0=data["c0"], n_exp=data.get("n_exp", 0.0), d_exp=data.get("d_exp", 0.0), n0=data.get("n0", 1.0),
                   d0=data.get("d0", 1.0), **ranges, metric=metric, source=source)


def fit_noise(cells: Sequence[NoiseCell], metric: str = "mean") -> NoiseModel:
    """Fit ``log cv = log c0 + n_exp log(N / n0) + d_exp log(d / d0)`` by weighted least squares
    (see the module docstring); the weights are each cell's ``repeats - 1``."""
    if not cells:
        raise TestbedError("no noise cells to fit")
    for c in cells:
        if len(c.values) < MIN_REPEATS:
            raise TestbedError(f"a noise cell needs >= {MIN_REPEATS} repeats, got {len(c.values)} "
                               f"({c.duration_s:g} s at {c.rate_per_s:g}/s)")
        if not c.cv > 0:
            raise TestbedError(f"the cell {c.duration_s:g} s at {c.rate_per_s:g}/s has no spread (every repeat "
                               "measured the same): a log-scale fit needs a positive spread")
    n = np.array([c.requests for c in cells])
    d = np.array([c.duration_s for c in cells])
    n0, d0 = float(np.exp(np.log(n).mean())), float(np.exp(np.log(d).mean()))
    y = np.log([c.cv for c in cells])
    w = np.sqrt(np.array([len(c.values) - 1.0 for c in cells]))
    columns = {"c0": np.ones(len(cells)), "n_exp": np.log(n / n0), "d_exp": np.log(d / d0)}
    names = ["c0", "n_exp", "d_exp"]
    while len(names) > 1:  # drop what the cells cannot separate (d_exp first, then n_exp)
        m = np.stack([columns[k] for k in names], axis=1)
        if np.linalg.matrix_rank(m, tol=1e-9) == len(names):
            break
        names.pop()
    a = np.stack([columns[k] for k in names], axis=1) * w[:, None]
    coef, *_ = np.linalg.lstsq(a, y * w, rcond=None)
    fitted = {"c0": 0.0, "n_exp": 0.0, "d_exp": 0.0}
    fitted.update({k: float(v) for k, v in zip(names, coef, strict=True)})
    return NoiseModel(c0=math.exp(fitted["c0"]), n_exp=fitted["n_exp"], d_exp=fitted["d_exp"], n0=n0, d0=d0,
                      n_range=(float(n.min()), float(n.max())), d_range=(float(d.min()), float(d.max())),
                      metric=metric)


def write_noise(path: Path, cells: Mapping[str, Sequence[NoiseCell]], info: Mapping[str, Any]) -> Path:
    """The calibration file: per metric the fitted model and every cell with its raw repeats."""
    doc: dict[str, Any] = {"noise": dict(info), "metrics": {}}
    for metric, cs in cells.items():
        model = fit_noise(cs, metric)
        doc["metrics"][metric] = {
            "model": {k: ([round(x, 6) for x in v] if isinstance(v, list) else round(v, 6))
                      for k, v in model.to_dict().items() if k != "metric"},
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
    return NoiseModel.from_dict(entry["model"], metric=metric, source=str(path))
