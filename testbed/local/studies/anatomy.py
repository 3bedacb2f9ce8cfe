"""Cold-start anatomy: what a cold start costs on each runtime of the lab and in the simulator.

One node (1 core, 2Gi, a 50Mi/s link, no image cached). For each function and repeat the node's
image cache is reset, an instance is started through the node agent's API and its parts are
recorded: download (bytes through the link), unpack (layers extracted), start (the process
answers ``/healthz``), init (``/readyz``: the handler imported and warmed). The same with the
node *busy* -- a neighbour spinning one full core inside the node's CPU group -- shows how much
of each part is CPU on the node (on the container runtime all of it runs in the node's group; on
the process runtime the start-up runs outside it by construction). The simulator's parts are
what its model uses: the declared image size over the link, and the spec's fixed start and init.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import requests

from functions.spec import discover_specs

log = logging.getLogger(__name__)

FUNCTIONS = ("float-ops", "dynamic-html", "thumbnailer", "aes", "matmul")
NODE = "node-0"
LINK = 50 * 2**20
CLUSTER = """\
name: anatomy
description: one node, nothing cached, a 50Mi/s link
defaults: {image_pull_bandwidth: 50Mi}
groups:
  - {name: node, count: 1, cpu: "1", memory: 2Gi}
"""
BUSY = """\
cluster: anatomy
nodes:
  node: {neighbour: {cpu: "1", duty: [1.0, 1.0], period: 10s}}
"""
PARTS = ("download_s", "unpack_s", "start_s", "init_s", "total_s")


def _measure(runtime: str, busy: bool, functions: tuple[str, ...], repeats: int, work: Path) -> list[dict[str, Any]]:
    from testbed.local import lab as labmod
    from testbed.local.state import LabState

    cluster = work / "anatomy.yaml"
    cluster.write_text(CLUSTER)
    hw = None
    if busy:
        hw = work / "busy.yaml"
        hw.write_text(BUSY)
    root = work / f"state-{runtime}-{'busy' if busy else 'quiet'}"
    labmod.up(cluster, state_dir=root, port=0, runtime=runtime, hardware=hw)
    rows = []
    try:
        agent = f"http://127.0.0.1:{LabState(root).read_port(f'agent-{NODE}')}"
        http = requests.Session()
        for r in range(repeats):
            for fn in functions:
                http.post(f"{agent}/reset", json={"images": []}, timeout=120).raise_for_status()
                iid = f"a-{fn}-{r}"
                t0 = time.monotonic()
                got = http.post(f"{agent}/instances", json={"id": iid, "function": fn}, timeout=300).json()
                wall = time.monotonic() - t0
                http.delete(f"{agent}/instances/{iid}", timeout=60)
                if not got.get("ok"):
                    raise RuntimeError(f"{runtime}: {fn} did not start: {got.get('error')}")
                download = got.get("download_s", got["image_pull_s"] - got.get("unpack_s", 0.0))
                rows.append({"runtime": runtime, "busy": busy, "function": fn, "repeat": r,
                             "download_s": download, "unpack_s": got.get("unpack_s", 0.0), "start_s": got["start_s"],
                             "init_s": got["init_s"], "total_s": wall, "bytes_pulled": got.get("bytes_pulled", 0)})
                log.info("%s%s %s: %s", runtime, " (busy)" if busy else "", fn,
                         ", ".join(f"{k} {rows[-1][k]:.3f}" for k in PARTS))
    finally:
        labmod.down(root)
    return rows


def simulator_rows(functions: tuple[str, ...]) -> list[dict[str, Any]]:
    """The simulator's cold start of each function on the same node: fixed parts from the spec."""
    from testbed.sim import SimConfig

    specs = discover_specs()
    ready = SimConfig().ready_delay_s
    rows = []
    for fn in functions:
        s = specs[fn]
        download = s.image_size_bytes / LINK
        rows.append({"runtime": "simulator", "busy": False, "function": fn, "repeat": 0, "download_s": download,
                     "unpack_s": 0.0, "start_s": s.start_s, "init_s": s.init_s,
                     "total_s": download + s.start_s + s.init_s + ready,
                     "bytes_pulled": s.image_size_bytes})
    return rows


def anatomy(runtimes: tuple[str, ...] = ("process", "containers"), *, functions: tuple[str, ...] = FUNCTIONS,
            repeats: int = 5, busy: bool = True) -> pd.DataFrame:
    """Every cold-start part per (runtime, busy, function, repeat), with the simulator's rows."""
    rows = simulator_rows(functions)
    with tempfile.TemporaryDirectory(prefix="scoretune-anatomy-") as tmp:
        for rt in runtimes:
            for b in (False, True) if busy else (False,):
                rows += _measure(rt, b, functions, repeats, Path(tmp))
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """p50 and p95 of each part per (runtime, busy, function)."""
    g = frame.groupby(["runtime", "busy", "function"], sort=False)[list(PARTS)]
    p50, p95 = g.quantile(0.5).add_suffix("_p50"), g.quantile(0.95).add_suffix("_p95")
    out = p50.join(p95)
    return out[[f"{p}_{q}" for p in PARTS for q in ("p50", "p95")]].reset_index()


def markdown(frame: pd.DataFrame, command: str) -> str:
    s = summary(frame)
    lines = [
        "# Cold-start anatomy: simulator, process lab, container lab",
        "",
        f"Command: `{command}`. One node (1 core, 2Gi, a 50Mi/s link), nothing cached, every cold start after a "
        "cache reset; p50 / p95 over the repeats (seconds). *Busy*: a neighbour spins one full core inside the "
        "node's CPU group. Download: bytes through the node's link (the process lab and the simulator wait "
        "declared size / link); unpack: layers extracted (containers only); start: until the server answers; "
        "init: until the handler is imported and warm. Total: the agent's whole call (the simulator: the sum).",
        "",
        "| runtime | busy | function | download | unpack | start | init | total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, r in s.iterrows():
        cells = [f"{r[f'{p}_p50']:.2f} / {r[f'{p}_p95']:.2f}" for p in PARTS]
        lines.append(f"| {r['runtime']} | {'yes' if r['busy'] else 'no'} | {r['function']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["anatomy", "markdown", "simulator_rows", "summary"]
