"""A bad lab inventory is refused before Ansible touches a machine, one line per problem naming
the file and the host or group (read with Ansible's own parser); the kubeadm configuration
registers nodes under their inventory names and puts the lab addresses on the certificate."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml
from typer.testing import CliRunner

from agent.cli import app
from functions.errors import InputError
from testbed.kube.inventory import inventory_problems

ROOT = Path(__file__).resolve().parents[3]
GOOD = """[control_plane]
cp-1 ansible_host=10.0.0.10
[workers]
worker-1 ansible_host=10.0.0.11
worker-2 ansible_host=10.0.0.12
[loadgen]
loadgen-1 ansible_host=10.0.0.20
[k8s_cluster:children]
control_plane
workers
"""


def _inv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.ini"
    path.write_text(text)
    return path


def test_the_example_and_a_good_inventory_pass(tmp_path):
    assert inventory_problems(ROOT / "ansible" / "inventory" / "example.ini") == []
    assert inventory_problems(_inv(tmp_path, GOOD)) == []
    assert inventory_problems(_inv(tmp_path, GOOD + "[openwhisk_invokers]\nworker-2\n")) == []
    vagrant = GOOD.replace("ansible_host=10.0.0.1", "ansible_host=127.0.0.1 ansible_port=220")
    assert inventory_problems(_inv(tmp_path, vagrant)) == []  # one NAT address, one SSH port each


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.replace("[loadgen]\nloadgen-1 ansible_host=10.0.0.20\n", ""),
     "group [loadgen] is missing or empty (needs at least one host)"),
    (lambda t: t.replace("worker-2 ansible_host=10.0.0.12", "worker-2 ansible_host=10.0.0.11"),
     "hosts worker-1, worker-2 share the address 10.0.0.11:22; each machine is listed once"),
    (lambda t: t.replace("[workers]\n", "[workers]\ncp-1\n"),
     "host(s) cp-1 are in both [control_plane] and [workers]; list each node once"),
    (lambda t: t.replace("loadgen-1 ansible_host=10.0.0.20", "loadgen-1"),
     "load generator loadgen-1 has no address (set ansible_host=IP or scoretune_node_address=IP"),
    (lambda t: t.replace("worker-1 ansible_host", "Worker_1 ansible_host"),
     "host 'Worker_1' is not a valid Kubernetes node name"),
    (lambda t: t.replace("worker-1 ansible_host=10.0.0.11", "worker-1 ansible_host=10.0.0.11 scoretune_node_address=eth1"),
     "host worker-1: scoretune_node_address='eth1' is not an IP address"),
    (lambda t: t + "[openwhisk_invokers]\n",
     "group [openwhisk_invokers] is empty: OpenWhisk would have no invoker"),
    (lambda t: t + "[openwhisk_invokers]\ncp-1\n",
     "invoker cp-1 is not in [workers]"),
])
def test_each_bad_inventory_is_one_line_naming_file_and_host(tmp_path, change, message):
    path = _inv(tmp_path, change(GOOD))
    problems = inventory_problems(path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}: {message}"), problems


def test_the_command_exits_non_zero_with_the_lines(tmp_path):
    path = _inv(tmp_path, GOOD.replace("loadgen-1 ansible_host=10.0.0.20", "loadgen-1"))
    result = CliRunner().invoke(app, ["kube", "check-inventory", str(path)])
    assert result.exit_code == 1 and "load generator loadgen-1 has no address" in result.output
    assert "Traceback" not in result.output
    with pytest.raises(InputError, match="inventory file does not exist"):
        inventory_problems(tmp_path / "missing.ini")
    binary = tmp_path / "binary.ini"
    binary.write_bytes(b"[control_plane\n\x00\xff")
    with pytest.raises(InputError, match=r"binary.ini: Ansible cannot parse it"):
        inventory_problems(binary)


def test_kubeadm_registers_the_inventory_name_and_certifies_the_lab_addresses():
    role = ROOT / "ansible" / "roles" / "kubeadm_control_plane"
    text = (role / "templates" / "kubeadm-config.yaml.j2").read_text()
    out = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(
        ansible_managed="test", kubeadm_control_plane_advertise_address="192.168.56.10",
        kubeadm_control_plane_endpoint="lab.example.org", kubeadm_control_plane_cert_sans=["203.0.113.7"],
        kubeadm_control_plane_node_name="cp-1", kubeadm_control_plane_cri_socket="unix:///run/containerd/containerd.sock",
        kubeadm_control_plane_kubernetes_version="1.36.0", kubeadm_control_plane_pod_subnet="10.244.0.0/16",
        kubeadm_control_plane_service_subnet="10.96.0.0/12")
    init, cluster, _ = yaml.safe_load_all(out)
    assert init["nodeRegistration"]["name"] == "cp-1" and init["localAPIEndpoint"]["advertiseAddress"] == "192.168.56.10"
    assert cluster["controlPlaneEndpoint"] == "lab.example.org:6443"
    assert cluster["apiServer"]["certSANs"] == ["192.168.56.10", "lab.example.org", "203.0.113.7"]
