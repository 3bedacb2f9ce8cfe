"""Every handler does its real work at a small payload, and every spec describes it faithfully."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from functions.payload import PayloadError
from functions.runtime import import_handler
from functions.spec import discover_specs, load_spec, parse_spec, spec_to_dict

SPECS = discover_specs()


def handler(name: str):
    return import_handler(SPECS[name].handler)[0]


def test_suite_has_at_least_eight_distinct_functions() -> None:
    assert len(SPECS) >= 8
    images = [s.image for s in SPECS.values()]
    assert len(set(images)) == len(images), "each function has its own image, so ImageLocality matters"
    assert {"cpu", "memory", "io"} <= {s.shape for s in SPECS.values()}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_file_parses_round_trips_and_names_its_directory(name: str) -> None:
    spec = SPECS[name]
    assert spec.path is not None and spec.path.parent.name == name.replace("-", "_")
    assert spec.handler == f"functions.{spec.path.parent.name}.handler:handle"
    assert parse_spec(spec_to_dict(spec)) == parse_spec(spec_to_dict(load_spec(spec.path)))
    fn, module = import_handler(spec.handler)
    assert callable(fn) and module.__doc__, "every handler module says what it measures and why"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_spec_resources_are_realistic_and_fit_the_measured_function(name: str) -> None:
    spec = SPECS[name]
    assert 60 * 2**20 <= spec.image_size_bytes <= 400 * 2**20
    assert 0 <= spec.container_concurrency <= 4
    assert spec.autoscaling.initial_scale >= 1, "Knative rejects initial-scale 0 by default"
    m = spec.measured
    assert m is not None, "run `scoretune functions profile --refit` to calibrate the spec"
    # The simulator executes work_cpu_s: it must be what the handler costs at its default payload.
    assert spec.work_cpu_s.mean == pytest.approx(m.cpu_s_p50, rel=0.25)
    # An idle instance plus one request's memory fits the memory limit, and an idle one the request.
    assert m.baseline_rss_bytes + m.peak_memory_bytes <= spec.memory_limit_bytes
    assert m.baseline_rss_bytes <= spec.memory_request_bytes


def test_service_times_span_ten_milliseconds_to_two_seconds() -> None:
    means = [s.work_cpu_s.mean for s in SPECS.values()]
    assert min(means) <= 0.03 and max(means) >= 1.0 and max(means) <= 2.5
    concurrencies = [s.container_concurrency for s in SPECS.values()]
    assert 0 in concurrencies and 1 in concurrencies


def test_float_ops_matches_an_independent_numpy_sum() -> None:
    out = handler("float-ops")({"n": 5000})
    x = np.arange(5000, dtype=float)
    assert out["sum"] == pytest.approx(float(np.sum(np.sin(x) + np.cos(x) + np.sqrt(x))), rel=1e-9)


def test_matmul_trace_is_the_product_of_the_seeded_matrices() -> None:
    out = handler("matmul")({"n": 40, "seed": 3})
    rng = np.random.default_rng(3)
    a, b = rng.random((40, 40)), rng.random((40, 40))
    assert out["trace"] == pytest.approx(float(np.trace(a @ b)))
    assert handler("matmul")({"n": 40, "seed": 4})["trace"] != out["trace"]


def test_linpack_solves_to_the_all_ones_vector() -> None:
    out = handler("linpack")({"n": 60})
    assert out["residual"] < 1e-9 and out["max_error"] < 1e-8 and out["mflops"] > 0


def test_aes_is_deterministic_and_depends_on_the_message() -> None:
    aes = handler("aes")
    a = aes({"length_of_message": 64, "num_of_iterations": 2})
    assert a == aes({"length_of_message": 64, "num_of_iterations": 2})
    assert (
        a["ciphertext_sha256"] != aes({"length_of_message": 65, "num_of_iterations": 2})["ciphertext_sha256"]
    )


def test_aes_ctr_matches_the_nist_sp800_38a_aes256_vector() -> None:
    # pyaes is what the handler runs; NIST SP 800-38A F.5.5 (CTR-AES256.Encrypt), first block.
    import pyaes

    key = bytes.fromhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
    counter = pyaes.Counter(initial_value=int("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff", 16))
    block = pyaes.AESModeOfOperationCTR(key, counter=counter).encrypt(
        bytes.fromhex("6bc1bee22e409f96e93d7e117393172a")
    )
    assert block.hex() == "601ec313775789a5b7a7f504bbf3d228"


def test_dynamic_html_renders_every_row_and_escapes_the_username() -> None:
    module = importlib.import_module("functions.dynamic_html.handler")
    out = module.handle({"random_len": 25, "username": "<script>"})
    assert out["rows"] == 25
    html = module._TEMPLATE.render(username="<script>", cur_time="t", random_numbers=[1, 2, 3])
    assert "&lt;script&gt;" in html and html.count("<tr class=") == 3


def test_json_serde_round_trips_all_records() -> None:
    out = handler("json-serde")({"records": 200})
    assert out["records"] == 200 and 0 < out["active"] < 200 and out["bytes"] > 200 * 50
    assert handler("json-serde")({"records": 0})["active"] == 0


def test_gzip_ratio_follows_the_compressibility() -> None:
    gz = handler("gzip-compress")
    text = gz({"file_size": 1 << 20, "compressibility": 1.0})
    noise = gz({"file_size": 1 << 20, "compressibility": 0.0})
    assert text["ratio"] < 0.05 < 0.99 < noise["ratio"]


def test_disk_io_reads_back_what_it_wrote() -> None:
    out = handler("disk-io")({"size_mib": 2, "block_kib": 64})
    assert out["bytes_written"] == out["bytes_read"] == 2 << 20 and out["blocks"] == 32


def test_thumbnailer_keeps_the_aspect_ratio_within_max_size() -> None:
    out = handler("thumbnailer")({"width": 400, "height": 300, "max_size": 64})
    assert out["thumbnail_size"] == [64, 48]
    assert 0 < out["thumbnail_bytes"] < out["source_bytes"]


def test_trace_driven_burns_the_cpu_and_holds_the_memory_it_is_given() -> None:
    import time

    c0 = time.thread_time()
    out = handler("trace-driven")({"cpu_s": 0.03, "memory_bytes": 3 << 20})
    assert out["cpu_s"] >= 0.03 and time.thread_time() - c0 >= 0.03
    assert out["memory_bytes"] == 3 << 20


def test_trace_driven_touches_every_page() -> None:
    from functions.trace_driven.handler import touch_memory

    buf = touch_memory(10 * 4096 + 1)
    assert len(buf) == 10 * 4096 + 1 and sum(buf) == 11


@pytest.mark.parametrize(
    ("name", "payload", "key"),
    [
        ("float-ops", {"n": 0}, "n"),
        ("float-ops", {"n": "10"}, "n"),
        ("matmul", {"n": True}, "n"),
        ("aes", {"num_of_iterations": 1.5}, "num_of_iterations"),
        ("gzip-compress", {"compressibility": 2}, "compressibility"),
        ("dynamic-html", {"username": 7}, "username"),
        ("trace-driven", {"cpu_s": -1}, "cpu_s"),
        ("trace-driven", {"memory_bytes": math.inf}, "memory_bytes"),
    ],
)
def test_bad_payload_values_name_the_key(name: str, payload: dict, key: str) -> None:
    with pytest.raises(PayloadError, match=rf"payload\.{key} must be"):
        handler(name)(payload)


def _handler_defaults(name: str) -> dict[str, object]:
    """``key -> default`` of every ``*_param(payload, key, default, ...)`` call in the handler."""
    import ast
    import inspect

    module = importlib.import_module(SPECS[name].handler.split(":")[0])
    defaults: dict[str, object] = {}
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "").endswith("_param")
            and len(node.args) >= 3
        ):
            key = ast.literal_eval(node.args[1])
            defaults[key] = eval(compile(ast.Expression(node.args[2]), "<default>", "eval"), vars(module))
    return defaults


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_specs_default_payload_is_what_the_handler_does_by_default(name: str) -> None:
    """So ``handle({})`` in-process, the runtime with an empty body and the profiler agree."""
    defaults = _handler_defaults(name)
    assert SPECS[name].payload, "every spec states its default payload"
    for key, value in SPECS[name].payload.items():
        assert key in defaults, f"spec payload key {key!r} is not read by the handler"
        assert defaults[key] == value, key
