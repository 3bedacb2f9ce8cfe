"""The OCI image builder's pure parts: deterministic layers, one library layer per dependency set,
the function layer's contents, and a missing tool named in one line."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from functions import oci
from functions.build import RUNTIME_FILES, RUNTIME_REQUIREMENTS
from functions.spec import discover_specs

SPECS = discover_specs()


def test_layers_are_deterministic(tmp_path: Path):
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("x")
    (root / "z.txt").write_text("y")
    one, two = tmp_path / "1.tar", tmp_path / "2.tar"
    oci._deterministic_tar(root, one)
    (root / "z.txt").touch()  # a newer mtime must not change the layer
    oci._deterministic_tar(root, two)
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tar:
        assert [m.name for m in tar.getmembers()] == ["a", "a/b", "a/b/f.txt", "z.txt"]
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())


def test_functions_that_share_dependencies_share_their_library_layer():
    assert oci.library_set(SPECS["matmul"]) == oci.library_set(SPECS["linpack"]) != ()
    assert oci.library_set(SPECS["float-ops"]) == ()
    assert not set(oci.library_set(SPECS["thumbnailer"])) & set(RUNTIME_REQUIREMENTS)


def test_the_function_layer_holds_the_runtime_and_the_functions_own_directory():
    members = oci.function_members(SPECS["dynamic-html"])
    assert {f"app/functions/{n}" for n in RUNTIME_FILES} <= set(members)
    own = [m for m in members if m.startswith("app/functions/dynamic_html/")]
    assert "app/functions/dynamic_html/handler.py" in own and "app/functions/dynamic_html/spec.yaml" in own
    assert not [m for m in members if "__pycache__" in m or m.endswith(".pyc")]
    assert not [m for m in members if m.startswith("app/functions/matmul/")]


def test_a_missing_tool_is_one_line_naming_the_package(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(oci.shutil, "which", lambda exe: None if exe == "umoci" else f"/usr/bin/{exe}")
    with pytest.raises(oci.OciBuildError) as err:
        oci.OciBuilder(tmp_path).build([SPECS["float-ops"]])
    assert "umoci" in str(err.value) and "make setup-containers" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "layout").exists()  # nothing half-built
