"""Trace readers on the real traces (where the tool finds them; else skipped with the fetch command),
on fixture files in each trace's published format, and on crafted bad files in tmp_path."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from functions.spec import parse_spec
from loadgen.errors import InputError, TraceError
from loadgen.mapping import TRACE_REPLAY_FUNCTION, TraceFunction, map_functions, resolve_suite
from loadgen.traces import read_trace
from loadgen.workload import read_workload, write_workload


def _spec(name: str, cpu_s: float, memory: str):
    return parse_spec({
        "name": name, "handler": "m:f", "image": {"name": "img", "size": "10Mi"},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "cold_start": {"start_s": 0.5, "init_s": 0.1},
        "work": {"cpu_s": {"mean": cpu_s, "cv": 0.5}, "memory": memory},
    })


SPECS = {s.name: s for s in [_spec("fast", 0.01, "10Mi"), _spec("mid", 0.5, "50Mi"), _spec("slow", 20.0, "200Mi")]}


GENAI = "alibaba/genai2026_lora_request_trace.csv"


@pytest.fixture(params=["fixture", "real"])
def any_trace(request, fixture_traces, real_trace):
    """Mechanics hold on any file of the format: the fixture always, the real trace when present."""
    if request.param == "fixture":
        return lambda relpath: fixture_traces / relpath
    return real_trace


def test_alibaba_genai_sample_compressed_into_ten_minutes(real_trace, tmp_path) -> None:
    wl = read_trace("alibaba-genai", real_trace(GENAI), minutes=10, specs=SPECS, seed=1)
    assert len(wl) == 26823  # one arrival per request row
    t = wl.frame["t_s"].to_numpy()
    assert t.min() >= 0 and t.max() <= 600.0 and np.all(np.diff(t) >= 0)
    # exec times p50 23 s: nearest suite duration in log space is "slow" (20 s)
    assert (wl.frame["function"] == "slow").mean() > 0.95
    assert wl.metadata["mapping"]["method"] == "similarity"
    back = read_workload(write_workload(wl, tmp_path / "w.parquet"))
    assert back.metadata["source"] == "alibaba-genai" and back.metadata["seed"] == 1


def test_seed_reproduces_and_rate_scale_thins(any_trace) -> None:
    path = any_trace(GENAI)
    rows = len(pd.read_csv(path))
    a = read_trace("alibaba-genai", path, minutes=10, rate_scale=0.25, specs=SPECS, seed=3)
    b = read_trace("alibaba-genai", path, minutes=10, rate_scale=0.25, specs=SPECS, seed=3)
    c = read_trace("alibaba-genai", path, minutes=10, rate_scale=0.25, specs=SPECS, seed=4)
    assert a.frame.equals(b.frame) and not a.frame.equals(c.frame)
    assert len(a) == pytest.approx(rows * 0.25, rel=0.03 if rows > 10_000 else 0.15)
    up = read_trace("alibaba-genai", path, minutes=10, rate_scale=2.5, specs=SPECS, seed=3)
    assert len(up) == pytest.approx(rows * 2.5, rel=0.01 if rows > 10_000 else 0.05)


def test_trace_replay_payloads_carry_the_trace_durations(any_trace) -> None:
    raw = pd.read_csv(any_trace(GENAI))
    wl = read_trace("alibaba-genai", any_trace(GENAI), trace_replay=True, specs=SPECS)
    assert set(wl.frame["function"]) == {TRACE_REPLAY_FUNCTION}
    cpu = np.sort([json.loads(p)["cpu_s"] for p in wl.frame["payload"]])
    assert np.allclose(cpu, np.sort(raw["exec_time_seconds"].to_numpy()))


def test_qps_series_rate_matches_the_summed_samples(any_trace) -> None:
    path = any_trace("alibaba/genai2026_qps.csv")
    raw = pd.read_csv(path)
    total = raw.groupby(["request_type", "timestamp_anon"])["value"].sum()
    wl = read_trace("alibaba-genai-qps", path, functions=["fast", "mid"], specs=SPECS, seed=0)
    # expected count: each summed QPS held until the next sample of its type
    expected = 0.0
    end = raw["timestamp_anon"].max() + 57.0
    for _, s in total.groupby(level=0):
        ts = s.index.get_level_values(1).to_numpy()
        expected += float((s.to_numpy() * np.diff(np.append(ts, end))).sum())
    assert len(wl) == pytest.approx(expected, rel=0.01)
    assert set(wl.frame["function"]) <= {"fast", "mid"}
    assert wl.metadata["mapping"]["method"] == "popularity"


def test_gpu2023_pod_creations_are_arrivals(any_trace) -> None:
    path = any_trace("alibaba/gpu2023_openb_pod_list_default.csv")
    raw = pd.read_csv(path)
    wl = read_trace("alibaba-gpu2023", path, specs=SPECS, seed=0)
    assert len(wl) == len(raw)
    created = np.sort(raw["creation_time"].to_numpy() - raw["creation_time"].min())
    assert np.all(np.abs(wl.frame["t_s"].to_numpy() - created) <= 1.0 + 1e-9)  # spread within the second


def test_azure2021_starts_are_end_minus_duration(any_trace) -> None:
    path = any_trace("azure/azure2021_first199_invocations_invitro.csv")
    raw = pd.read_csv(path)
    wl = read_trace("azure2021", path, specs=SPECS)
    start = np.clip(raw["end_timestamp"] - raw["duration"], 0, None)
    assert np.allclose(wl.frame["t_s"].to_numpy(), np.sort(start - start.min()))
    tr = read_trace("azure2021", path, trace_replay=True, specs=SPECS)
    p = json.loads(tr.frame["payload"].iloc[0])
    assert p["memory_bytes"] == 200 * 2**20  # InVitro's assumption for 2021


def test_azure2019_counts_spread_within_their_minute(any_trace) -> None:
    path = any_trace("azure/azure2019_invitro_mapper_extremes/invocations.csv")
    raw = pd.read_csv(path)
    minutes = [c for c in raw.columns if c.isdigit()]
    counts = raw[minutes].to_numpy().sum(axis=0)
    wl = read_trace("azure2019", path, specs=SPECS, seed=2)
    assert len(wl) == counts.sum()
    per_minute = np.histogram(wl.frame["t_s"], bins=np.arange(len(minutes) + 1) * 60.0)[0]
    assert np.array_equal(per_minute, counts)
    # durations.csv beside it gives per-function averages, so the mapping is by similarity
    assert wl.metadata["mapping"]["method"] == "similarity"
    tr = read_trace("azure2019", path, trace_replay=True, specs=SPECS, seed=2)
    cpu = np.asarray([json.loads(p)["cpu_s"] for p in tr.frame["payload"]])
    dur = pd.read_csv(path.with_name("durations.csv"))
    assert cpu.min() >= dur["percentile_Average_0"].min() / 1000 - 1e-9
    assert cpu.max() <= dur["percentile_Average_100"].max() / 1000 + 1e-9


def _write_huawei(path, counts: dict[str, list], times=None):
    n = len(next(iter(counts.values())))
    frame = pd.DataFrame({"day": [0] * n, "time": times if times is not None else list(range(n)), **counts})
    frame.to_csv(path, index=False)
    return path


def test_huawei_per_second_counts_from_the_published_layout(tmp_path) -> None:
    path = _write_huawei(tmp_path / "day_000.csv", {"28": [3, 0, 5, 1], "75": [1, 2, None, 4]})
    wl = read_trace("huawei", path, specs=SPECS, seed=0)
    assert len(wl) == 16  # the empty cell is a function without data that second: 0 requests
    per_second = np.histogram(wl.frame["t_s"], bins=[0, 1, 2, 3, 4])[0]
    assert per_second.tolist() == [4, 2, 5, 5]
    assert wl.metadata["window_s"] == 1.0
    # a directory of day files is read in order
    _write_huawei(tmp_path / "day_001.csv", {"28": [2], "75": [2]}, times=[86400])
    assert len(read_trace("huawei", tmp_path, specs=SPECS)) == 20


def test_mapping_by_similarity_and_by_popularity() -> None:
    tfs = [TraceFunction("x", 5, 0.02, 8e6), TraceFunction("y", 9, 15.0, 3e8), TraceFunction("z", 1, 0.4, 4e7)]
    m = map_functions(tfs, ["fast", "mid", "slow"], SPECS)
    assert m.method == "similarity" and m.assignment == {"x": "fast", "y": "slow", "z": "mid"}
    pop = [TraceFunction(n, c) for n, c in [("a", 1), ("b", 100), ("c", 50), ("d", 10)]]
    p1 = map_functions(pop, ["fast", "mid", "slow"], SPECS, seed=1)
    assert p1.method == "popularity" and p1 == map_functions(pop, ["fast", "mid", "slow"], SPECS, seed=1)
    # the three busiest land on three different suite functions; the fourth wraps round to the busiest's
    assert len({p1.assignment[k] for k in "bcd"}) == 3 and p1.assignment["a"] == p1.assignment["b"]
    with pytest.raises(InputError, match="unknown suite function"):
        resolve_suite(["nope"], SPECS)


# --- bad input: the error names the file, the row (file line) and the column --------------------


def _csv(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "kind, text, pattern",
    [
        ("azure2021", "app,func,end_timestamp\na,b,1.0\n", r"field duration: missing column"),
        ("azure2021", "app,func,end_timestamp,duration\na,b,1.0,0.5\na,b,x,0.5\n", r"row 3: field end_timestamp: .*not a finite number: 'x'"),
        ("azure2021", "app,func,end_timestamp,duration\na,b,-4,0.5\n", r"row 2: field end_timestamp: .*>= 0"),
        ("azure2021", "app,func,end_timestamp,duration\na,b,4,\n", r"row 2: field duration: .*is empty"),
        ("azure2019", "HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,NaN\n", r"row 2: field 2: count is not a finite number: 'NaN'"),
        ("azure2019", "HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,-1\n", r"row 2: field 2: count must be >= 0"),
        ("azure2019", "HashOwner,HashApp,HashFunction,Trigger,1\no,a,f,http,2.5\n", r"row 2: field 1: count must be a whole number"),
        ("alibaba-genai", "gmt_create,exec_time_seconds,checkpoint_model_version_id\n2024-11-15 16:57:50,3,M1\nyesterday,3,M1\n", r"row 3: field gmt_create: time is not"),
        ("alibaba-genai-qps", "timestamp_anon,value,request_type\n10,nan,API\n", r"row 2: field value: QPS is not a finite number"),
        ("alibaba-gpu2023", "name,cpu_milli,memory_mib\np,1,1\n", r"field creation_time: missing column"),
        ("huawei", "day,time,28\n0,0,4\n0,1,NaN\n", r"row 3: field 28: request count is not a finite number"),
        ("huawei", "day,time,28\n0,-1,4\n", r"row 2: field time: time must be >= 0"),
    ],
)
def test_bad_files_are_rejected_with_file_row_and_column(tmp_path, kind, text, pattern) -> None:
    path = _csv(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError, match=pattern) as err:
        read_trace(kind, path, specs=SPECS)
    assert str(err.value).startswith(str(path))


def test_missing_and_garbage_files(tmp_path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        read_trace("azure2021", tmp_path / "absent.csv", specs=SPECS)
    gz = tmp_path / "bad.csv.gz"
    gz.write_bytes(gzip.compress(b"x" * 100)[:12])
    with pytest.raises(TraceError, match="cannot read"):
        read_trace("azure2021", gz, specs=SPECS)
    with pytest.raises(TraceError, match="unknown trace kind"):
        read_trace("nope", gz, specs=SPECS)
    with pytest.raises(TraceError, match="no per-request durations"):
        read_trace("huawei", _write_huawei(tmp_path / "h.csv", {"1": [1]}), trace_replay=True, specs=SPECS)


def test_quantile_draw_matches_per_row_interpolation() -> None:
    from loadgen.traces import _DUR_PCTS, _quantile_draw

    rng = np.random.default_rng(0)
    pts = np.sort(rng.random((50, len(_DUR_PCTS))) * 10, axis=1)
    q = rng.random(50)
    q[:3] = [0.0, 1.0, 0.5]
    x = np.asarray(_DUR_PCTS) / 100.0
    expected = [np.interp(q[i], x, pts[i]) for i in range(50)]
    assert np.allclose(_quantile_draw(q, pts, _DUR_PCTS), expected)


def test_window_keeps_one_day_then_compresses_it(any_trace) -> None:
    path = any_trace(GENAI)
    raw = pd.read_csv(path, usecols=["gmt_create"])
    secs = (pd.to_datetime(raw["gmt_create"]) - pd.to_datetime(raw["gmt_create"]).min()).dt.total_seconds()
    in_day = int(((secs >= 86400) & (secs < 2 * 86400)).sum())
    wl = read_trace("alibaba-genai", path, window_s=(86400, 2 * 86400), minutes=10, specs=SPECS, seed=0)
    assert len(wl) == in_day and wl.frame["t_s"].max() <= 600.0
    assert wl.metadata["time_compression"] == pytest.approx(600 / 86400)
    with pytest.raises(TraceError, match="after the trace ends"):
        read_trace("alibaba-genai", path, window_s=(1e9, 2e9), specs=SPECS)
