"""The shared runtime on a real uvicorn server bound to 127.0.0.1: the Knative container contract
(health, readiness, graceful SIGTERM), the X-Scoretune-* headers and the concurrency limit."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from functions.errors import FunctionsError
from functions.process import free_port, get_json, serving, start_runtime, wait_ready
from functions.runtime import FunctionApp, build_app, concurrency_from_env, load_runtime_config

PROBE_MODULE = "scoretune_probe_handler"


def post(port: int, path: str = "/", body: bytes | str = b"", timeout_s: float = 30.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def served(instance: FunctionApp) -> contextlib.AbstractContextManager[int]:
    """``instance`` on a real uvicorn server in a thread of this process."""
    return serving(instance.app)


@pytest.fixture()
def probe_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A functions root with one function whose handler records how many requests overlap."""
    (tmp_path / f"{PROBE_MODULE}.py").write_text(
        textwrap.dedent(
            """
            import threading, time
            lock = threading.Lock()
            current = 0
            peak = 0
            warmed = threading.Event()
            release = threading.Event()
            barrier = None
            fail = False

            def warm():
                release.wait(30)
                if fail:
                    raise RuntimeError("warm-up failed")
                warmed.set()

            def handle(payload):
                global current, peak
                with lock:
                    current += 1
                    peak = max(peak, current)
                try:
                    if barrier is not None:
                        barrier.wait(10)
                    time.sleep(payload.get("sleep_s", 0.0))
                finally:
                    with lock:
                        current -= 1
                return {"ok": True, "payload": payload}
            """
        )
    )
    fn = tmp_path / "probe_fn"
    fn.mkdir()
    (fn / "spec.yaml").write_text(
        f"name: probe-fn\nhandler: {PROBE_MODULE}:handle\ncontainer_concurrency: 2\npayload: {{sleep_s: 0.05}}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys

    sys.modules.pop(PROBE_MODULE, None)
    module = importlib.import_module(PROBE_MODULE)
    module.release.set()
    return tmp_path


def probe_module():
    import sys

    return sys.modules[PROBE_MODULE]


@pytest.fixture(scope="module")
def float_ops_instance() -> Iterator[int]:
    port = free_port()
    proc = start_runtime("float-ops", port, env={"NODE_NAME": "node-a"})
    try:
        wait_ready(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def test_health_and_readiness_of_a_subprocess_instance(float_ops_instance: int) -> None:
    status, health = get_json(float_ops_instance, "/healthz")
    assert status == 200 and health["status"] == "ok" and health["function"] == "float-ops"
    assert health["concurrency"] == 1  # the spec's containerConcurrency
    assert get_json(float_ops_instance, "/readyz") == (200, {"status": "ready", "function": "float-ops"})


def test_first_request_is_cold_then_warm_and_node_is_reported(float_ops_instance: int) -> None:
    status, headers, body = post(float_ops_instance, "/", b"")
    assert status == 200 and body["n"] == 200_000  # an empty body means the spec's default payload
    assert headers["x-scoretune-cold-start"] == "true" and headers["x-scoretune-node"] == "node-a"
    status, headers, body = post(float_ops_instance, "/invoke", json.dumps({"n": 10}))
    assert status == 200 and body["n"] == 10
    assert headers["x-scoretune-cold-start"] == "false"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "body is not JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"n": -3}', "payload.n must be"),
    ],
)
def test_bad_requests_are_400_with_a_reason(float_ops_instance: int, body: bytes, message: str) -> None:
    status, headers, out = post(float_ops_instance, "/", body)
    assert status == 400 and message in out["error"]
    assert "x-scoretune-cold-start" in headers


