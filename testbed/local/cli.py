"""``scoretune testbed up/status/down`` (the embedded lab), ``scoretune fidelity`` and
``scoretune calibrate`` (local against sim)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from testbed.local import lab as labmod

app = typer.Typer(help="The embedded lab: real node agents, ingress/activator, KPA and scheduler on this machine.", no_args_is_help=True)

_STATE = typer.Option(None, "--state-dir", help="State directory (default: $SCORETUNE_LAB_DIR or a per-user temp dir).")


def _console():
    from rich.console import Console

    return Console()


@app.command("up")
def up_cmd(
    cluster: str = typer.Option(labmod.DEFAULT_CLUSTER, "--cluster", help="Cluster spec: a path or a shipped name."),
    port: int = typer.Option(labmod.DEFAULT_PORT, "--port", help="Ingress port on 127.0.0.1 (0: any free port)."),
    cpu: str = typer.Option("auto", "--cpu", help="CPU enforcement: auto, cgroup-v2, cgroup-v1 or duty-cycle."),
    seed: int = typer.Option(0, "--seed"),
    state_dir: Path | None = _STATE,
) -> None:
    """Start one node agent per node, the ingress/activator, the autoscaler and the scheduler."""
    handle = labmod.up(cluster, state_dir=state_dir, port=port, cpu_enforcement=cpu, seed=seed)
    c = _console()
    c.print(f"[bold]lab up[/bold]: ingress {handle.url} (state in {handle.state_dir})")
    c.print(f"notice: {handle.cpu_mode.notice}")
    c.print(f"send requests with the header X-Scoretune-Function: NAME to {handle.url}/, e.g.")
    c.print(f"  curl -s -X POST -H 'X-Scoretune-Function: float-ops' -d '{{}}' {handle.url}/")


@app.command("status")
def status_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the raw status as JSON."),
    state_dir: Path | None = _STATE,
) -> None:
    """Show nodes, instances and their placement."""
    st = labmod.status(state_dir)
    if as_json:
        typer.echo(json.dumps(st, indent=2, default=str))
        return
    c = _console()
    if not st.get("running"):
        procs = st.get("processes", [])
        alive = [p for p in procs if p["alive"]]
        c.print(f"no lab running in {st['state_dir']}" + (f" ({len(alive)} leftover process(es); run `testbed down`)" if alive else ""))
        raise typer.Exit(1 if alive else 0)
    from rich.markup import escape
    from rich.table import Table

    c.print(f"[bold]lab {st.get('cluster')}[/bold] at {st['url']} -- {st['cpu']['notice']}")
    weights = st.get("profile", {}).get("weights", {})
    c.print("profile: " + ", ".join(f"{k}={v}" for k, v in weights.items()))
    nodes = Table("node", "ready", "cpu", "memory", "speed", "images", "instances")
    by_node: dict[str, list[str]] = {}
    for inst in st["instances"]:
        by_node.setdefault(inst["node"] or "(pending)", []).append(escape(f"{inst['pod']} [{inst['state']}]"))
    for n in st["nodes"]:
        nodes.add_row(
            n["name"], "yes" if n["ready"] else "[red]NO[/red]", f"{n['cpu_milli']}m", f"{n['memory_bytes'] // 2**20}Mi",
            f"{n['speed']:g}", ", ".join(i.rsplit("/", 1)[-1] for i in n["images"]) or "-", "\n".join(by_node.get(n["name"], [])) or "-",
        )
    c.print(nodes)
    if by_node.get("(pending)"):
        c.print("pending (unschedulable): " + ", ".join(by_node["(pending)"]))
    if st["functions"]:
        fns = Table("function", "replicas", "ready", "queued", "in flight")
        for f in st["functions"]:
            fns.add_row(f["name"], str(f["replicas"]), str(f["ready"]), str(f["queued"]), str(f["in_flight"]))
        c.print(fns)
    for e in st.get("events", []):
        c.print(f"event: {e}")


@app.command("down")
def down_cmd(state_dir: Path | None = _STATE) -> None:
    """Stop everything the lab started (by pid) and remove its cgroups."""
    stopped = labmod.down(state_dir)
    _console().print(
        f"lab down: stopped {stopped['controller']} controller, {stopped['agent']} agent(s), "
        f"{stopped['instance']} instance(s); removed {stopped['cgroups']} cgroup(s)"
    )
