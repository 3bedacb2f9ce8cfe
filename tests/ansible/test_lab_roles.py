"""The node-side roles run for real on localhost, with fake ``crictl``, ``docker``, ``ctr``,
``containerd`` and ``scoretune`` commands first on PATH that log their argv: the image modes of
function_images (prebuilt/push preflight, push to a plain-HTTP registry, load under
scoretune.local), containerd's version check, and the containerd configuration template."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml

from testbed.kube.render import LOAD_REGISTRY, ImageSource, lab_documents, write_documents
from testbed.scheduler.config import default_profile

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent

FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
case "$(basename "$0") $1" in
  "crictl pull") [ -n "$FAKE_PULL_FAILS" ] && {{ echo "$FAKE_PULL_FAILS" >&2; exit 1; }} ;;
  "containerd --version") echo "$FAKE_CONTAINERD_VERSION" ;;
  "ctr --namespace") [ "$4" = list ] && [ -n "$FAKE_CTR_IMAGES" ] && printf '%s\\n' $FAKE_CTR_IMAGES ;;
esac
exit 0
"""


def _fakes(tmp_path: Path) -> tuple[Path, Path]:
    bindir, log = tmp_path / "bin", tmp_path / "calls.log"
    bindir.mkdir()
    for name in ("crictl", "docker", "ctr", "containerd", "scoretune"):
        path = bindir / name
        path.write_text(FAKE.format(log=log))
        path.chmod(0o755)
    log.write_text("")
    return bindir, log


def _render(tmp_path: Path, images: ImageSource) -> Path:
    from functions.spec import discover_specs

    specs = discover_specs()
    out = tmp_path / "manifests"
    write_documents(lab_documents(default_profile("scoretune-scheduler"), [specs["float-ops"], specs["aes"]],
                                  images=images), out)
    return out


def _play(tmp_path: Path, role: str, extra: dict, env: dict[str, str], tasks_from: str = "main"
          ) -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Role", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "tasks": [{"name": "Run the role", "ansible.builtin.include_role": {"name": role, "tasks_from": tasks_from}}],
    }]))
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(yaml.safe_dump(extra))
    full_env = dict(os.environ) | {
        "PATH": f"{bindir}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), **env}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e", f"@{ANSIBLE / 'group_vars' / 'all.yml'}",
         "-e", f"@{vars_file}"],
        capture_output=True, text=True, env=full_env, timeout=300,
    )


def _image_vars(tmp_path: Path, out: Path, **more) -> dict:
    return {"scoretune_render_dir": str(out), "scoretune_lab_dir": str(tmp_path / "lab"),
            "function_images_bin": str(tmp_path / "bin" / "scoretune"),
            "function_images_node_archive": str(tmp_path / "node" / "images.tar"),
            "function_images_certs_dir": str(tmp_path / "certs.d"), **more}


def test_prebuilt_preflight_names_the_image_and_the_other_modes(tmp_path):
    _bindir, log = _fakes(tmp_path)
    out = _render(tmp_path, ImageSource("prebuilt"))
    result = _play(tmp_path, "function_images", _image_vars(tmp_path, out, function_images_mode="prebuilt"),
                   {"FAKE_PULL_FAILS": "pulling image: ghcr.io/scoretune/fn-float-ops:0.1.0: not found"})
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "cannot pull ghcr.io/scoretune/fn-float-ops:0.1.0 (function_images_mode=prebuilt)" in text
    assert "function_images_mode=push with function_images_registry=HOST[:PORT][/PATH]" in text
    assert "function_images_mode=load" in text and "not found" in text
    assert log.read_text().splitlines() == ["crictl pull ghcr.io/scoretune/fn-float-ops:0.1.0"]


def test_prebuilt_passes_when_one_node_pulls_an_image(tmp_path):
    _bindir, log = _fakes(tmp_path)
    out = _render(tmp_path, ImageSource("prebuilt"))
    result = _play(tmp_path, "function_images", _image_vars(tmp_path, out, function_images_mode="prebuilt"), {})
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().splitlines() == ["crictl pull ghcr.io/scoretune/fn-float-ops:0.1.0"]