def test_get_on_the_invoke_route_is_405(float_ops_instance: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", float_ops_instance, timeout=10)
    conn.request("GET", "/")
    assert conn.getresponse().status == 405
    conn.close()


def test_not_ready_until_the_handler_is_warmed(probe_root: Path) -> None:
    module = probe_module()
    module.release.clear()
    instance = build_app("probe-fn", root=probe_root, environ={})
    with served(instance) as port:
        status, body = get_json(port, "/readyz")
        assert status == 503 and body["status"] == "starting"
        assert get_json(port, "/healthz")[1]["ready"] is False
        with ThreadPoolExecutor(1) as pool:
            early = pool.submit(post, port, "/", b"{}")  # arrives during warm-up: waits, then runs
            deadline = time.monotonic() + 10
            while get_json(port, "/healthz")[1]["in_flight"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert not early.done()
            module.release.set()
            status, headers, _ = early.result(timeout=30)
        assert status == 200 and headers["x-scoretune-cold-start"] == "true"
        assert module.warmed.wait(10)
        deadline = time.monotonic() + 10
        while get_json(port, "/readyz")[0] != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_container_concurrency_limits_requests_in_the_handler(probe_root: Path) -> None:
    module = probe_module()
    module.barrier = threading.Barrier(2)  # a limit below 2 would time out and fail the requests
    instance = build_app("probe-fn", root=probe_root, environ={"CONTAINER_CONCURRENCY": "2"})
    assert instance.concurrency == 2
    with served(instance) as port, ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: post(port, "/", json.dumps({"sleep_s": 0.1})), range(6)))
    assert [r[0] for r in results] == [200] * 6
    assert module.peak == 2


def test_concurrency_zero_is_unbounded(probe_root: Path) -> None:
    module = probe_module()
    module.barrier = threading.Barrier(6)  # passes only if all six run at once
    instance = build_app("probe-fn", root=probe_root, environ={"CONTAINER_CONCURRENCY": "0"})
    with served(instance) as port, ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: post(port, "/", b"{}"), range(6)))
    assert [r[0] for r in results] == [200] * 6 and module.peak == 6
    assert results[0][2]["payload"] == {"sleep_s": 0.05}


def test_a_handler_that_cannot_load_is_reported_not_hidden(probe_root: Path) -> None:
    (probe_root / "broken_fn").mkdir()
    (probe_root / "broken_fn" / "spec.yaml").write_text(
        "name: broken-fn\nhandler: no_such_module_xyz:handle\n"
    )
    instance = build_app("broken-fn", root=probe_root, environ={})
    with served(instance) as port:
        deadline = time.monotonic() + 10
        while instance.load_error is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        status, body = get_json(port, "/readyz")
        assert status == 503 and "no_such_module_xyz" in body["error"]
        assert post(port, "/", b"{}")[0] == 503


def test_a_request_waiting_for_a_warm_up_that_fails_gets_503_at_once(probe_root: Path) -> None:
    module = probe_module()
    module.release.clear()
    module.fail = True
    instance = build_app("probe-fn", root=probe_root, environ={})
    with served(instance) as port, ThreadPoolExecutor(1) as pool:
        early = pool.submit(post, port, "/", b"{}", 20.0)
        deadline = time.monotonic() + 10
        while get_json(port, "/healthz")[1]["in_flight"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        module.release.set()
        status, _, body = early.result(timeout=30)
    assert status == 503 and "warm-up failed" in body["error"]


def test_sigterm_drains_the_request_in_flight_then_exits() -> None:
    port = free_port()
    proc = start_runtime("trace-driven", port)
    try:
        wait_ready(port, proc)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(post, port, "/", json.dumps({"cpu_s": 0, "memory_bytes": 0, "io_s": 1.0}))
            deadline = time.monotonic() + 10
            while get_json(port, "/healthz")[1]["in_flight"] < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            status, _, body = pending.result(timeout=30)
        assert status == 200 and body["io_s"] == 1.0
        assert proc.wait(30) == 0
        with pytest.raises(OSError):
            get_json(port, "/healthz", timeout_s=1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_unknown_function_lists_the_known_ones() -> None:
    with pytest.raises(FunctionsError, match=r"unknown function 'nope'; known: .*float-ops"):
        load_runtime_config("nope")


@pytest.mark.parametrize("raw", ["-1", "1001", "two"])
def test_container_concurrency_env_is_range_checked(raw: str) -> None:
    config = load_runtime_config("float-ops")
    with pytest.raises(FunctionsError, match="CONTAINER_CONCURRENCY must be an integer 0..1000"):
        concurrency_from_env(config, {"CONTAINER_CONCURRENCY": raw})
    assert (
        concurrency_from_env(config, {}) == 1
        and concurrency_from_env(config, {"CONTAINER_CONCURRENCY": "7"}) == 7
    )


def test_the_runtimes_light_spec_reader_agrees_with_the_full_parser() -> None:
    from functions.spec import discover_specs

    for name, spec in discover_specs().items():
        config = load_runtime_config(name)
        assert (config.handler, config.payload, config.container_concurrency) == (
            spec.handler,
            spec.payload,
            spec.container_concurrency,
        )
