"""Bad cluster specs (testbed/cluster.py): every one is a ClusterSpecError whose one-line message
names the file and the field, never a ValueError from the quantity parser, an overflow, or a
simulation that allocates terabytes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agent.cli import app
from testbed.cluster import load_cluster, parse_cluster
from testbed.errors import ClusterSpecError

runner = CliRunner()


def _group(**kv) -> str:
    g = {"name": "a", "count": 2, "cpu": "4", "memory": "8Gi", **kv}
    return "name: c\ngroups:\n  - " + json.dumps(g) + "\n"


BAD_FIELDS = [
    # (spec text, field the error must name, words the message must contain)
    (_group(cpu="4Gx"), "groups.0.cpu", "not a Kubernetes quantity"),
    (_group(cpu="2cores"), "groups.0.cpu", "not a Kubernetes quantity"),
    (_group(memory="fast"), "groups.0.memory", "not a Kubernetes quantity"),
    (_group(image_pull_bandwidth="fast"), "groups.0.image_pull_bandwidth", "not a Kubernetes quantity"),
    ("name: c\ndefaults: {image_pull_bandwidth: zoom}\ngroups: [{name: a, cpu: '1', memory: 1Gi}]\n",
     "defaults.image_pull_bandwidth", "not a Kubernetes quantity"),
    ("name: c\ngroups: [{name: a, cpu: .nan, memory: 1Gi}]\n", "groups.0.cpu", "not a finite quantity"),
    (_group(cpu="NaN"), "groups.0.cpu", "not a finite quantity"),
    (_group(memory="Infinity"), "groups.0.memory", "not a finite quantity"),
    ("name: c\ngroups: [{name: a, cpu: '1', memory: 1Gi, image_pull_bandwidth: .nan}]\n",
     "groups.0.image_pull_bandwidth", "not a finite quantity"),
    (_group(cpu="1e30"), "groups.0.cpu", "too large"),
    (_group(memory="1e999Gi"), "groups.0.memory", "too large"),
    ("name: c\ngroups: [{name: a, cpu: '1', memory: " + "9" * 400 + "}]\n", "groups.0.memory", "too large"),
    (_group(cpu="-1"), "groups.0.cpu", "must be positive"),
    (_group(image_pull_bandwidth="0"), "groups.0.image_pull_bandwidth", "must be positive"),
    ("name: c\ngroups: [{name: a, cpu: true, memory: 1Gi}]\n", "groups.0.cpu", "must be a Kubernetes quantity"),
    ("name: c\ngroups: [{name: a, cpu: [1], memory: 1Gi}]\n", "groups.0.cpu", "must be a Kubernetes quantity"),
    (_group(pods=10**12), "groups.0.pods", "less than or equal to 10000"),
    ("name: c\ngroups: [{name: a, cpu: '1', memory: 1Gi, speed: .nan}]\n", "groups.0.speed", "finite number"),
    ("name: c\ngroups: [{name: a, cpu: '1', memory: 1Gi, speed: .inf}]\n", "groups.0.speed", "finite number"),
]


@pytest.mark.parametrize(("text", "field", "words"), BAD_FIELDS, ids=[f"{f}:{w}" for _, f, w in BAD_FIELDS])
def test_bad_value_names_file_and_field(tmp_path, text, field, words):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ClusterSpecError) as err:
        load_cluster(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: field {field}: "), msg
    assert words in msg and "\n" not in msg


BAD_FILES = [
    ("binary", b"name: c\x00\x01\x02groups: []\n", "a binary file"),
    ("latin-1", "name: caf\xe9\ngroups: []\n".encode("latin-1"), "not UTF-8 text: byte 0xe9 at offset 9"),
    ("truncated", b'name: c\ngroups:\n  - {name: a, cpu: "4", memo', "not valid YAML"),
    ("unclosed flow", b"name: c\ngroups: [{name: a\n", "not valid YAML"),
    ("deep nesting", b"name: c\ngroups: " + b"[" * 20000 + b"]" * 20000 + b"\n", "nested too deeply"),
]


@pytest.mark.parametrize(("name", "raw", "words"), BAD_FILES, ids=[n for n, _, _ in BAD_FILES])
def test_unreadable_file_is_one_line_naming_it(tmp_path, name, raw, words):
    path = tmp_path / "c.yaml"
    path.write_bytes(raw)
    with pytest.raises(ClusterSpecError) as err:
        load_cluster(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and words in msg, msg
    assert "\n" not in msg


def test_unknown_shipped_name_lists_the_shipped_ones():
    with pytest.raises(ClusterSpecError, match="nor a shipped cluster; shipped: .*lab-small"):
        load_cluster("lab-smal")


def test_shipped_clusters_still_load():
    from testbed.cluster import CLUSTERS_DIR

    for path in CLUSTERS_DIR.glob("*.yaml"):
        assert load_cluster(path.stem).nodes


def test_quantities_parse_as_before():
    spec = parse_cluster({"name": "c", "groups": [{"name": "a", "cpu": "1500m", "memory": "3Gi", "count": 1,
                                                   "image_pull_bandwidth": "20Mi"}, {"name": "b", "cpu": 2, "memory": 1024}]})
    a, b = spec.nodes
    assert (a.cpu_milli, a.memory_bytes, a.image_pull_bytes_per_s) == (1500, 3 * 2**30, 20 * 2**20)
    assert (b.cpu_milli, b.memory_bytes, b.image_pull_bytes_per_s) == (2000, 1024, 50 * 2**20)


def test_sim_run_with_bad_cluster_is_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(_group(cpu="4Gx"))
    out = tmp_path / "run"
    r = runner.invoke(app, ["sim", "run", "--cluster", str(path), "--workload", "no-such.parquet", "--out", str(out)])
    assert r.exit_code == 1
    assert r.stderr.strip() == f"Error: {path}: field groups.0.cpu: '4Gx' is not a Kubernetes quantity (e.g. \"4\", \"500m\", \"8Gi\")"
    assert not out.exists()
