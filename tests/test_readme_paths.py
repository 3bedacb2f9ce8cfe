"""The README's newcomer paths, run as written: the quick start, *your cluster* and *your workload*
blocks are taken from README.md and run by bash in an empty folder. Only what this machine lacks is
stood in for: ``kubectl`` (a script printing a shipped cluster's nodes as ``kubectl get nodes -o
json`` would) and the network (the trace directory already holds the real trace, which ``traces
fetch`` then verifies instead of downloading)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("## Quick start", "### Your cluster", "### Your workload")


def _blocks(readme: str) -> list[str]:
    out = []
    for heading in SECTIONS:
        start = readme.index(heading)
        block = re.search(r"```bash\n(.*?)```", readme[start:], re.S)
        assert block, heading
        out.append(block.group(1))
    return out


@pytest.mark.slow
def test_the_readme_paths_work_as_written(tmp_path, real_trace):
    from testbed.cluster import load_cluster

    trace = real_trace("azure/azure2021_first199_invocations_invitro.csv")
    traces = tmp_path / "traces" / "azure"
    traces.mkdir(parents=True)
    shutil.copy(trace, traces / "azure2021_first199_invocations_invitro.csv")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nodes = {"apiVersion": "v1", "kind": "List", "items": load_cluster("mixed-speed-16").to_k8s_nodes()}
    (tmp_path / "nodes-fixture.json").write_text(json.dumps(nodes))
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f"#!/bin/sh\ncat {tmp_path / 'nodes-fixture.json'}\n")
    kubectl.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent").symlink_to(REPO / "agent")  # the README's relative path to the shipped policy
    script = "\n".join(_blocks((REPO / "README.md").read_text()))
    script = script.replace("make setup", ":").replace("source .venv/bin/activate", ":")
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SCORETUNE_TRACES": str(tmp_path / "traces")}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for run in ("quick", "my-cluster", "my-workload"):
        summary = json.loads((work / "runs" / run / "summary.json").read_text())
        assert summary["steps"] == 10 and (work / "runs" / run / "best-scheduler-config.yaml").exists()
    assert "present" in proc.stdout  # traces fetch found the trace intact and downloaded nothing
