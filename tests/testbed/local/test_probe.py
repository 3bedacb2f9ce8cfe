"""The host probes (testbed/local/probe.py) and `scoretune testbed probe`."""

from __future__ import annotations

import hashlib
import json

from typer.testing import CliRunner

from testbed.local.probe import archive, drift, worst


def test_the_unpack_probe_archive_is_the_same_bytes_everywhere(tmp_path):
    a, b = archive(tmp_path / "a.tgz"), archive(tmp_path / "b.tgz")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def test_drift_is_a_ratio_per_probe_and_worst_counts_faster_as_moved():
    assert drift({"cpu_ms": 200, "unpack_ms": 40}, {"cpu_ms": 100, "unpack_ms": 40}) == {"cpu_ms": 2.0, "unpack_ms": 1.0}
    assert worst({"cpu_ms": 0.5}) == 2.0 and worst({}) == 1.0
    assert drift({"cpu_ms": 100, "unpack_ms": None}, {"cpu_ms": 100, "unpack_ms": 40}) == {"cpu_ms": 1.0}


def test_the_probe_command_prints_each_probes_spread():
    from agent.cli import app

    result = CliRunner().invoke(app, ["testbed", "probe", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    probes = json.loads(result.output)
    assert len(probes) == 2 and all(p["cpu_ms"] > 0 for p in probes)
    text = CliRunner().invoke(app, ["testbed", "probe", "--repeats", "2"])
    assert "cpu_ms: min" in text.output and "max/min" in text.output
