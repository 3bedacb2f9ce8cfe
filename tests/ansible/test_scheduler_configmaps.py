"""The scheduler role's garbage collection of the per-configuration ConfigMaps (issue 16 item 6),
run for real on localhost with the cluster's answers given as variables: the task that chooses
what to delete keeps the ConfigMap in use, the previous one, and the newest others up to
``scoretune_scheduler_config_history`` — the kube backend's rule (testbed/kube/backend.py
``KubeBackend._collect``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent
TASKS = ANSIBLE / "roles" / "scoretune_scheduler" / "tasks" / "main.yml"
PREFIX = "scoretune-scheduler-config-"


def _deployment(configmap: str) -> dict:
    return {"spec": {"template": {"spec": {"volumes": [{"name": "config-volume", "configMap": {"name": configmap}}]}}}}


def _stale(tmp_path: Path, *, before: list[str], after: str, listed: list[str], history: int) -> list[str]:
    choose = next(t for t in yaml.safe_load(TASKS.read_text()) if "set_fact" in json.dumps(t))
    out = tmp_path / "stale.json"
    play = [{"name": "Choose", "hosts": "localhost", "connection": "local", "gather_facts": False, "vars": {
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "scoretune_scheduler_name": "scoretune-scheduler",
        "scoretune_scheduler_config_history": history,
        "scoretune_scheduler_before": {"resources": [_deployment(n) for n in before]},
        "scoretune_scheduler_after": {"resources": [_deployment(after)]},
        "scoretune_scheduler_configmaps": {"resources": [
            {"metadata": {"name": n, "creationTimestamp": f"2026-12-02T10:00:{i:02d}Z"}} for i, n in enumerate(listed)]},
    }, "tasks": [choose, {"name": "Write", "ansible.builtin.copy": {
        "content": "{{ scoretune_scheduler_stale | to_json }}", "dest": str(out), "mode": "0644"}}]}]
    playbook = tmp_path / "choose.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"), NO_COLOR="1",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize(("before", "history", "stale"), [
    (["b"], 3, ["c", "a"]),       # in use e, previous b, then the newest other (d)
    (["b"], 2, ["d", "c", "a"]),  # only the one in use and the previous one
    ([], 3, ["b", "a"]),          # first install: no previous, the two newest others stay
    (["e"], 2, ["c", "b", "a"]),  # re-applied: in use = previous, the newest other stays
])
def test_the_role_keeps_the_configmap_in_use_the_previous_and_the_newest(tmp_path, before, history, stale):
    listed = [PREFIX + c for c in "abcde"] + ["scoretune-scheduler-config", "other"]  # legacy / foreign: never
    got = _stale(tmp_path, before=[PREFIX + b for b in before], after=PREFIX + "e", listed=listed, history=history)
    assert got == [PREFIX + s for s in stale]
