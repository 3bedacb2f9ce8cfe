"""Small trace files in each public trace's published format, written by the tests themselves.

A clone with no traces beside it still tests every reader, scenario and generator that needs a
trace: :func:`write_fixture_traces` writes one small, seeded file for every file of the trace
registry, at the path ``scoretune traces fetch`` would store it, with the upstream header and cell
formats (from the upstream READMEs, as the readers in loadgen/traces.py expect them). The content
is synthetic: tests on it check mechanics, never properties of the real traces.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd

from loadgen.trace_store import Registry, TraceFile, load_registry


def _hex(rng: np.random.Generator, n: int) -> list[str]:
    return [hashlib.sha256(rng.bytes(8)).hexdigest() for _ in range(n)]


def _bursty_times(rng: np.random.Generator, n: int, span: float) -> np.ndarray:
    """Arrivals with a shape (a quiet start, a burst, a plateau), so windows have a rate curve."""
    weights = np.concatenate([np.full(30, 0.3), np.full(20, 3.0), np.full(50, 1.0)])
    bins = rng.choice(weights.size, size=n, p=weights / weights.sum())
    return np.sort((bins + rng.random(n)) * span / weights.size)


def _genai_requests(rng: np.random.Generator) -> str:
    n = 600
    t = _bursty_times(rng, n, 3 * 86400.0)
    stamps = pd.Timestamp("2024-11-15 16:57:50") + pd.to_timedelta(np.floor(t), unit="s")
    frame = pd.DataFrame({
        "gmt_create": stamps.strftime("%Y-%m-%d %H:%M:%S"),
        "predict_type": rng.choice(["TXT_2_IMG", "IMG_2_IMG", "INPAINTING"], n),
        "predict_status": rng.choice(["SUCCEED", "SUCCEED", "SUCCEED", "FAILED"], n),
        "exec_time_seconds": np.round(rng.gamma(4.0, 6.0, n), 0),
        "groupId": [f"G{g:04d}" for g in rng.integers(0, 40, n)],
        "prompt_length": rng.integers(5, 200, n).astype(float),
        "negative_prompt_length": rng.integers(0, 60, n).astype(float),
        "num_images_per_prompt": 1.0,
        "num_inference_steps": rng.choice([20.0, 30.0, 40.0], n),
        "checkpoint_model_version_id": [f"M{m:04d}" for m in rng.integers(0, 6, n)],
        "num_lora": rng.integers(0, 3, n),
    })
    return frame.to_csv(index=False)


def _genai_qps(rng: np.random.Generator) -> str:
    rows = []
    for i, ts in enumerate(np.arange(1662859176.0, 1662859176.0 + 6 * 3600, 57.0)):
        for c, kind in enumerate(["API Requests", "Generative Requests", "Generative Requests"]):
            ip = "" if c == 0 else hashlib.md5(f"c{c}".encode()).hexdigest()
            level = 1.0 + 0.8 * np.sin(i / 40.0)
            rows.append((ts, round(float(level * rng.uniform(0.05, 1.5)), 6), ip, kind))
    return pd.DataFrame(rows, columns=["timestamp_anon", "value", "container_ip", "request_type"]).to_csv(index=False)


def _gpu2023_pods(rng: np.random.Generator) -> str:
    n = 800
    created = np.floor(_bursty_times(rng, n, 1.2e6)).astype(np.int64)
    created[0] = 0
    gpus = rng.choice([0, 1, 1, 2, 8], n)
    frame = pd.DataFrame({
        "name": [f"openb-pod-{i:04d}" for i in range(n)],
        "cpu_milli": rng.choice([2000, 4000, 6000, 12000, 32000], n),
        "memory_mib": rng.choice([4096, 12288, 16384, 65536], n),
        "num_gpu": gpus,
        "gpu_milli": np.where(gpus > 0, rng.choice([250, 460, 1000], n), 0),
        "gpu_spec": "",
        "qos": rng.choice(["LS", "BE", "Burstable"], n),
        "pod_phase": rng.choice(["Running", "Succeeded", "Failed"], n),
        "creation_time": created,
        "deletion_time": created + rng.integers(600, 200000, n),
        "scheduled_time": created,
    })
    return frame.to_csv(index=False)


def _gpu2023_nodes(rng: np.random.Generator) -> str:
    n = 60
    gpu = rng.choice([0, 2, 8], n)
    return pd.DataFrame({
        "sn": [f"openb-node-{i:04d}" for i in range(n)],
        "cpu_milli": rng.choice([32000, 64000, 96000], n),
        "memory_mib": rng.choice([262144, 393216, 786432], n),
        "gpu": gpu,
        "model": np.where(gpu > 0, rng.choice(["V100M16", "T4", "A100"], n), ""),
    }).to_csv(index=False)


def _azure2021(rng: np.random.Generator) -> str:
    n = 199
    apps = _hex(rng, 12)
    funcs = _hex(rng, 30)
    duration = np.round(rng.lognormal(0.5, 1.2, n), 3)
    end = np.sort(_bursty_times(rng, n, 1260.0)) + duration
    return pd.DataFrame({
        "app": [apps[i % 12] for i in range(n)],
        "func": [funcs[i % 30] for i in rng.integers(0, 30, n)],
        "end_timestamp": end,
        "duration": duration,
    }).to_csv(index=False)


_AZ19 = np.random.default_rng(2019)
_AZ19_IDS = [tuple(_hex(_AZ19, 3)) for _ in range(3)]  # (owner, app, function) per function


def _azure2019_invocations(rng: np.random.Generator) -> str:
    minutes = [str(m) for m in range(540, 690)]
    shape = np.concatenate([np.full(50, 0.5), np.full(30, 6.0), np.full(70, 2.0)])
    rows = []
    for (owner, app, fn), trigger in zip(_AZ19_IDS, ["timer", "http", "queue"], strict=True):
        counts = rng.poisson(shape * rng.uniform(0.5, 2.0))
        rows.append([owner, app, fn, trigger, *counts.tolist()])
    return pd.DataFrame(rows, columns=["HashOwner", "HashApp", "HashFunction", "Trigger", *minutes]).to_csv(index=False)


def _azure2019_durations(rng: np.random.Generator) -> str:
    cols = ["HashOwner", "HashApp", "HashFunction", "Average", "Count", "Minimum", "Maximum",
            *[f"percentile_Average_{p}" for p in (0, 1, 25, 50, 75, 99, 100)]]
    rows = []
    for owner, app, fn in _AZ19_IDS:
        base = float(rng.uniform(50, 2000))
        pct = np.sort(base * rng.uniform(0.5, 2.0, 7)).round().astype(int).tolist()
        rows.append([owner, app, fn, int(base), int(rng.integers(5, 500)), float(pct[0]), float(pct[-1]), *pct])
    return pd.DataFrame(rows, columns=cols).to_csv(index=False)


def _azure2019_memory(rng: np.random.Generator) -> str:
    cols = ["HashFunction", "HashOwner", "HashApp", "SampleCount", "AverageAllocatedMb",
            *[f"AverageAllocatedMb_pct{p}" for p in (1, 5, 25, 50, 75, 95, 99, 100)]]
    rows = []
    for owner, app, fn in _AZ19_IDS:
        base = float(rng.uniform(100, 400))
        pct = np.sort(base * rng.uniform(0.7, 1.3, 8)).round().tolist()
        rows.append([fn, owner, app, int(rng.integers(100, 3000)), base, *pct])
    return pd.DataFrame(rows, columns=cols).to_csv(index=False)


def _cdf(rng: np.random.Generator, header: str | None, step: float, extra: bool = False) -> str:
    x = np.arange(0, 40) * step
    f = np.sort(rng.random(40))
    f[-1] = 1.0
    lines = [header] if header else []
    for i, (a, b) in enumerate(zip(x, f, strict=True)):
        lines.append(f"{a:g},{b:.6f}" + (f",{int(1000 / (i + 1))}" if extra else ""))
    return "\n".join(lines) + "\n"


WRITERS = {
    "genai2026_lora_request_trace.csv": _genai_requests,
    "genai2026_qps.csv": _genai_qps,
    "gpu2023_openb_pod_list_default.csv": _gpu2023_pods,
    "gpu2023_openb_node_list_all_node.csv": _gpu2023_nodes,
    "azure2021_first199_invocations_invitro.csv": _azure2021,
    "invocations.csv": _azure2019_invocations,
    "durations.csv": _azure2019_durations,
    "memory.csv": _azure2019_memory,
    "execTimeCDF.csv": lambda rng: _cdf(rng, None, 5.0),
    "memCDF.csv": lambda rng: _cdf(rng, None, 5.0),
    "invokesCDF.csv": lambda rng: _cdf(rng, None, 10.0),
    "CVs.csv": lambda rng: _cdf(rng, None, 0.1),
    "chainlenCDF.csv": lambda rng: _cdf(rng, "length,F(x),count", 1.0, extra=True),
}


def fixture_bytes(f: TraceFile, seed: int = 0) -> bytes:
    """The stored content of one registry file, in its published format."""
    name = Path(f.path).name
    rng = np.random.default_rng([seed, int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)])
    return WRITERS[name](rng).encode()


def download_bytes(f: TraceFile, content: bytes) -> bytes:
    """What the upstream URL serves: the file itself, or a tar.gz holding it as ``member``."""
    if f.member is None:
        return content
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(f.member)
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def write_fixture_traces(root: Path, registry: Registry | None = None, seed: int = 0) -> Path:
    """Every file of the registry, small and synthetic, under ``root`` as ``traces fetch`` stores it."""
    reg = registry or load_registry()
    for trace in reg.traces.values():
        for f in trace.files:
            target = root / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(fixture_bytes(f, seed))
    return root
