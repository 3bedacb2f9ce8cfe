"""The Ansible lab: every playbook passes ``--syntax-check`` and the tree passes
``ansible-lint --profile production`` (run once, offline: the collections come from PyPI's
``ansible`` package in the dev extra, nothing from Galaxy); the roles are self-describing
(argument specs cover their defaults), pin the same versions as testbed/kube/versions.py, and apply
only files that ``scoretune kube render`` writes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.kube import versions
from testbed.kube.render import RENDER_LAYOUT

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent
PLAYBOOKS = ["preflight.yml", "site.yml", "knative.yml", "scheduler.yml", "functions.yml", "loadgen.yml", "openwhisk.yml", "teardown.yml"]
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if p.is_dir())


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(NO_COLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", PY_COLORS="0",
               ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def test_every_playbook_passes_syntax_check():
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(ANSIBLE / "inventory" / "example.ini"), "--syntax-check",
         *[str(ANSIBLE / p) for p in PLAYBOOKS]],
        capture_output=True, text=True, env=_env(), timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split(":", 1)[1].strip() for line in result.stdout.splitlines() if line.startswith("playbook:")] == [
        str(ANSIBLE / p) for p in PLAYBOOKS]


def test_ansible_lint_production_profile():
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor", str(ANSIBLE)],
        capture_output=True, text=True, env=_env(), cwd=REPO, timeout=600,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Profile 'production' was required, and it passed." in out


def test_example_inventory_has_the_lab_groups():
    result = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(ANSIBLE / "inventory" / "example.ini"), "--list"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )
    assert result.returncode == 0, result.stderr
    inv = json.loads(result.stdout)
    assert inv["control_plane"]["hosts"] == ["cp-1"]
    assert inv["workers"]["hosts"] == ["worker-1", "worker-2", "worker-3"]
    assert inv["loadgen"]["hosts"] == ["loadgen-1", "loadgen-2"]
    assert sorted(inv["k8s_cluster"]["children"]) == ["control_plane", "workers"]


def _make_dry_run(target: str, **variables: str) -> list[list[str]]:
    """The commands ``make -n TARGET`` would run (``setup`` and ``setup-lab`` taken as done), each split as the shell would."""
    # a clean environment: under `make test` the outer make's MAKELEVEL/MAKEFLAGS would make this
    # one print "Entering directory" lines and inherit the outer flags
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    result = subprocess.run(["make", "--no-print-directory", "-n", "-o", "setup", "-o", "setup-lab", target,
                             *(f"{k}={v}" for k, v in variables.items())],
                            cwd=REPO, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]


def _playbooks(command: list[str]) -> list[str]:
    """The playbooks of an ``ansible-playbook`` command line (after its inventory option)."""
    (i,) = [i for i, word in enumerate(command) if word.endswith("ansible-playbook")]
    words = command[i + 1:]
    return [w for w in words if w.endswith(".yml")]


def test_makefile_runs_the_playbooks_in_order():
    up = [c for c in _make_dry_run("testbed-up", INVENTORY="inv.ini") if any(w.endswith("ansible-playbook") for w in c)]
    assert len(up) == 1 and up[0][up[0].index("-i") + 1] == "inv.ini"
    assert _playbooks(up[0]) == [f"ansible/{p}" for p in
                                 ["preflight.yml", "site.yml", "knative.yml", "scheduler.yml", "functions.yml",
                                  "loadgen.yml"]]
    checks = [c for c in _make_dry_run("testbed-up", INVENTORY="inv.ini") if c[1:3] == ["kube", "check-inventory"]]
    assert [c[3:] for c in checks] == [["inv.ini"]]  # the inventory is checked before any playbook
    (down,) = [c for c in _make_dry_run("testbed-down", INVENTORY="inv.ini")
               if any(w.endswith("ansible-playbook") for w in c)]
    assert _playbooks(down) == ["ansible/teardown.yml"]


def test_makefile_without_inventory_uses_the_embedded_lab():
    for target, verb in (("testbed-up", "up"), ("testbed-down", "down")):
        commands = _make_dry_run(target)
        assert [[Path(c[0]).name, *c[1:]] for c in commands] == [["scoretune", "testbed", verb]], commands
        assert not any(any(w.endswith("ansible-playbook") for w in c) for c in commands)


@pytest.mark.parametrize("role", ROLES)
def test_role_layout_and_argument_specs_cover_the_defaults(role):
    base = ANSIBLE / "roles" / role
    for rel in ("defaults/main.yml", "tasks/main.yml", "meta/main.yml", "meta/argument_specs.yml"):
        assert (base / rel).is_file(), f"{role} lacks {rel}"
    defaults = _yaml(base / "defaults" / "main.yml")
    specs = _yaml(base / "meta" / "argument_specs.yml")["argument_specs"]
    for entry, spec in specs.items():
        assert set(spec["options"]) == set(defaults), f"{role} entry point {entry}: options differ from defaults"
    assert all(name.startswith(role + "_") for name in defaults), f"{role}: defaults must carry the role's prefix"


def _default(role: str, name: str):
    return _yaml(ANSIBLE / "roles" / role / "defaults" / "main.yml")[name]


def test_roles_pin_the_versions_of_versions_py():
    assert _default("kubernetes_packages", "kubernetes_packages_version") == versions.KUBERNETES_VERSION
    assert _default("kubeadm_control_plane", "kubeadm_control_plane_kubernetes_version") == versions.KUBERNETES_VERSION
    assert _default("kubeadm_control_plane", "kubeadm_control_plane_pod_subnet") == versions.POD_SUBNET
    assert _default("cni_flannel", "cni_flannel_version") == versions.FLANNEL_VERSION
    assert _default("knative_serving", "knative_serving_version") == versions.KNATIVE_SERVING_VERSION
    assert _default("knative_serving", "knative_serving_sha256") == versions.KNATIVE_MANIFEST_SHA256
    assert _default("knative_serving", "knative_serving_kourier_version") == versions.NET_KOURIER_VERSION
    assert _default("lab_teardown", "lab_teardown_knative_version") == versions.KNATIVE_SERVING_VERSION
    assert _default("lab_teardown", "lab_teardown_kourier_version") == versions.NET_KOURIER_VERSION
    assert _default("lab_teardown", "lab_teardown_flannel_version") == versions.FLANNEL_VERSION


def _flatten(tasks):
    for task in tasks or []:
        if "block" in task:
            yield from _flatten(task["block"])
        else:
            yield task


def test_roles_apply_only_what_scoretune_renders():
    """Every rendered-file path named in a task is one ``scoretune kube render`` writes, and every
    file it writes is applied by some role."""
    named: set[str] = set()
    pattern = re.compile(r"render_dir \}\}/([a-z]+)/(\{\{ item \}\}|[a-z-]+)\.yaml")
    for path in (ANSIBLE / "roles").rglob("tasks/*.yml"):
        text = path.read_text()
        tasks = list(_flatten(_yaml(path)))
        for folder, leaf in pattern.findall(text):
            if leaf == "{{ item }}":
                prefix = f"render_dir }}}}/{folder}/{{{{ item }}}}.yaml"
                for task in tasks:
                    if prefix in json.dumps(task):
                        named.update(f"{folder}/{item}.yaml" for item in task["loop"])
            else:
                named.add(f"{folder}/{leaf}.yaml")
    assert named <= set(RENDER_LAYOUT), named - set(RENDER_LAYOUT)
    assert set(RENDER_LAYOUT) <= named


def test_the_render_role_runs_and_is_idempotent(tmp_path):
    """The one role that needs no machine, run for real on localhost: it renders the lab, and a
    second run reports nothing changed (the render command says whether any file changed)."""
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"}, "roles": ["scoretune_render"],
    }]))
    out = tmp_path / "manifests"
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
           "-e", f"@{ANSIBLE / 'group_vars' / 'all.yml'}", "-e", f"scoretune_render_dir={out}",
           "-e", f"scoretune_bin={BIN / 'scoretune'}"]
    env = _env() | {"ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles")}
    recaps = []
    for _ in range(2):
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        recaps.append(re.search(r"localhost\s*: ok=(\d+)\s+changed=(\d+)", result.stdout).groups())
    assert recaps == [("2", "1"), ("2", "0")]  # the argument-spec check and the render
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml")) == sorted(RENDER_LAYOUT)


def test_every_download_is_pinned_with_the_checksum_of_versions_py():
    """One list (versions.ARTEFACTS), repeated by the role defaults: version and SHA-256 agree, and
    every get_url in the roles checks a checksum."""
    arts = {a.name: a for a in versions.ARTEFACTS}
    cr, kp, fl = (_yaml(ANSIBLE / "roles" / r / "defaults" / "main.yml")
                  for r in ("container_runtime", "kubernetes_packages", "cni_flannel"))
    assert (cr["container_runtime_containerd_version"], cr["container_runtime_containerd_sha256"]) == (
        arts["containerd"].version, arts["containerd"].sha256)
    assert (cr["container_runtime_runc_version"], cr["container_runtime_runc_sha256"]) == (
        arts["runc"].version, arts["runc"].sha256)
    assert cr["container_runtime_containerd_unit_sha256"] == arts["containerd.service"].sha256["any"]
    assert (kp["kubernetes_packages_cni_version"], kp["kubernetes_packages_cni_sha256"]) == (
        arts["cni-plugins"].version, arts["cni-plugins"].sha256)
    assert (kp["kubernetes_packages_crictl_version"], kp["kubernetes_packages_crictl_sha256"]) == (
        arts["crictl"].version, arts["crictl"].sha256)
    assert fl["cni_flannel_manifest_sha256"] == arts["kube-flannel.yml"].sha256["any"]
    assert arts["kube-flannel.yml"].version == fl["cni_flannel_version"]
    from testbed.kube.render import CRICTL_PATH

    assert CRICTL_PATH == f"{kp['kubernetes_packages_crictl_dir']}/crictl"
    runc = tuple(int(x) for x in arts["runc"].version.split("."))
    assert runc >= (1, 3, 3)  # the November 2025 container-escape fixes
    for digest in (d for a in versions.ARTEFACTS for d in a.sha256.values()):
        assert len(digest) == 64 and int(digest, 16) >= 0
    for tasks in (ANSIBLE / "roles").glob("*/tasks/*.yml"):
        for task in _flatten(_yaml(tasks)):
            get = task.get("ansible.builtin.get_url")
            if get is None:
                continue
            pinned = "checksum" in get or tasks.parts[-3] in ("knative_serving", "kubernetes_packages") and (
                "Release.key" in get["url"] or "knative" in get["url"] or "kourier" in get["url"])
            assert pinned, f"{tasks}: {task['name']} downloads {get['url']} without a checksum"
