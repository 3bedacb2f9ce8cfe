"""Where the time went: a run's requests and pods broken down per node and per function x node.

The end-to-end figure of a run cannot tell a slow node from a busy one or a cold one; the twin's fit
(``testbed.sim.twin``) and a user reading a run need the breakdown. It is a pure function of the
two tables every backend writes (``loadgen.results``): the simulator knows each request's node, the
embedded lab from its pod -> node map, the kube backend from the ``X-Scoretune-Node`` header the
function runtime returns (the node name from the Downward API). So every backend's ``summary.json``
carries the same ``where`` section, computed the same way.

Per node (and per function on each node): ``requests`` that reached it, ``ok``, ``failures``,
``cold_starts``, the ``mean_s`` / ``p50_s`` / ``p95_s`` latency of its ok requests and
``warm_mean_s`` of its ok requests that met no cold start (the figure a node's speed shows in),
``pulls`` (pods whose image was pulled there) with ``pull_s`` their mean pull time and
``pods``. Requests that reached no node (turned away, timed out in a queue) are ``unserved``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

WHERE_VERSION = 2
"""Bumped when a field changes meaning (the twin's fit reads the section). 2: ``pods``, ``pulls``
and ``pull_s`` are counted on every backend; a version-1 section written by the embedded lab or
the kube backend has none (the load generator's section, computed without placements, replaced the
run's), so a reader recomputes an older section from the run's tables (:func:`current_where`)."""


def _latency_stats(lat: np.ndarray) -> dict[str, float | None]:
    lat = lat[np.isfinite(lat)]
    if not lat.size:
        return {"mean_s": None, "p50_s": None, "p95_s": None}
    return {"mean_s": float(lat.mean()), "p50_s": float(np.percentile(lat, 50)), "p95_s": float(np.percentile(lat, 95))}


def _cell(status: np.ndarray, lat: np.ndarray, cold: np.ndarray) -> dict[str, Any]:
    ok = status == "ok"
    warm_ok = ok & (cold == 0)
    warm = lat[warm_ok]
    warm = warm[np.isfinite(warm)]
    return {
        "requests": int(len(status)),
        "ok": int(ok.sum()),
        "failures": int((~ok).sum()),
        "cold_starts": int((cold == 1).sum()),
        **_latency_stats(lat[ok]),
        "warm_ok": int(warm.size),
        "warm_mean_s": float(warm.mean()) if warm.size else None,
    }


def _pulls(placements: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per node: pods placed there, pods that pulled their image there and the mean pull time."""
    out: dict[str, dict[str, Any]] = {}
    if placements is None or not len(placements):
        return out
    node = placements["node"].to_numpy(dtype=object)
    pull = pd.to_numeric(placements["image_pull_s"], errors="coerce").to_numpy(dtype=np.float64)
    for name in sorted({n for n in node if isinstance(n, str)}):
        mine = node == name
        p = pull[mine]
        pulled = p[np.isfinite(p) & (p > 0.0)]
        out[name] = {"pods": int(mine.sum()), "pulls": int(pulled.size),
                     "pull_s": float(pulled.mean()) if pulled.size else None}
    return out


def where_time_went(requests: pd.DataFrame, placements: pd.DataFrame | None = None) -> dict[str, Any]:
    """The ``where`` section of a run's summary: ``nodes`` {node: cell}, ``functions`` {function:
    {node: cell}} and ``unserved`` (requests that reached no node). Nodes appear sorted by name."""
    status = requests["status"].to_numpy(dtype=object)
    node = requests["node"].to_numpy(dtype=object)
    fn = requests["function"].to_numpy(dtype=object)
    lat = requests["latency_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    cold_raw = requests["cold_start"].to_numpy(dtype=object)
    cold = np.array([1 if c is True or c is np.True_ else 0 for c in cold_raw], dtype=np.int64)
    served = np.array([isinstance(n, str) and n != "" for n in node], dtype=bool)
    pulls = _pulls(placements) if placements is not None else {}
    names = sorted({str(n) for n in node[served]} | set(pulls))
    nodes: dict[str, Any] = {}
    functions: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = served & (node == name)
        cell = _cell(status[mine], lat[mine], cold[mine])
        cell.update(pulls.get(name, {"pods": 0, "pulls": 0, "pull_s": None}))
        nodes[name] = cell
        for f in sorted({str(x) for x in fn[mine]}):
            both = mine & (fn == f)
            functions.setdefault(f, {})[name] = _cell(status[both], lat[both], cold[both])
    return {"version": WHERE_VERSION, "nodes": nodes, "functions": dict(sorted(functions.items())),
            "unserved": int((~served).sum())}


def current_where(summary: Any) -> dict[str, Any] | None:
    """A summary's ``where`` section if it is of this version, else None: the reader recomputes it
    from the run's tables (:func:`where_time_went`) rather than trust a section that may lack the
    pulls (version 1)."""
    where = summary.get("where") if isinstance(summary, dict) else None
    if isinstance(where, dict) and "nodes" in where and where.get("version") == WHERE_VERSION:
        return where
    return None


def where_rows(where: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per node for a table: the node's figures and its share of the served requests."""
    nodes = where.get("nodes") or {}
    total = sum(int(c.get("requests") or 0) for c in nodes.values()) or 1
    rows = []
    for name, c in nodes.items():
        rows.append({"node": name, "share": int(c.get("requests") or 0) / total, **c})
    return rows


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def where_table_lines(where: dict[str, Any]) -> list[str]:
    """The "where the time went" table as plain text lines of at most 80 columns (the run report
    and ``scoretune report``): latency in seconds, ``warm`` the mean of requests without a cold start."""
    header = f"{'node':<16} {'reqs':>6} {'share':>6} {'mean':>7} {'p95':>7} {'warm':>7} {'cold':>5} {'pulls':>5} " \
             f"{'pull s':>6} {'fail':>5}"
    lines = [header]
    for r in where_rows(where):
        lines.append(f"{r['node'][:16]:<16} {r['requests']:>6} {100 * r['share']:>5.1f}% {_fmt(r['mean_s']):>7} "
                     f"{_fmt(r['p95_s']):>7} {_fmt(r.get('warm_mean_s')):>7} {r['cold_starts']:>5} "
                     f"{r.get('pulls', 0):>5} {_fmt(r.get('pull_s'), 2):>6} {r['failures']:>5}")
    if where.get("unserved"):
        lines.append(f"{where['unserved']} request(s) reached no node (turned away or timed out before a pod took them)")
    return lines
