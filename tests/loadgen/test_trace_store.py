"""``scoretune traces``: fetch, resume, verify and locate, end to end against an HTTP server the test
starts on 127.0.0.1, serving fixture files in each trace's published format with their checksums.
No test here reaches any other address: every URL of the registry under test is rewritten to it."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from trace_fixtures import download_bytes, fixture_bytes
from typer.testing import CliRunner

from agent.cli import app
from loadgen import trace_store
from loadgen.errors import TraceError

pytestmark = pytest.mark.traces
runner = CliRunner()


@dataclass
class Served:
    """What the test server holds and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    drop_first: set[str] = field(default_factory=set)  # cut the first response of these halfway
    ranges: list[tuple[str, str | None]] = field(default_factory=list)


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep pytest's output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = served.files.get(self.path)
            rng = self.headers.get("Range")
            served.ranges.append((self.path, rng))
            if body is None:
                self.send_error(404)
                return
            start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
            if start >= len(body):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206 if rng else 200)
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            chunk = body[start:]
            if self.path in served.drop_first:
                served.drop_first.discard(self.path)
                self.wfile.write(chunk[: len(chunk) // 2])
                self.wfile.flush()
                self.connection.close()  # the rest never comes: the client sees a short read
                return
            self.wfile.write(chunk)

    return Handler


@pytest.fixture()
def server() -> Iterator[tuple[str, Served]]:
    served = Served()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture()
def local(server, tmp_path, monkeypatch) -> tuple[Path, Served, Path]:
    """The shipped registry with every file served locally (fixture content, its own checksums);
    ``$SCORETUNE_TRACES`` is an empty directory. Returns (registry file, served, trace dir)."""
    base, served = server
    shipped = trace_store.load_registry()
    doc: dict = {"traces": {}, "manual": {k: v.model_dump() for k, v in shipped.manual.items()}}
    for name, trace in shipped.traces.items():
        files = []
        for f in trace.files:
            content = fixture_bytes(f)
            body = download_bytes(f, content)
            url_path = f"/{name}/{Path(f.url).name}"
            served.files[url_path] = body
            entry = {"path": f.path, "url": base + url_path, "size": len(body),
                     "sha256": hashlib.sha256(body).hexdigest(), "aliases": list(f.aliases)}
            if f.member:
                entry |= {"member": f.member, "unpacked_size": len(content),
                          "unpacked_sha256": hashlib.sha256(content).hexdigest()}
            files.append(entry)
        doc["traces"][name] = {**trace.model_dump(exclude={"files"}), "files": files}
    reg = tmp_path / "registry.yaml"
    reg.write_text(yaml.safe_dump(doc, sort_keys=False))
    traces = tmp_path / "traces"
    monkeypatch.setenv("SCORETUNE_TRACES", str(traces))
    return reg, served, traces


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_fetch_all_stores_every_file_verified_and_scenarios_read_them(local, tmp_path):
    reg, served, traces = local
    r = runner.invoke(app, ["traces", "fetch", "--all", "--registry", str(reg)])
    assert r.exit_code == 0, r.output
    registry = trace_store.load_registry(reg)
    expected = {f.path for t in registry.traces.values() for f in t.files}
    assert _files(traces) == expected  # nothing else: no archive, no .part, no temporary file
    for t in registry.traces.values():
        for f in t.files:
            assert (traces / f.path).read_bytes() == fixture_bytes(f)  # qps: unpacked from its tar.gz
    r = runner.invoke(app, ["traces", "verify", "--registry", str(reg)])
    assert r.exit_code == 0, r.output
    assert f"{len(expected)} file(s) verified, 0 missing" in r.output
    # a second fetch downloads nothing: every file is present and intact
    before = len(served.ranges)
    assert runner.invoke(app, ["traces", "fetch", "--all", "--registry", str(reg)]).exit_code == 0
    assert len(served.ranges) == before
    # the scenario library finds the fetched trace (the held-out Azure 2021 scenario)
    from testbed.scenarios import build_workload, get_scenario

    wl = build_workload(get_scenario("homog-azure21"), cache=tmp_path / "cache")
    assert len(wl) > 100


def test_a_checksum_mismatch_names_the_file_and_stores_nothing(local):
    reg, served, traces = local
    url_path = "/azure2021-invitro-sample/Azure2021_200.csv"
    served.files[url_path] = served.files[url_path].replace(b",", b";", 1)  # same size, other bytes
    r = runner.invoke(app, ["traces", "fetch", "azure2021-invitro-sample", "--registry", str(reg)])
    assert r.exit_code == 1
    assert "azure/azure2021_first199_invocations_invitro.csv" in r.output and "checksum mismatch" in r.output
    assert "Traceback" not in r.output
    assert _files(traces) == set()  # no half-written file where the good one would be, no leftover part


def test_an_interrupted_download_resumes_with_a_range_request(local):
    reg, served, traces = local
    url_path = "/alibaba-gpu2023-pods/openb_pod_list_default.csv"
    served.drop_first.add(url_path)
    r = runner.invoke(app, ["traces", "fetch", "alibaba-gpu2023-pods", "--registry", str(reg)])
    assert r.exit_code == 0, r.output
    seen = [rng for path, rng in served.ranges if path == url_path]
    half = len(served.files[url_path]) // 2
    assert len(seen) == 2 and seen[0] is None
    # the second request asks only for the rest (what arrived, less at most the chunk in flight)
    assert seen[1] is not None and 0 < int(seen[1].removeprefix("bytes=").rstrip("-")) <= half
    f = trace_store.load_registry(reg).traces["alibaba-gpu2023-pods"].files[0]
    assert trace_store.content_sha256(traces / f.path) == f.sha256


def test_a_partial_file_from_an_earlier_run_is_resumed(local):
    reg, served, traces = local
    registry = trace_store.load_registry(reg)
    f = registry.traces["azure2021-invitro-sample"].files[0]
    body = served.files["/azure2021-invitro-sample/Azure2021_200.csv"]
    part = traces / trace_store.PARTIAL / (f.path.replace("/", "__") + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(body[:1000])
    trace_store.fetch("azure2021-invitro-sample", registry, progress=False)
    assert served.ranges == [("/azure2021-invitro-sample/Azure2021_200.csv", "bytes=1000-")]
    assert (traces / f.path).read_bytes() == body and not part.exists()


def test_a_server_error_is_one_line_and_stores_nothing(local):
    reg, served, traces = local
    del served.files["/alibaba-genai2026-qps/qps.tar.gz"]
    r = runner.invoke(app, ["traces", "fetch", "alibaba-genai2026-qps", "--registry", str(reg)])
    assert r.exit_code == 1 and "download failed" in r.output and "404" in r.output
    assert "Traceback" not in r.output
    assert not (traces / "alibaba" / "genai2026_qps.csv").exists()


def test_an_archive_without_its_member_is_an_error(local, tmp_path):
    reg, served, traces = local
    doc = yaml.safe_load(reg.read_text())
    doc["traces"]["alibaba-genai2026-qps"]["files"][0]["member"] = "not-there.csv"
    reg.write_text(yaml.safe_dump(doc))
    r = runner.invoke(app, ["traces", "fetch", "alibaba-genai2026-qps", "--registry", str(reg)])
    assert r.exit_code == 1 and "no member 'not-there.csv'" in r.output
    assert _files(traces) == set()


def test_verify_catches_a_changed_file(local):
    reg, served, traces = local
    assert runner.invoke(app, ["traces", "fetch", "azure2019-invitro-extremes", "--registry", str(reg)]).exit_code == 0
    target = traces / "azure" / "azure2019_invitro_mapper_extremes" / "durations.csv"
    target.write_bytes(target.read_bytes() + b"\n")
    r = runner.invoke(app, ["traces", "verify", "azure2019-invitro-extremes", "--registry", str(reg)])
    assert r.exit_code == 1 and "mismatch" in r.output and str(target) in r.output
    # fetch replaces the damaged file with a good one
    assert runner.invoke(app, ["traces", "fetch", "azure2019-invitro-extremes", "--registry", str(reg)]).exit_code == 0
    assert runner.invoke(app, ["traces", "verify", "azure2019-invitro-extremes", "--registry", str(reg)]).exit_code == 0


def test_verify_of_a_named_missing_trace_fails_and_says_what_to_fetch(local):
    reg, _, _ = local
    r = runner.invoke(app, ["traces", "verify", "alibaba-gpu2023-nodes", "--registry", str(reg)])
    assert r.exit_code == 1 and "traces fetch alibaba-gpu2023-nodes" in r.output


def test_list_reports_the_trace_directory_and_what_is_present(local):
    reg, _, traces = local
    assert runner.invoke(app, ["traces", "fetch", "alibaba-gpu2023-nodes", "--registry", str(reg)]).exit_code == 0
    r = runner.invoke(app, ["traces", "list", "--registry", str(reg)])
    assert r.exit_code == 0 and f"trace directory: {traces}" in r.output
    assert "alibaba-gpu2023-nodes  [present]" in r.output and "alibaba-gpu2023-pods  [missing]" in r.output
    assert "azure2019-full" in r.output  # the releases fetched by hand are listed with their source


@pytest.mark.parametrize(("args", "message"), [
    (["traces", "fetch", "no-such-trace"], "unknown trace 'no-such-trace'; known: alibaba-genai2026-qps"),
    (["traces", "fetch", "azure2019-full"], "no pinned checksum"),
    (["traces", "fetch"], "name a trace to fetch or pass --all"),
    (["traces", "fetch", "--all", "alibaba-gpu2023-nodes"], "not both"),
])
def test_fetch_refuses_bad_names_before_downloading(args, message, tmp_path, monkeypatch):
    monkeypatch.setenv("SCORETUNE_TRACES", str(tmp_path / "traces"))
    r = runner.invoke(app, args)
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "traces").exists()


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not UTF-8"),
    (b"traces: [1, 2", "not valid YAML"),
    (b"- a list\n", "field (top level)"),
    (b"traces:\n  x:\n    description: d\n    source: s\n    files:\n      - {path: a.csv, url: 'ftp://h/a', size: 1, sha256: "
     + b"0" * 64 + b"}\n", "field traces.x.files.0.url"),
    (b"traces:\n  x:\n    description: d\n    source: s\n    files:\n      - {path: a.csv, url: 'http://h/a', size: 1, sha256: abc}\n",
     "field traces.x.files.0.sha256"),
])
def test_a_bad_registry_file_names_the_field(content, message, tmp_path):
    reg = tmp_path / "reg.yaml"
    reg.write_bytes(content)
    r = runner.invoke(app, ["traces", "list", "--registry", str(reg)])
    assert r.exit_code == 1 and message in r.output and str(reg) in r.output


