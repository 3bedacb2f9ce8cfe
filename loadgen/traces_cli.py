"""``scoretune traces list|fetch|verify``: the public traces, got through the tool itself.

Registered by ``agent/cli.py`` as the ``traces`` group. The registry, the trace directory and the
download logic live in :mod:`loadgen.trace_store`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from loadgen.errors import TraceError
from loadgen.trace_store import FileStatus, fetch, load_registry, readonly_dirs, trace_dir, verify

app = typer.Typer(help="Public traces: list them, fetch them from their pinned sources, verify checksums.",
                  no_args_is_help=True)

REGISTRY_OPTION = typer.Option(None, "--registry", help="a trace registry YAML of your own (default: the shipped one)")


def _where(found: Path | None) -> str:
    if found is None:
        return "missing"
    for ro in readonly_dirs():
        if found.is_relative_to(ro):
            return "read-only copy"
    return "present"


@app.command("list")
def list_command(registry: Path | None = REGISTRY_OPTION) -> None:
    """Every known trace, its files and whether they are present."""
    from loadgen.trace_store import find

    reg = load_registry(registry)
    typer.echo(f"trace directory: {trace_dir()}  (set SCORETUNE_TRACES to change it)")
    for ro in readonly_dirs():
        typer.echo(f"read-only source: {ro}")
    for name, trace in reg.traces.items():
        states = [_where(find(f.path, reg)) for f in trace.files]
        size = sum(f.stored_size for f in trace.files)
        state = states[0] if len(set(states)) == 1 else "partly present"
        typer.echo(f"\n{name}  [{state}]  {size / 1e6:.2f} MB")
        typer.echo(f"  {trace.description}")
        typer.echo(f"  source: {trace.source}")
        for f, s in zip(trace.files, states, strict=True):
            typer.echo(f"  - {f.path}  ({s})")
    if reg.manual:
        typer.echo("\nnot fetched by scoretune (no pinned checksum; download by hand):")
        for name, m in reg.manual.items():
            typer.echo(f"  {name}: {m.description}\n    {m.source}")


@app.command("fetch")
def fetch_command(
    names: list[str] = typer.Argument(None, help="trace names (see `scoretune traces list`)"),
    all_: bool = typer.Option(False, "--all", help="fetch every trace in the registry"),
    registry: Path | None = REGISTRY_OPTION,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar on stderr"),
) -> None:
    """Download traces from their pinned sources, check their SHA-256 and store them."""
    reg = load_registry(registry)
    if all_ and names:
        raise TraceError("give trace names or --all, not both")
    chosen = list(reg.traces) if all_ else list(dict.fromkeys(names or []))
    if not chosen:
        raise TraceError("name a trace to fetch or pass --all (see `scoretune traces list`)")
    for name in chosen:
        reg.get(name)  # every name is checked before anything is downloaded
    typer.echo(f"trace directory: {trace_dir()}")
    for name in chosen:
        fetch(name, reg, progress=progress if progress else False, echo=typer.echo)


@app.command("verify")
def verify_command(
    names: list[str] = typer.Argument(None, help="trace names (default: every trace with a file present)"),
    registry: Path | None = REGISTRY_OPTION,
) -> None:
    """Check the SHA-256 of every stored trace file; exit 1 on a mismatch (or a named trace missing)."""
    reg = load_registry(registry)
    chosen = list(dict.fromkeys(names or [])) or list(reg.traces)
    rows: list[FileStatus] = verify(chosen, reg)
    for r in rows:
        detail = f"  {r.found} ({r.detail})" if r.status == "mismatch" else f"  ({_where(r.found)})"
        typer.echo(f"{r.status:8s} {r.file.path}{detail}")
    bad = [r for r in rows if r.status == "mismatch"]
    missing = [r for r in rows if r.status == "missing"]
    if bad:
        raise TraceError(f"{len(bad)} file(s) do not match their pinned checksum (first: {bad[0].found})",
                         field="sha256")
    if names and missing:
        raise TraceError(f"{len(missing)} file(s) missing; run `scoretune traces fetch {missing[0].trace}`",
                         file=missing[0].file.path)
    ok = sum(r.status == "ok" for r in rows)
    typer.echo(f"{ok} file(s) verified, {len(missing)} missing")


@app.command("path")
def path_command(
    name: str = typer.Argument(..., help="a trace name (see `scoretune traces list`)"),
    registry: Path | None = REGISTRY_OPTION,
) -> None:
    """Print where a fetched trace's files are, one per line (for `workload from-trace`)."""
    from loadgen.trace_store import locate

    reg = load_registry(registry)
    trace = reg.get(name)
    for f in trace.files:
        typer.echo(str(locate(f.path, reg)))
