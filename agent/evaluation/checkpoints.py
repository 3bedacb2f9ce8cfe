"""Each finished task of an evaluation, kept in ``DIR/tasks/`` the moment it finishes, so an
evaluation that was stopped (a killed job, a machine's shutdown) resumes where it stopped:
``evaluate`` run again with the same options and ``--out`` reuses every task whose definition and
code match, and runs only the rest. Without it an evaluation of 40 tasks x 5 seeds (hours) kept
nothing until its very end.

A task is reused only when everything that decides its result is the same -- its scenario,
seeds, methods, policies, protocol, prior, the objective factory, and the code's revision (the
git commit, marked dirty when tracked files differ from it, else the installed version) -- so
reusing gives the figures a full rerun would (every task is seeded). Anything else runs again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from agent.provenance import code_revision
from functions.atomic import write_atomic

log = logging.getLogger(__name__)

TASKS_DIR = "tasks"


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot keep {type(value).__name__} in a task checkpoint")


def definition(task: Any, factory: Any = None) -> dict[str, Any]:
    """Everything that decides a task's result, as plain JSON (``oracle_known`` is left out: it is
    the cached result of the same search the task would run)."""
    p = dataclasses.asdict(task.protocol)
    p["platform"] = str(task.protocol.platform)
    defn = {
        "scenario": task.scenario, "seeds": list(task.seeds), "methods": list(task.methods),
        "policies": dict(task.policies), "protocol": p, "prior": task.prior,
        "factory": None if factory is None else f"{factory.__module__}.{factory.__qualname__}",
    }
    return json.loads(json.dumps(defn, sort_keys=True, default=_plain))  # as it reads back


def _path(out_dir: Path, defn: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(defn, sort_keys=True).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", defn["scenario"])[:80]
    return out_dir / TASKS_DIR / f"{safe}-{digest}.json"


def save(out_dir: Path, task: Any, result: dict[str, Any], revision: str, factory: Any = None) -> None:
    defn = definition(task, factory)
    record = {"definition": defn, "revision": revision, "result": result}
    write_atomic(_path(out_dir, defn), json.dumps(record, default=_plain) + "\n")  # rows keep their column order


def load(out_dir: Path, task: Any, revision: str, factory: Any = None) -> dict[str, Any] | None:
    """The kept result of ``task``, or None when there is none that matches (then it runs)."""
    defn = definition(task, factory)
    path = _path(out_dir, defn)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        result = record["result"]
        kept_def, kept_rev = record["definition"], record["revision"]
        result["oracle"] = {int(k): v for k, v in result["oracle"].items()}  # JSON keys are strings
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("%s: not a task checkpoint (%s); the task runs again", path, err)
        return None
    if kept_def != defn:
        return None
    if kept_rev != revision:
        log.info("%s was computed by %s, not %s: the task runs again", path.name, kept_rev, revision)
        return None
    return result


__all__ = ["TASKS_DIR", "code_revision", "definition", "load", "save"]