def test_push_to_a_plain_http_registry_configures_containerd(tmp_path):
    _bindir, log = _fakes(tmp_path)
    source = ImageSource("push", "10.0.0.5:5000/lab", insecure=True)
    out = _render(tmp_path, source)
    result = _play(tmp_path, "function_images", _image_vars(
        tmp_path, out, function_images_mode="push", function_images_registry="10.0.0.5:5000/lab",
        function_images_registry_insecure=True), {})
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().splitlines() == [
        "scoretune functions build --push 10.0.0.5:5000/lab",
        "crictl pull 10.0.0.5:5000/lab/fn-float-ops:0.1.0",
    ]
    hosts = tomllib.loads((tmp_path / "certs.d" / "10.0.0.5:5000" / "hosts.toml").read_text())
    assert hosts == {"server": "http://10.0.0.5:5000",
                     "host": {"http://10.0.0.5:5000": {"capabilities": ["pull", "resolve"]}}}
    skip = yaml.safe_load((out / "knative" / "config-deployment.yaml").read_text())["data"]
    assert "10.0.0.5:5000" in skip["registries-skipping-tag-resolving"].split(",")


def test_push_without_a_registry_stops_before_anything_runs(tmp_path):
    _bindir, log = _fakes(tmp_path)
    out = _render(tmp_path, ImageSource("prebuilt"))
    result = _play(tmp_path, "function_images", _image_vars(tmp_path, out, function_images_mode="push"), {})
    assert result.returncode != 0
    assert "function_images_mode must be prebuilt, push (with function_images_registry" in result.stdout
    assert log.read_text() == ""


def test_load_mode_names_the_images_for_scoretune_local_and_imports_them(tmp_path):
    _bindir, log = _fakes(tmp_path)
    out = _render(tmp_path, ImageSource("load"))
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "function-images.tar").write_bytes(b"archive")  # what the fake docker save "wrote"
    (tmp_path / "node").mkdir()
    result = _play(tmp_path, "function_images", _image_vars(tmp_path, out, function_images_mode="load"), {})
    assert result.returncode == 0, result.stdout + result.stderr
    archive = tmp_path / "lab" / "function-images.tar"
    node = tmp_path / "node" / "images.tar"
    assert log.read_text().splitlines() == [
        "scoretune functions build",
        f"docker tag ghcr.io/scoretune/fn-float-ops:0.1.0 {LOAD_REGISTRY}/fn-float-ops:0.1.0",
        f"docker tag ghcr.io/scoretune/fn-aes:0.1.0 {LOAD_REGISTRY}/fn-aes:0.1.0",
        f"docker save -o {archive} {LOAD_REGISTRY}/fn-float-ops:0.1.0 {LOAD_REGISTRY}/fn-aes:0.1.0",
        "ctr --namespace k8s.io images list --quiet",
        f"ctr --namespace k8s.io images import {node}",
    ]
    # a second run with the same archive and both images present imports nothing
    log.write_text("")
    result = _play(tmp_path, "function_images", _image_vars(tmp_path, out, function_images_mode="load"),
                   {"FAKE_CTR_IMAGES": f"{LOAD_REGISTRY}/fn-float-ops:0.1.0 {LOAD_REGISTRY}/fn-aes:0.1.0"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().splitlines()[-1] == "ctr --namespace k8s.io images list --quiet"


@pytest.mark.parametrize(("printed", "ok"), [
    ("containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7", True),
    ("containerd containerd.io 2.0.0 207ad711", True),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1", False),
    ("containerd github.com/containerd/containerd 1.7.24 88bf19b", False),
])
def test_containerd_older_than_2_is_refused_with_what_to_do(tmp_path, printed, ok):
    _fakes(tmp_path)
    result = _play(tmp_path, "container_runtime", {}, {"FAKE_CONTAINERD_VERSION": printed}, tasks_from="check")
    assert (result.returncode == 0) is ok, result.stdout + result.stderr
    if not ok:
        text = " ".join(result.stdout.split())
        assert "is too old: Kubernetes 1.36 needs containerd >= 2.0.0" in text
        assert "container_runtime_install=release" in text


def test_containerd_config_template_sets_the_systemd_cgroup_driver():
    defaults = yaml.safe_load((ANSIBLE / "roles" / "container_runtime" / "defaults" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = env.from_string((ANSIBLE / "roles" / "container_runtime" / "templates" / "config.toml.j2").read_text()).render(
        ansible_managed="managed", **{k: v for k, v in defaults.items() if "{{" not in str(v)})
    doc = tomllib.loads(text)
    assert doc["version"] == 3  # containerd 2.x's schema: the plugin names below exist only there
    plugins = doc["plugins"]
    runc = plugins["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2" and runc["options"]["SystemdCgroup"] is True
    images = plugins["io.containerd.cri.v1.images"]
    assert images["registry"]["config_path"] == "/etc/containerd/certs.d"
    assert images["pinned_images"]["sandbox"].startswith("registry.k8s.io/pause:")
    function_images = yaml.safe_load((ANSIBLE / "roles" / "function_images" / "defaults" / "main.yml").read_text())
    assert function_images["function_images_certs_dir"] == images["registry"]["config_path"]
