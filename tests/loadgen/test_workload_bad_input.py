"""Bad workload files are refused once, at read time, with one line naming the file and column;
``workload show`` picks round bins and reports the true 1 s peak; every write is atomic."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen.cli import bin_width, format_width, peak_count, summary_rows
from loadgen.errors import InputError
from loadgen.workload import WORKLOAD_SCHEMA, make_workload, read_workload, write_workload

runner = CliRunner()

LOOSE = pa.schema([pa.field(f.name, f.type, nullable=True) for f in WORKLOAD_SCHEMA])
"""The workload schema with nulls allowed, to write files that carry them."""

GOOD = {"t_s": [0.0, 0.5, 1.0], "function": ["float-ops"] * 3, "payload": ["{}"] * 3}


def _parquet(path: Path, columns: dict, schema: pa.Schema | None = None, metadata: dict | None = None) -> Path:
    table = pa.table(columns, schema=schema) if schema is not None else pa.table(columns)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path)
    return path


def _with(**changes) -> dict:
    return {**GOOD, **changes}


# (name, columns, schema or None, metadata or None, field the message must name, words it must contain)
BAD_TABLES = [
    ("t_s_text", _with(t_s=["0", "1", "2"]), None, None, "t_s", "type string"),
    ("t_s_bool", _with(t_s=[True, False, True]), None, None, "t_s", "type bool"),
    ("t_s_timestamp", _with(t_s=pa.array([1, 2, 3], pa.timestamp("s"))), None, None, "t_s", "type timestamp"),
    ("t_s_list", _with(t_s=[[1.0], [2.0], [3.0]]), None, None, "t_s", "type list"),
    ("missing_t_s", {"function": GOOD["function"], "payload": GOOD["payload"]}, None, None, "t_s", "missing column"),
    ("missing_payload", {"t_s": GOOD["t_s"], "function": GOOD["function"]}, None, None, "payload", "missing column"),
    ("no_rows", {"t_s": [], "function": [], "payload": []}, LOOSE, None, None, "no requests"),
    ("payload_not_json", _with(payload=["{}", "abc", "{}"]), LOOSE, None, "payload", "not JSON"),
    ("payload_a_list", _with(payload=["{}", "[1, 2]", "{}"]), LOOSE, None, "payload", "JSON object"),
    ("payload_null", _with(payload=["{}", None, "{}"]), LOOSE, None, "payload", "null"),
    ("payload_int", _with(payload=[1, 2, 3]), None, None, "payload", "type int64"),
    ("function_int", _with(function=[1, 2, 3]), None, None, "function", "type int64"),
    ("function_binary", _with(function=pa.array([b"\xff", b"a", b"b"], pa.binary())), None, None, "function", "type binary"),
    ("function_null", _with(function=["float-ops", None, "aes"]), LOOSE, None, "function", "null"),
    ("function_control", _with(function=["float-ops", "a\nb", "aes"]), LOOSE, None, "function", "printable"),
    ("t_s_nan", _with(t_s=[0.0, float("nan"), 1.0]), LOOSE, None, "t_s", "finite"),
    ("t_s_null", _with(t_s=[0.0, None, 1.0]), LOOSE, None, "t_s", "null"),
    ("t_s_negative", _with(t_s=[-1.0, 0.0, 1.0]), LOOSE, None, "t_s", ">= 0"),
    ("t_s_unsorted", _with(t_s=[0.0, 2.0, 1.0]), LOOSE, None, "t_s", "sorted"),
    ("t_s_epoch", _with(t_s=[1.7e9, 1.7e9 + 1, 1.7e9 + 2]), LOOSE, None, "t_s", "Unix timestamps"),
    ("metadata_not_json", GOOD, LOOSE, {b"scoretune": b"{nope"}, "scoretune", "not JSON"),
    ("metadata_a_list", GOOD, LOOSE, {b"scoretune": b"[1, 2]"}, "scoretune", "JSON object"),
    ("metadata_binary", GOOD, LOOSE, {b"scoretune": b"\xff\xfe"}, "scoretune", "not JSON"),
]


@pytest.mark.parametrize("name,columns,schema,metadata,field,words", BAD_TABLES, ids=[c[0] for c in BAD_TABLES])
def test_bad_tables_name_the_file_and_column(tmp_path, name, columns, schema, metadata, field, words) -> None:
    path = _parquet(tmp_path / f"{name}.parquet", columns, schema, metadata)
    with pytest.raises(InputError) as err:
        read_workload(path)
    assert str(err.value).startswith(str(path))
    assert err.value.field == field
    assert words in str(err.value)


def _raw_files(tmp_path: Path) -> dict[str, Path]:
    good = _parquet(tmp_path / "good.parquet", GOOD, WORKLOAD_SCHEMA)
    raw = good.read_bytes()
    files = {
        "truncated": (tmp_path / "truncated.parquet", raw[: len(raw) // 2]),
        "garbage": (tmp_path / "garbage.parquet", bytes(range(256)) * 8),
        "empty": (tmp_path / "empty.parquet", b""),
        "csv": (tmp_path / "wl.csv", b"t_s,function,payload\n0,float-ops,{}\n"),
    }
    for path, data in files.values():
        path.write_bytes(data)
    d = tmp_path / "dir.parquet"
    d.mkdir()
    return {**{k: p for k, (p, _) in files.items()}, "directory": d, "absent": tmp_path / "absent.parquet"}


@pytest.mark.parametrize("kind,words", [
    ("truncated", "truncated"), ("garbage", "not a readable Parquet"), ("empty", "empty"),
    ("csv", "from-trace"), ("directory", "directory"), ("absent", "no such workload file"),
])
def test_unreadable_files_are_one_clear_error(tmp_path, kind, words) -> None:
    path = _raw_files(tmp_path)[kind]
    with pytest.raises(InputError) as err:
        read_workload(path)
    assert str(err.value).startswith(str(path)) and words in str(err.value)
    assert "\n" not in str(err.value)


def test_accepted_column_types(tmp_path) -> None:
    """Integer and float32 times, large and dictionary-encoded strings, extra columns: all fine."""
    variants = {
        "int": _with(t_s=[0, 1, 2]),
        "f32": _with(t_s=pa.array([0, 1, 2], pa.float32())),
        "large": _with(function=pa.array(GOOD["function"], pa.large_string()),
                       payload=pa.array(GOOD["payload"], pa.large_string())),
        "dict": _with(function=pa.array(GOOD["function"]).dictionary_encode()),
        "extra": _with(extra=[1, 2, 3]),
    }
    for name, cols in variants.items():
        wl = read_workload(_parquet(tmp_path / f"{name}.parquet", cols))
        assert len(wl) == 3 and wl.frame["t_s"].dtype == np.float64 and wl.functions == ["float-ops"], name


@pytest.mark.parametrize("argv", [
    ["workload", "show", "{wl}", "--png", "{tmp}/p.png"],
    ["replay", "{wl}", "--target", "http://127.0.0.1:9/", "--out", "{tmp}/run"],
    ["sim", "run", "--cluster", "lab-small", "--workload", "{wl}", "--out", "{tmp}/run"],
], ids=["show", "replay", "sim-run"])
@pytest.mark.parametrize("case", ["t_s_text", "payload_not_json", "metadata_not_json", "no_rows"])
def test_every_command_reading_a_workload_refuses_it_in_one_line(tmp_path, argv, case) -> None:
    _, columns, schema, metadata, field, words = next(c for c in BAD_TABLES if c[0] == case)
    wl = _parquet(tmp_path / "bad.parquet", columns, schema, metadata)
    r = runner.invoke(app, [a.format(wl=wl, tmp=tmp_path) for a in argv])
    assert r.exit_code == 1, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {wl}") and words in lines[0], r.output
    if field:
        assert f"field {field}" in lines[0]
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "run" / "summary.json").exists()


def test_write_refuses_a_directory_and_an_empty_workload_and_leaves_no_temp(tmp_path) -> None:
    wl = make_workload([0.0, 1.0], ["float-ops", "aes"])
    with pytest.raises(InputError, match="is a directory"):
        write_workload(wl, tmp_path)
    with pytest.raises(InputError, match="no requests"):
        write_workload(make_workload([], []), tmp_path / "empty.parquet")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="cannot create"):
        write_workload(wl, blocker / "w.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path, monkeypatch) -> None:
    path = write_workload(make_workload([0.0], ["aes"]), tmp_path / "w.parquet")
    before = path.read_bytes()

    def broken(table, where, **kw):
        Path(where).write_bytes(b"PAR1 half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(InputError, match="No space left"):
        write_workload(make_workload([0.0, 1.0], ["aes", "aes"]), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["w.parquet"]


def test_bin_widths_are_round() -> None:
    assert [bin_width(d) for d in (0.5, 10, 120, 600, 3600, 86400, 14 * 86400)] == [
        0.005, 0.05, 1.0, 5.0, 30.0, 600.0, 7200.0]
    assert bin_width(400 * 86400) == 2 * 86400.0
    assert [format_width(w) for w in (0.05, 1.0, 30.0, 60.0, 300.0, 3600.0, 172800.0)] == [
        "0.05 s", "1 s", "30 s", "1 min", "5 min", "1 h", "2 d"]


def test_peak_is_the_most_requests_in_any_one_second() -> None:
    # 50 requests in 0.4 s straddling a bin edge at 60 s, inside 600 s of 1/s background
    burst = 59.8 + np.linspace(0.0, 0.4, 50)
    t = np.sort(np.concatenate([np.arange(0.0, 600.0, 1.0) + 0.5, burst]))
    assert peak_count(t) == 51  # the burst plus the one background arrival at 59.5 .. 60.5
    wl = make_workload(t, ["aes"] * t.size, metadata={"duration_s": 600.0})
    rows = dict(summary_rows(wl))
    assert rows["peak rate (req/s, any 1 s)"] == "51"  # the old 3 s bins reported about 17.7
    assert rows["plot bins"] == "5 s"


def test_show_fits_80_columns_and_keeps_function_names_whole(tmp_path) -> None:
    names = ["float-ops", "gzip-compress", "dynamic-html", "thumbnailer", "json-serde", "trace-driven"]
    t = np.linspace(0.0, 120.0, 600)
    wl = write_workload(make_workload(t, [names[i % len(names)] for i in range(t.size)]), tmp_path / "w.parquet")
    r = runner.invoke(app, ["workload", "show", str(wl), "--png", str(tmp_path / "rate.png")], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    table = [line for line in r.output.splitlines() if line[:1] in "┌│└┏┃┡"]  # the paths may be longer
    assert len(table) > 10 and max(len(line.rstrip()) for line in table) <= 80
    for name in names:
        assert f" {name} " in r.output
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("│┃").split("│")] for line in table)}
    assert rows["peak rate (req/s, any 1 s)"] == ["5"] and rows["plot bins"] == ["1 s"]
    assert rows["float-ops"] == ["100", "16.7%", "1"]  # requests, share, its own 1 s peak
    assert (tmp_path / "rate.png").read_bytes()[:4] == b"\x89PNG"


def test_show_refuses_a_png_directory_before_reading(tmp_path) -> None:
    wl = write_workload(make_workload([0.0, 1.0], ["aes", "aes"]), tmp_path / "w.parquet")
    (tmp_path / "plots").mkdir()
    r = runner.invoke(app, ["workload", "show", str(wl), "--png", str(tmp_path / "plots")])
    assert r.exit_code == 1 and "is a directory" in r.output and "unexpected" not in r.output
    assert list((tmp_path / "plots").iterdir()) == []


def test_metadata_round_trip_is_unchanged(tmp_path) -> None:
    wl = make_workload([0.0, 1.0], ["aes", "aes"], [{"x": 1}, {}], metadata={"seed": 3, "name": "n"})
    back = read_workload(write_workload(wl, tmp_path / "w.parquet"))
    assert back.metadata == {"seed": 3, "name": "n"}
    assert [json.loads(p) for p in back.frame["payload"]] == [{"x": 1}, {}]


@pytest.mark.parametrize("declared", ["abc", float("nan"), 1e300, [1, 2]])
def test_show_ignores_a_nonsense_declared_duration(tmp_path, declared) -> None:
    """Metadata comes from the file: a bad ``duration_s`` there falls back to the last arrival."""
    wl = make_workload([0.0, 10.0], ["aes", "aes"], metadata={"duration_s": declared})
    path = write_workload(wl, tmp_path / "w.parquet")
    r = runner.invoke(app, ["workload", "show", str(path), "--png", str(tmp_path / "r.png")])
    assert r.exit_code == 0, r.output
    assert dict(summary_rows(read_workload(path)))["duration (s)"] == "10.0"
