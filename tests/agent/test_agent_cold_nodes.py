"""``tune --backend kube --cold-nodes a,b``: the option is checked, stored in config.json, and cannot
change on resume. That it reaches the kube backend's reset() is shown against the fake API
(tests/testbed/kube/test_tune_kube.py::test_cold_nodes_of_tune_reach_the_kube_backends_reset)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agent.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("value", "message"), [
    ("Node_1", "'Node_1' is not a Kubernetes node name"),
    ("a,b,a", "a node is named twice"),
])
def test_bad_cold_nodes_are_one_line(value, message, tmp_path):
    r = runner.invoke(app, ["tune", "--backend", "kube", "--method", "random", "--cold-nodes", value,
                            "--out", str(tmp_path / "exp")])
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output
    assert not (tmp_path / "exp").exists()


def test_cold_nodes_are_stored_and_a_resume_may_not_change_them(tmp_path, monkeypatch):
    from agent.cli.tune import TuneArgs, tune_config

    cfg = tune_config(TuneArgs(backend="kube", method="random", cold_nodes="w1,w2"), {"backend", "method", "cold_nodes"})
    assert cfg.backend_options["cold_nodes"] == ["w1", "w2"]
    out = tmp_path / "exp"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(cfg.to_dict()))
    (out / "experiment.jsonl").write_text("")
    r = runner.invoke(app, ["tune", "--resume", str(out), "--cold-nodes", "w1"])
    assert r.exit_code == 1 and "--cold-nodes" in r.output and "contradicts" in r.output
