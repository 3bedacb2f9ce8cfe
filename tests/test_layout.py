"""The repository's layout, as DESIGN.md states it: no import cycle among all its modules, packages
import only the packages below them, and inside ``testbed``, ``testbed/local`` and ``testbed/kube``
each room imports only rooms on a lower floor. Every import counts, including those inside
functions (a lazy import is still a dependency); ``from package import module`` is an arrow to that module, not to the
package's ``__init__`` (which every submodule import runs anyway). ``agent/``'s own rooms are kept
by tests/agent/test_agent_layout.py."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "agent", "testbed", "loadgen", "functions")
"""Top to bottom: a package imports only packages after it (``bench`` stands apart, above all)."""
TESTBED_FLOORS = (
    ("local", "kube", "generated"),
    ("sim",),
    ("platforms", "backend"),
    ("cluster",),
    ("scheduler", "autoscaler", "openwhisk", "kubelet", "scenarios", "noise_model"),
    ("errors",),
)
"""``testbed``'s rooms (subpackages and top modules), top to bottom; a room imports only rooms on
lower floors. The backends (local, kube) sit above the simulator they share models with, which sits
above the platform registry it looks its platform up in."""
LOCAL_FLOORS = (
    ("cli",),
    ("studies", "backend"),
    ("lab", "controllers"),
    ("capacity",),
    ("node_agent",),
    ("teardown",),
    ("containers",),
    ("node_runtime", "neighbour"),
    ("placement", "routing", "hardware"),
    ("cpu", "host", "probe"),
    ("state",),
)
"""``testbed/local``'s rooms, top to bottom: the controllers (a lab process) never reach the
lifecycle above them; ``down`` is a room below both; the container runtime sits below the agent
that runs it and the teardown that removes it, above the seam it implements."""
KUBE_FLOORS = (
    ("cli",),
    ("openwhisk_backend",),
    ("backend",),
    ("image_reset",),
    ("rollout",),
    ("watch", "render"),
    ("faults", "pulls", "openwhisk_preflight"),
    ("access", "nodes", "images", "api", "openwhisk", "inventory", "versions"),
)
"""``testbed/kube``'s rooms, top to bottom: the backend composes its jobs (the reset, the rollout,
the watch), each below it; OpenWhisk's backend is a kind of Knative's."""
FLOORS = {"testbed": TESTBED_FLOORS, "testbed.local": LOCAL_FLOORS, "testbed.kube": KUBE_FLOORS}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's own package upwards
        parent = package
        for _ in range(node.level - 1):
            parent = parent.rpartition(".")[0]
        base = f"{parent}.{base}" if base else parent
    return [f"{base}.{a.name}" for a in node.names] + [base]


def build_graph() -> dict[str, set[str]]:
    """Module -> the repository modules it imports (lazy imports included)."""
    paths = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = _targets(node, package)
            # ``from X import Y``: the module X.Y when it is one, else X (the last target)
            exact = [t for t in targets[:-1] if t in paths]
            for target in exact or targets[-1:]:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


GRAPH = build_graph()
EDGES = sorted((a, b) for a, targets in GRAPH.items() for b in targets)


def _room(module: str, package: str) -> str | None:
    """The room of ``module`` inside ``package`` (its next name), or None outside it."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def _floor(room: str, floors: tuple[tuple[str, ...], ...]) -> int:
    for i, rooms in enumerate(floors):
        if room in rooms:
            return i
    raise AssertionError(f"room {room!r} is on no floor: add it to the floors of tests/test_layout.py and DESIGN.md")


def test_the_graph_sees_the_repository():
    assert len(GRAPH) > 180
    assert "testbed.local.teardown" in GRAPH["testbed.local.controllers.base"]  # a lazy-free import
    assert "testbed.platforms" in GRAPH["testbed.sim.backend"]
    assert "functions.spec" in GRAPH["testbed.local.controllers.base"]  # a lazy import counts


def test_no_import_cycle_anywhere():
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


@pytest.mark.parametrize("edge", [e for e in EDGES if e[0].split(".")[0] != e[1].split(".")[0]],
                         ids=lambda e: f"{e[0]}->{e[1]}")
def test_packages_import_only_packages_below(edge):
    a, b = (x.split(".")[0] for x in edge)
    assert PACKAGES.index(a) < PACKAGES.index(b), f"{edge[0]} ({a}) imports {edge[1]} ({b}) above it"


@pytest.mark.parametrize(("package", "floors"), list(FLOORS.items()))
def test_rooms_import_only_rooms_on_lower_floors(package, floors):
    wrong = []
    for a, b in EDGES:
        ra, rb = _room(a, package), _room(b, package)
        if ra is None or rb is None or ra == rb:
            continue
        if _floor(ra, floors) >= _floor(rb, floors):
            wrong.append(f"{a} ({ra}) imports {b} ({rb}), which is not on a lower floor")
    assert not wrong, "\n".join(wrong)


def test_every_room_has_a_floor():
    for package, floors in FLOORS.items():
        rooms = {r for m in GRAPH if (r := _room(m, package)) is not None and r != "__main__"}
        for room in rooms:
            _floor(room, floors)


def test_only_the_lab_reads_the_hidden_hardware():
    """A cluster's hardware file is what no API shows (testbed/local/hardware.py): the lab's own
    modules read it, nothing a tuner, the simulator or a backend above the lab imports does."""
    readers = {a for a, b in EDGES if b == "testbed.local.hardware"}
    assert readers, "the graph sees no reader at all: the test would pass on anything"
    outside = sorted(r for r in readers if not r.startswith("testbed.local."))
    assert not outside, f"modules outside the lab read the hidden hardware: {outside}"
