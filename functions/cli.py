"""``scoretune functions ...``: list, invoke, serve, manifest, build and profile the function suite.

Input is checked here (names, JSON payloads) and turned into :class:`FunctionsError`; the root
group (agent/cli.py's ``_ScoretuneGroup``, the one place that does it for every command) prints it
as one ``Error: ...`` line with exit status 1.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import typer
import yaml

from functions.errors import FunctionsError
from functions.spec import FunctionSpec, discover_specs

log = logging.getLogger(__name__)

app = typer.Typer(
    help="The serverless function suite: handlers, specs, images, Knative manifests.", no_args_is_help=True
)


DEFAULT_CONTEXT_DIR = Path("build/functions")


def _specs(names: list[str] | None = None) -> list[FunctionSpec]:
    specs = discover_specs()
    if not names:
        return list(specs.values())
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise FunctionsError(f"unknown function(s) {', '.join(unknown)}; known: {', '.join(specs)}")
    return [specs[n] for n in names]


def _payload(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise FunctionsError(f"--payload is not JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(value, dict):
        raise FunctionsError("--payload must be a JSON object")
    return value


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=False))


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f}Mi"


@app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help="Print the specs as JSON.")) -> None:
    """List the functions with their resources, concurrency, image and work per request."""
    from functions.spec import spec_to_dict

    specs = _specs()
    if as_json:
        _echo_json([spec_to_dict(s) for s in specs])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(specs)} functions")
    for col in (
        "name",
        "shape",
        "cpu req/lim",
        "mem req/lim",
        "cc",
        "image size",
        "work cpu_s",
        "measured cpu_s",
    ):
        table.add_column(col, justify="left" if col in ("name", "shape") else "right")
    for s in specs:
        table.add_row(
            s.name,
            s.shape,
            f"{s.cpu_request_milli}m/{s.cpu_limit_milli}m",
            f"{_mib(s.memory_request_bytes)}/{_mib(s.memory_limit_bytes)}",
            str(s.container_concurrency),
            _mib(s.image_size_bytes),
            f"{s.work_cpu_s.mean:.4f}",
            f"{s.measured.cpu_s_mean:.4f}" if s.measured else "-",
        )
    Console().print(table)


@app.command("invoke")
def invoke_command(
    name: str = typer.Argument(..., help="Function name, e.g. float-ops."),
    payload: str = typer.Option(
        None, "--payload", "-p", help="JSON object merged over the spec's default payload."
    ),
) -> None:
    """Run a handler in this process and print its JSON result (timings in the -v debug log)."""
    from functions.payload import PayloadError
    from functions.runtime import import_handler

    spec = _specs([name])[0]
    handler, module = import_handler(spec.handler)
    warm = getattr(module, "warm", None)
    if callable(warm):
        warm()
    merged = {**spec.payload, **_payload(payload)}
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        result = handler(merged)
    except PayloadError:
        raise
    except Exception as err:
        raise FunctionsError(f"{name} failed: {type(err).__name__}: {err}") from err
    log.debug("%s: cpu %.4f s, wall %.4f s", name, time.process_time() - c0, time.perf_counter() - w0)
    _echo_json(result)


@app.command("serve")
def serve_command(
    name: str = typer.Argument(..., help="Function name."),
    port: int = typer.Option(None, "--port", help="Port (default: $PORT, else 8080)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    graceful_timeout: float = typer.Option(30.0, "--graceful-timeout", help="Seconds to drain on SIGTERM."),
) -> None:
    """Serve one function over HTTP with the Knative container contract until SIGTERM."""
    from functions.runtime import serve

    _specs([name])
    serve(name, host=host, port=port, graceful_timeout_s=graceful_timeout)


@app.command("manifest")
def manifest_command(
    names: list[str] = typer.Argument(None, help="Function names (default: all, as a multi-document YAML)."),
    scheduler_name: str = typer.Option(None, "--scheduler-name", help="spec.template.spec.schedulerName."),
    namespace: str = typer.Option("default", "--namespace", "-n"),
    registry: str = typer.Option(None, "--registry", help="Use the images as pushed to this registry."),
    pod: bool = typer.Option(False, "--pod", help="Print the Pod a revision creates instead of the Service."),
    node_name_env: bool = typer.Option(
        True,
        "--node-name-env/--no-node-name-env",
        help="Pass NODE_NAME via the downward API (needs the fieldRef feature).",
    ),
    check: bool = typer.Option(
        True, "--check/--no-check", help="Validate against Knative's schema and webhook rules."
    ),
) -> None:
    """Render Knative Services (serving.knative.dev/v1), or the revision Pods they create."""
    from functions.build import image_ref
    from functions.knative import revision_pod, service_manifest
    from functions.knative_validation import check_service

    docs = []
    for spec in _specs(names):
        image = image_ref(spec, registry)
        service = service_manifest(
            spec, scheduler_name=scheduler_name, namespace=namespace, image=image, node_name_env=node_name_env
        )
        if check:
            check_service(service)
        if pod:
            docs.append(
                revision_pod(
                    spec,
                    scheduler_name=scheduler_name,
                    namespace=namespace,
                    image=image,
                    node_name_env=node_name_env,
                )
            )
        else:
            docs.append(service)
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False, width=120), nl=False)


@app.command("build")
def build_command(
    names: list[str] = typer.Argument(None, help="Function names (default: all)."),
    push: str = typer.Option(
        None, "--push", metavar="REGISTRY", help="Tag the images for REGISTRY and push them."
    ),
    context_dir: Path = typer.Option(
        DEFAULT_CONTEXT_DIR, "--out", "-o", "--context-dir", help="Where the build contexts are written."
    ),
    context_only: bool = typer.Option(
        False, "--context-only", help="Write the build contexts; do not contact an engine."
    ),
    write_sizes: bool = typer.Option(
        False, "--write-sizes", help="Record each built image's size as its spec's image.size."
    ),
    runtime: str = typer.Option(
        "docker", "--runtime", help="docker: through a Docker engine; oci: OCI images built here with mmdebstrap, "
        "pip and umoci (what the embedded lab's container runtime pulls; no engine needed)."
    ),
    cache: Path = typer.Option(None, "--cache", help="oci: where the layout and its layers are kept "
                               "(default: $SCORETUNE_OCI_CACHE, else the user cache directory)."),
) -> None:
    """Build every function's image through the Docker Engine API (docker SDK), or as OCI images
    on this machine (--runtime oci).

    The build contexts are written to --context-dir first. Without a reachable engine the command
    says so in one line and exits 1, since no image was built; --context-only succeeds there.
    """
    from functions.build import build_images, write_contexts, write_image_size

    specs = _specs(names)
    if runtime not in ("docker", "oci"):
        raise FunctionsError(f"--runtime must be docker or oci, got {runtime!r}")
    if runtime == "oci":
        from functions.oci import OciBuilder, default_cache_dir

        builder = OciBuilder(cache or default_cache_dir())
        for name, img in builder.build(specs).items():
            layers = ", ".join(d.split(":")[1][:12] for d in img.layers)
            typer.echo(f"{img.image}  {builder.layout}:{img.tag}  {_mib(img.size_bytes)} compressed "
                       f"(spec {_mib(next(s for s in specs if s.name == name).image_size_bytes)})  layers {layers}")
        return
    if context_only:
        paths = write_contexts(specs, context_dir)
        typer.echo(f"wrote build contexts for {len(paths)} function(s) to {context_dir}")
        return
    results = build_images(specs, context_dir=context_dir, registry=push, push=bool(push))
    for spec, r in zip(specs, results, strict=True):
        note = "  pushed" if r.pushed else ""
        typer.echo(
            f"{r.image}  {r.image_id[:19]}  {_mib(r.size_bytes)} (spec {_mib(spec.image_size_bytes)}){note}"
        )
        if write_sizes:
            write_image_size(spec, r.size_bytes)


@app.command("profile")
def profile_command(
    names: list[str] = typer.Argument(None, help="Function names (default: all)."),
    samples: int = typer.Option(
        3, "--samples", min=1, max=100, help="Timed requests per function (after one warm-up)."
    ),
    refit: bool = typer.Option(
        False, "--refit", help="Also set work.cpu_s.mean, work.memory, work.io_s and cold_start.init_s."
    ),
    write: bool = typer.Option(
        True, "--write/--dry-run", help="Write the measured block into each spec file."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the measurements as JSON."),
) -> None:
    """Measure each handler's CPU time and peak memory here, one fresh process per function."""
    from functions.profile import measure, median_io_s, summarize, write_measured

    rows = []
    for spec in _specs(names):
        m = measure(spec, samples=samples)
        measured = summarize(m)
        if write:
            if spec.path is None:
                raise FunctionsError(f"{spec.name}: spec has no file to write to")
            write_measured(spec.path, measured, refit=refit, io_s=median_io_s(m))
        rows.append(
            {
                "name": spec.name,
                "cpu_s_mean": measured.cpu_s_mean,
                "cpu_s_p95": measured.cpu_s_p95,
                "wall_s_mean": measured.wall_s_mean,
                "io_s_p50": round(median_io_s(m), 6),
                "runqueue_s_mean": round(sum(m.runqueue_s) / len(m.runqueue_s), 6) if m.runqueue_s else 0.0,
                "spec_cpu_s": spec.work_cpu_s.mean,
                "peak_memory_bytes": measured.peak_memory_bytes,
                "baseline_rss_bytes": measured.baseline_rss_bytes,
                "init_s": measured.init_s,
                "samples": measured.samples,
            }
        )
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        typer.echo(
            f"{r['name']:<14} cpu {r['cpu_s_mean']:.4f} s (p95 {r['cpu_s_p95']:.4f}, spec {r['spec_cpu_s']:.4f})"
            f"  wall {r['wall_s_mean']:.4f} s  io {r['io_s_p50']:.4f} s  waited {r['runqueue_s_mean']:.4f} s"
            f"  +mem {_mib(r['peak_memory_bytes'])}"
            f"  idle rss {_mib(r['baseline_rss_bytes'])}  init {r['init_s']:.3f} s"
        )
    if write:
        typer.echo(f"wrote the measured block{' and refitted work' if refit else ''} of {len(rows)} spec(s)")


def bench_functions(
    requests: int = typer.Option(500, "--requests", min=10, help="Back-to-back requests to time."),
    as_json: bool = typer.Option(True, "--json/--no-json", help="Print JSON (the default)."),
) -> None:
    """Runtime cold-start share, per-request overhead and revision_pod rendering rate, as JSON."""
    from functions.bench import run

    _echo_json(run(requests)) if as_json else typer.echo(run(requests))
