"""A load-generator worker installs scoretune with ``--no-deps`` plus the role's
worker-requirements.txt (Locust and NumPy), never PyTorch or the agent's stack. These tests keep
that list honest: its ranges are pyproject.toml's, and the worker's whole import closure (the
locustfile, in a fresh interpreter where the agent's packages cannot be imported) comes from
those distributions and their dependencies."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
WORKER_REQUIREMENTS = ROOT / "ansible" / "roles" / "locust_loadgen" / "files" / "worker-requirements.txt"
AGENT_ONLY = ("torch", "stable_baselines3", "sb3_contrib", "gymnasium", "optuna", "pandas", "pyarrow", "kubernetes",
              "ray", "sklearn", "matplotlib", "numba", "tensorboard")


def _worker_requirements() -> list[Requirement]:
    lines = [ln.strip() for ln in WORKER_REQUIREMENTS.read_text().splitlines()]
    return [Requirement(ln) for ln in lines if ln and not ln.startswith("#")]


def test_the_worker_ranges_are_pyprojects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {Requirement(r).name: str(Requirement(r).specifier) for r in project}
    for req in _worker_requirements():
        assert pinned.get(req.name) == str(req.specifier), f"{req.name}: {req.specifier} vs pyproject {pinned.get(req.name)}"
    assert "torch" not in {r.name for r in _worker_requirements()}


def _closure(names: list[str]) -> set[str]:
    """Every distribution ``names`` need when installed (their Requires-Dist, no extras, recursively)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_a_worker_imports_only_what_the_worker_requirements_install():
    blocker = (
        "import importlib.abc, sys\n"
        "before = {m.split('.')[0] for m in sys.modules}\n"  # the interpreter's own start (site, .pth hooks)
        "class Block(importlib.abc.MetaPathFinder):\n"
        f"    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {AGENT_ONLY!r}: raise ImportError('not on a worker: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import runpy, json\n"
        f"runpy.run_path({str(ROOT / 'loadgen' / 'locustfile.py')!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout.strip().splitlines()[-1]))
    provided = metadata.packages_distributions()
    allowed = _closure([r.name for r in _worker_requirements()])
    third_party = {m: provided[m] for m in modules if m in provided and m not in sys.stdlib_module_names}
    outside = {m: d for m, d in third_party.items()
               if not any(re.sub(r"[-_.]+", "-", x).lower() in allowed for x in d) and m not in ("functions", "loadgen")}
    assert not outside, f"the worker imports modules no worker requirement installs: {outside}"
    assert {"locust", "gevent", "numpy"} <= set(third_party)
