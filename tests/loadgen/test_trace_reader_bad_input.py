"""Trace readers on broken files (written here, in tmp_path): one TraceError naming the file, and
the row or column when known; never a numpy/pandas exception, never an output file."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agent.cli import app
from functions.spec import parse_spec
from loadgen.errors import TraceError
from loadgen.traces import KINDS, MAX_REQUESTS, read_trace

runner = CliRunner()

SPECS = {
    "fast": parse_spec({
        "name": "fast", "handler": "m:f", "image": {"name": "img", "size": "10Mi"},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "cold_start": {"start_s": 0.5, "init_s": 0.1},
        "work": {"cpu_s": {"mean": 0.01, "cv": 0.5}, "memory": "10Mi"},
    })
}

HEADERS = {
    "alibaba-genai": "gmt_create,exec_time_seconds,checkpoint_model_version_id",
    "alibaba-genai-qps": "timestamp_anon,value,request_type",
    "alibaba-gpu2023": "name,cpu_milli,memory_mib,creation_time",
    "azure2019": "HashOwner,HashApp,HashFunction,Trigger,1,2,3",
    "azure2021": "app,func,end_timestamp,duration",
    "huawei": "day,time,1,2",
}
AZ21 = HEADERS["azure2021"] + "\n" + "".join(f"a{i % 3},f{i % 2},{10 + i * 0.5},{0.1 + i * 0.01}\n" for i in range(40))


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("kind", sorted(HEADERS))
def test_a_header_without_rows_is_refused_for_every_kind(tmp_path, kind) -> None:
    path = _write(tmp_path / f"{kind}.csv", HEADERS[kind] + "\n")
    with pytest.raises(TraceError, match="header but no data rows") as err:
        read_trace(kind, path, specs=SPECS)
    assert str(err.value).startswith(str(path))


def _broken_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, words the error must contain)."""
    gz = gzip.compress(AZ21.encode() * 400)
    big_header = HEADERS["azure2021"] + "\n"
    return {
        "truncated_gzip": (_write(tmp_path / "cut.csv.gz", gz[: len(gz) // 2]), "truncated or corrupt .gz"),
        "truncated_bz2": (_write(tmp_path / "cut.csv.bz2", bz2.compress(AZ21.encode() * 400)[:300]), "truncated or corrupt .bz2"),
        "not_gzip": (_write(tmp_path / "fake.csv.gz", AZ21), "cannot read"),
        "gzip_not_named_gz": (_write(tmp_path / "hidden.csv", gz), "rename it to hidden.csv.gz"),
        "gzip_of_binary": (_write(tmp_path / "bin.csv.gz", gzip.compress(bytes(range(256)) * 40)), "binary file"),
        "binary": (_write(tmp_path / "garbage.csv", bytes(range(256)) * 40), "binary file"),
        "latin1": (_write(tmp_path / "latin.csv", (big_header + "\xe9t\xe9,f,10,0.1\n").encode("latin-1")), "not UTF-8"),
        "nul_in_cell": (_write(tmp_path / "nul.csv", big_header.encode() + b"a\x00,f,10,0.1\n"), "NUL byte"),
        "empty": (_write(tmp_path / "empty.csv", ""), "empty"),
        "blank_lines": (_write(tmp_path / "blank.csv", "\n \n\n"), "empty"),
        "longer_first_row": (_write(tmp_path / "ragged.csv", big_header + "a,f,10,0.1,9,9\n"), "more fields than the header"),
        "longer_later_row": (_write(tmp_path / "ragged2.csv", big_header + "a,f,10,0.1\na,f,11,0.1,9\n"), "line 3"),
        "parquet": (tmp_path / "wl.parquet", "a Parquet file"),
        "directory": (tmp_path / "adir", "is a directory"),
    }


BROKEN = [
    "truncated_gzip", "truncated_bz2", "not_gzip", "gzip_not_named_gz", "gzip_of_binary", "binary", "latin1",
    "nul_in_cell", "empty", "blank_lines", "longer_first_row", "longer_later_row", "parquet", "directory",
]


@pytest.mark.parametrize("name", BROKEN)
def test_broken_files_are_one_line_naming_the_file(tmp_path, name) -> None:
    pq.write_table(pa.table({"t_s": [0.0]}), tmp_path / "wl.parquet")
    (tmp_path / "adir").mkdir()
    files = _broken_files(tmp_path)
    assert sorted(files) == sorted(BROKEN)
    path, words = files[name]
    with pytest.raises(TraceError) as err:
        read_trace("azure2021", path, specs=SPECS)
    message = str(err.value)
    assert message.startswith(str(path)) and words in message and "\n" not in message, message


def test_the_line_of_a_ragged_row_is_reported(tmp_path) -> None:
    path = _write(tmp_path / "r.csv", HEADERS["azure2021"] + "\na,f,10,0.1\na,f,11,0.1\na,f,12,0.1,7\n")
    with pytest.raises(TraceError) as err:
        read_trace("azure2021", path, specs=SPECS)
    assert err.value.row == 4


@pytest.mark.parametrize("row,field,words", [
    ("a,f,10,abc", "duration", "not a finite number: 'abc'"),
    ("a,f,yesterday,0.1", "end_timestamp", "not a finite number"),
    ("a,f,10,-0.5", "duration", "must be >= 0, got -0.5"),
    ("a,f,1e400,0.1", "end_timestamp", "not a finite number"),
    ("a,f,,0.1", "end_timestamp", "is empty"),
])
def test_wrong_cell_types_name_the_line_and_column(tmp_path, row, field, words) -> None:
    path = _write(tmp_path / "t.csv", HEADERS["azure2021"] + "\na,f,1,0.1\n" + row + "\n")
    with pytest.raises(TraceError) as err:
        read_trace("azure2021", path, specs=SPECS)
    assert err.value.row == 3 and err.value.field == field and words in str(err.value)
    assert "np.float64" not in str(err.value)


def test_an_absurd_qps_is_refused_before_drawing(tmp_path) -> None:
    path = _write(tmp_path / "qps.csv", HEADERS["alibaba-genai-qps"] + "\n0,1e15,a\n60,3,a\n")
    with pytest.raises(TraceError, match=f"over the {MAX_REQUESTS} limit; lower --rate-scale") as err:
        read_trace("alibaba-genai-qps", path, specs=SPECS)
    assert str(err.value).startswith(str(path))


def test_unknown_kind_lists_the_known_ones(tmp_path) -> None:
    path = _write(tmp_path / "t.csv", AZ21)
    with pytest.raises(TraceError) as err:
        read_trace("azure2099", path, specs=SPECS)
    assert all(k in str(err.value) for k in KINDS)


def test_from_trace_cli_names_the_options_and_leaves_no_output(tmp_path) -> None:
    trace = _write(tmp_path / "t.csv", AZ21)
    out = tmp_path / "w.parquet"
    cases = [
        (["--window", "1000,2000"], "field --window: window starts at 1000 s, after the trace ends"),
        (["--window", "5,1"], "field --window: "),
        (["--minutes", "0"], "field --minutes: "),
        (["--rate-scale", "1e12"], "field --rate-scale: "),
        (["--functions", "nope"], "field --functions: unknown suite function"),
    ]
    for extra, words in cases:
        args = ["workload", "from-trace", "azure2021", str(trace), "-o", str(out)]
        r = runner.invoke(app, args + (extra if "--functions" in extra else ["--functions", "float-ops", *extra]))
        assert r.exit_code == 1 and words in r.output, (extra, r.output)
        assert not out.exists()
    r = runner.invoke(app, ["workload", "from-trace", "azure2099", str(trace), "-o", str(out)])
    assert r.exit_code == 1 and "field KIND: unknown trace kind" in r.output and "azure2021" in r.output
    r = runner.invoke(app, ["workload", "from-trace", "azure2021", str(trace), "--functions", "float-ops", "-o", str(tmp_path)])
    assert r.exit_code == 1 and f"Error: {tmp_path}: is a directory" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
