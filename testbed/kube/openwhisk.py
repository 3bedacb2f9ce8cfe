"""The suite's functions deployed as OpenWhisk actions (issue 36, item 1).

Each function becomes a blackbox action running its own image (the runtime speaks the action
protocol, :mod:`functions.openwhisk`), created or replaced with ``PUT
/api/v1/namespaces/_/actions/NAME?overwrite=true`` (apache/openwhisk docs/rest_api.md) with the
spec's memory limit, a timeout and the spec's container concurrency (OpenWhisk's limits:
``memory`` in MB, ``timeout`` in ms, ``concurrency`` activations per container, 1 when the spec
says 0 = unlimited, which OpenWhisk does not have) and a log limit of 0 (:data:`ACTION_LOG_LIMIT_MB`).
The action's ``version`` the controller answers is its revision, recorded per experiment with the
limits the controller stored, so two experiments can tell whether they ran the same action.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from functions.openwhisk_action import (
    ACTION_LOG_LIMIT_MB,
    action_concurrency,
    action_memory_mb,
    check_action_image,
)
from testbed.errors import TestbedError


def action_body(spec: Any, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """The action document for a :class:`functions.spec.FunctionSpec` (an image the invokers' pods
    would pull on every cold start, ``:latest`` or untagged, is refused: one line naming it)."""
    check_action_image(spec)
    # the chart's limits.actions.memory.min is 128m; the role raises the max (openwhisk_action_memory_max)
    return {
        "exec": {"kind": "blackbox", "image": spec.image},
        "limits": {"memory": action_memory_mb(spec), "timeout": int(timeout_s * 1000),
                   "concurrency": action_concurrency(spec), "logs": ACTION_LOG_LIMIT_MB},
        "annotations": [{"key": "scoretune.io/function", "value": spec.name}],
    }


def deploy_actions(api_url: str, auth: str, specs: Sequence[Any], *, timeout_s: float = 60.0,
                   verify: bool | str = True, session: Any = None) -> dict[str, dict[str, Any]]:
    """Create or replace one action per spec; returns ``{function: {"version", "limits"}}`` as the
    controller stored them. Any refusal (a refused key, a limit outside the deployment's bounds) is
    one TestbedError naming the action and the controller's own message."""
    import requests

    if ":" not in auth:
        raise TestbedError("the OpenWhisk key must be UUID:KEY (.lab/openwhisk/auth.guest)")
    user, _, key = auth.partition(":")
    http = session or requests.Session()
    deployed: dict[str, dict[str, Any]] = {}
    for spec in specs:
        url = f"{api_url.rstrip('/')}/api/v1/namespaces/_/actions/{spec.name}"
        try:
            answer = http.put(url, params={"overwrite": "true"}, json=action_body(spec, timeout_s=timeout_s),
                              auth=(user, key), timeout=30, verify=verify)
        except requests.RequestException as err:
            raise TestbedError(f"OpenWhisk at {api_url}: creating action {spec.name} failed: {err}") from None
        if answer.status_code != 200:
            try:
                why = answer.json().get("error") or answer.text
            except ValueError:
                why = answer.text
            raise TestbedError(f"OpenWhisk at {api_url}: creating action {spec.name} failed: "
                               f"HTTP {answer.status_code}: {str(why).strip()[:300]}")
        deployed[spec.name] = action_record(answer.json())
    return deployed


def action_record(doc: Any) -> dict[str, Any]:
    """What an experiment records of an action as the controller answers it: its ``version`` and
    its ``limits`` (memory, timeout, concurrency, logs)."""
    doc = doc if isinstance(doc, dict) else {}
    limits = doc.get("limits") if isinstance(doc.get("limits"), dict) else {}
    return {"version": str(doc.get("version", "")), "limits": dict(limits)}


def log_collection_warning(name: str, record: dict[str, Any]) -> str | None:
    """One line when an action's log limit is not 0 (its logs are read through kube-apiserver
    after every activation, :data:`ACTION_LOG_LIMIT_MB`), else None. A controller that answers no
    ``limits.logs`` applies the chart's default (10 MB), so a missing value warns too."""
    logs = record.get("limits", {}).get("logs")
    if logs == ACTION_LOG_LIMIT_MB:
        return None
    shown = "the deployment's default" if logs is None else f"{logs} MB"
    return (f"OpenWhisk action {name} keeps a log limit of {shown}: the invoker reads every activation's logs "
            "through kube-apiserver before freeing its slot; redeploy the actions with `scoretune kube "
            "openwhisk-actions` (limits.logs 0)")


def read_openwhisk_key(path: str) -> str:
    """The key in ``path`` (the role writes it once, 0600); one line naming the file when it is
    missing, unreadable or not ``UUID:KEY``, or is the chart's published guest key."""
    import re
    from pathlib import Path

    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise TestbedError(f"{path}: no such key file (--openwhisk-auth; ansible/openwhisk.yml writes "
                           ".lab/openwhisk/auth.guest)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TestbedError(f"{path}: cannot read the OpenWhisk key ({type(err).__name__})") from None
    if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[A-Za-z0-9]{32,128}", text):
        raise TestbedError(f"{path}: not an OpenWhisk key (UUID:KEY)")
    if text.startswith(PUBLISHED_GUEST_UUID):
        raise TestbedError(f"{path}: the chart's published guest key: anyone could use it; let ansible/openwhisk.yml "
                           "generate the lab's own")
    return text


PUBLISHED_GUEST_UUID = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502"
"""The guest key's UUID openwhisk-deploy-kube's values.yaml publishes (whisk.auth.guest)."""


STEM_CELL_FREE_RUNTIMES = "runtimes-scoretune.json"
"""The runtimes manifest the role installs instead of the chart's ``runtimes.json`` (``whisk.runtimes``)."""


def without_stem_cells(manifest: Any, *, file: str = "runtimes.json") -> tuple[dict[str, Any], list[str]]:
    """The chart's runtimes manifest with no stem cells, and the kinds that had some.

    openwhisk-deploy-kube's ``runtimes.json`` keeps prewarmed containers ("stem cells", at 108f3275
    two of 256 MB for ``nodejs:14``, reactive up to four) on every invoker. With the
    KubernetesContainerFactory each is a pod the scheduler under test places on an invoker node,
    recreated whenever the invokers restart (every reset): they would move from run to run with
    the weights, take node and pool memory, and never serve the suite's blackbox actions. Without
    them every action pod of a run is one of the suite's."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("runtimes"), dict):
        raise TestbedError(f"{file}: not an OpenWhisk runtimes manifest (no \"runtimes\" object)")
    out = dict(manifest)
    out["runtimes"] = {}
    removed: list[str] = []
    for family, kinds in manifest["runtimes"].items():
        if not isinstance(kinds, list):
            raise TestbedError(f"{file}: runtimes.{family} is not a list of kinds")
        kept = []
        for i, kind in enumerate(kinds):
            if not isinstance(kind, dict):
                raise TestbedError(f"{file}: runtimes.{family}[{i}] is not an object")
            if kind.get("stemCells"):
                removed.append(str(kind.get("kind", f"{family}[{i}]")))
            kept.append({k: v for k, v in kind.items() if k != "stemCells"})
        out["runtimes"][family] = kept
    return out, removed


def write_stem_cell_free_runtimes(chart_dir: str) -> tuple[str, list[str]]:
    """Write :data:`STEM_CELL_FREE_RUNTIMES` beside the chart's ``runtimes.json`` (``chart_dir`` is
    ``helm/openwhisk``); its path and the kinds whose stem cells were removed."""
    import json
    from pathlib import Path

    from functions.atomic import write_atomic

    source = Path(chart_dir) / "runtimes.json"
    try:
        manifest = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TestbedError(f"{source}: no runtimes manifest (is {chart_dir} openwhisk-deploy-kube's helm/openwhisk?)") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise TestbedError(f"{source}: cannot read the runtimes manifest ({type(err).__name__})") from None
    cleaned, removed = without_stem_cells(manifest, file=str(source))
    target = Path(chart_dir) / STEM_CELL_FREE_RUNTIMES
    write_atomic(target, json.dumps(cleaned, indent=4) + "\n")
    return str(target), removed


__all__ = ["ACTION_LOG_LIMIT_MB", "PUBLISHED_GUEST_UUID", "STEM_CELL_FREE_RUNTIMES", "action_body", "action_record",
           "deploy_actions", "log_collection_warning", "read_openwhisk_key",
           "without_stem_cells", "write_stem_cell_free_runtimes"]
