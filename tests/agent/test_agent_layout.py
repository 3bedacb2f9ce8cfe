"""The agent package's layout, as DESIGN.md states it: rooms import only the rooms below them, no
module imports a CLI module, no import cycle, no module over 400 lines. Every import counts,
including those inside functions (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent"
ROOMS = ("cli", "evaluation", "loop", "tuners", "rl", "objectives", "")
"""Top to bottom; "" is the shared modules directly under agent/."""


def _module(path: Path) -> str:
    parts = path.relative_to(AGENT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (AGENT / parts[1]).is_dir()) else ""


def _graph() -> dict[str, set[str]]:
    """Module -> the agent modules it imports."""
    modules = {_module(p): p for p in AGENT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("agent.") and target != name:
                    graph[name].add(target)
    return graph


GRAPH = _graph()
EDGES = sorted((a, b) for a, targets in GRAPH.items() for b in targets)


def test_the_graph_sees_the_package():
    assert len(GRAPH) > 40 and "agent.tuners.drive" in GRAPH["agent.loop.experiment"]


def test_no_import_cycle():
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {err.args[1]}")


def test_no_module_outside_the_cli_imports_it():
    offenders = [(a, b) for a, b in EDGES if _room(b) == "cli" and _room(a) != "cli"]
    assert not offenders, offenders


@pytest.mark.parametrize("edge", EDGES, ids=lambda e: f"{e[0]}->{e[1]}")
def test_rooms_import_only_rooms_below(edge):
    a, b = edge
    if _room(a) == _room(b):
        return
    assert ROOMS.index(_room(a)) < ROOMS.index(_room(b)), f"{a} ({_room(a) or 'shared'}) imports {b} above it"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(AGENT)): n for p in AGENT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