def test_a_missing_scenario_trace_names_the_fetch_command(tmp_path, monkeypatch):
    from testbed.scenarios import build_workload, get_scenario

    monkeypatch.setenv("SCORETUNE_TRACES", str(tmp_path))
    with pytest.raises(TraceError, match=r"azure/azure2021_first199_invocations_invitro.csv: trace file not found "
                                         r".*run `scoretune traces fetch azure2021-invitro-sample`"):
        build_workload(get_scenario("homog-azure21"), cache=tmp_path / "cache")


def test_the_pinned_checksums_match_the_real_traces_where_present(real_trace):
    """The shipped registry against the real files (skipped per file when absent): a gzip'd copy
    under an alias verifies by its decompressed bytes."""
    registry = trace_store.load_registry()
    for trace in registry.traces.values():
        for f in trace.files:
            path = real_trace(f.path)
            assert trace_store.content_sha256(path) == f.stored_sha256, path


def test_path_prints_the_fetched_files_and_names_the_fetch_command_when_missing(local):
    reg, _, traces = local
    r = runner.invoke(app, ["traces", "path", "azure2021-invitro-sample", "--registry", str(reg)])
    assert r.exit_code == 1 and "run `scoretune traces fetch azure2021-invitro-sample`" in r.output
    assert runner.invoke(app, ["traces", "fetch", "azure2021-invitro-sample", "--registry", str(reg)]).exit_code == 0
    r = runner.invoke(app, ["traces", "path", "azure2021-invitro-sample", "--registry", str(reg)])
    assert r.exit_code == 0
    assert r.output.strip() == str(traces / "azure" / "azure2021_first199_invocations_invitro.csv")
