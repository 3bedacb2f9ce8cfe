"""A cluster's hidden hardware (testbed/local/hardware.py): defaults equal the process lab's old
quotas, files override by group then node, bad files fail in one line naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.cluster import CLUSTERS_DIR, load_cluster, parse_cluster
from testbed.errors import ClusterSpecError
from testbed.local import cpu
from testbed.local.hardware import HARDWARE_DIR, defaults, load_hardware, parse_hardware

CLUSTER = parse_cluster({"name": "c", "defaults": {"image_pull_bandwidth": "50Mi"}, "groups": [
    {"name": "fast", "count": 2, "cpu": "1500m", "memory": "3Gi", "speed": 1.0},
    {"name": "slow", "count": 2, "cpu": "1", "memory": "2Gi", "speed": 0.5}]})


def test_defaults_are_the_quotas_the_process_lab_always_used():
    hw = defaults(CLUSTER)
    for n in CLUSTER.nodes:
        assert hw[n.name].cpu_milli == cpu.quota_milli(n.cpu_milli, n.speed, 1.0)
        assert hw[n.name].core_speed == n.speed
        assert hw[n.name].link_bytes_per_s == n.image_pull_bytes_per_s
        assert hw[n.name].neighbour is None


def test_a_nodes_own_entry_wins_over_its_groups():
    hw = parse_hardware({"cluster": "c", "nodes": {"fast-1": {"link": "1Mi"}, "fast": {"link": "2Mi", "cpu": "700m"}}}, CLUSTER)
    assert hw["fast-0"].link_bytes_per_s == 2 * 2**20 and hw["fast-0"].cpu_milli == 700
    assert hw["fast-1"].link_bytes_per_s == 2**20
    assert hw["fast-1"].cpu_milli == 700  # what its own entry leaves out comes from its group's
    assert hw["slow-0"] == defaults(CLUSTER)["slow-0"]


def test_a_neighbours_duty_moves_between_its_bounds():
    hw = parse_hardware({"cluster": "c", "nodes": {"slow": {"neighbour": {"cpu": "800m", "duty": [0.2, 1.0], "period": "20s"}}}}, CLUSTER)
    nb = hw["slow-0"].neighbour
    duties = [nb.duty(t / 10) for t in range(400)]
    assert min(duties) == pytest.approx(0.2, abs=1e-3) and max(duties) == pytest.approx(1.0, abs=1e-3)
    assert nb.cpu_milli == 800 and nb.period_s == 20.0


@pytest.mark.parametrize(("data", "field"), [
    ({"cluster": "other", "nodes": {}}, "cluster"),
    ({"cluster": "c", "nodes": {"nope": {"link": "1Mi"}}}, "nodes.nope"),
    ({"cluster": "c", "nodes": {"fast": {"link": "fast"}}}, "nodes.fast.link"),
    ({"cluster": "c", "nodes": {"fast": {"cpu": "-1"}}}, "nodes.fast.cpu"),
    ({"cluster": "c", "nodes": {"fast": {"core_speed": 1.5}}}, "nodes.fast.core_speed"),
    ({"cluster": "c", "nodes": {"fast": {"neighbour": {"cpu": "1", "duty": [0.9, 0.1]}}}}, "nodes.fast.neighbour.duty"),
    ({"cluster": "c", "nodes": {"fast": {"neighbour": {"cpu": "1", "period": "soon"}}}}, "nodes.fast.neighbour.period"),
    ({"cluster": "c", "nodes": {"fast": {"speed": 2}}}, "nodes.fast.speed"),
])
def test_bad_hardware_is_one_line_naming_the_field(data, field):
    with pytest.raises(ClusterSpecError) as err:
        parse_hardware(data, CLUSTER, file="hw.yaml")
    text = str(err.value)
    assert "hw.yaml" in text and field in text and "\n" not in text


def test_a_missing_or_broken_file_names_itself(tmp_path: Path):
    with pytest.raises(ClusterSpecError, match="nope.yaml"):
        load_hardware(CLUSTER, tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [c\n")
    with pytest.raises(ClusterSpecError, match="bad.yaml.*not valid YAML"):
        load_hardware(CLUSTER, bad)


@pytest.mark.parametrize("path", sorted(HARDWARE_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_hardware_file_loads_and_hides_something(path: Path):
    """Each shipped file belongs to a shipped cluster and makes at least one node differ from what
    its spec implies (else the cluster hides nothing)."""
    cluster = load_cluster(CLUSTERS_DIR / path.name)
    hw, source = load_hardware(cluster)
    assert source == str(path)
    assert hw != defaults(cluster)
    assert yaml.safe_load(path.read_text())["cluster"] == cluster.name


def test_three_lab_clusters_hide_hardware():
    assert {p.stem for p in HARDWARE_DIR.glob("*.yaml")} >= {"lab-hidden-cpu", "lab-hidden-links", "lab-hidden-neighbour"}
