"""Build contexts (what the engine would receive) and the docker-SDK build flow."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from functions.build import (
    EngineUnavailable,
    build_context,
    build_images,
    context_members,
    image_ref,
    render_dockerfile,
    requirements_txt,
    split_ref,
    write_contexts,
)
from functions.spec import discover_specs

SPECS = discover_specs()


def test_context_holds_the_runtime_and_only_the_functions_own_directory() -> None:
    names = list(context_members(SPECS["dynamic-html"]))
    assert names == [
        "Dockerfile",
        "requirements.txt",
        "functions/__init__.py",
        "functions/errors.py",
        "functions/payload.py",
        "functions/platform.py",
        "functions/openwhisk.py",
        "functions/runtime.py",
        "functions/dynamic_html/__init__.py",
        "functions/dynamic_html/handler.py",
        "functions/dynamic_html/spec.yaml",
        "functions/dynamic_html/template.html.j2",
    ]


@pytest.mark.parametrize("name", ["float-ops", "dynamic-html"])
def test_the_images_functions_directory_alone_serves_the_function(name: str, tmp_path: Path) -> None:
    """The runtime files an image ships must be all the server imports: with the context's
    ``functions/`` first on the path (and the repository's out of reach), the server builds its
    app for the function under both protocols. A runtime file left out of RUNTIME_FILES (as
    ``platform.py`` once was) fails here, as it would fail every container at start."""
    for member, data in context_members(SPECS[name]).items():
        if member.startswith("functions/"):
            (tmp_path / member).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / member).write_bytes(data)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        # an editable install's finder would find the repository's modules by name: drop it
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "import functions, functions.runtime as r\n"
        "assert functions.__file__.startswith(sys.argv[1]), functions.__file__\n"
        "import functions.openwhisk\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-800:]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_context_is_deterministic_and_free_of_bytecode(name: str) -> None:
    data = build_context(SPECS[name])
    assert data == build_context(SPECS[name])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert all(m.mtime == 0 and m.uid == 0 and m.isfile() for m in members)
    assert not [m.name for m in members if "__pycache__" in m.name or m.name.endswith(".pyc")]
    assert f"functions/{SPECS[name].path.parent.name}/spec.yaml" in {m.name for m in members}


def test_dockerfile_runs_the_one_function_as_non_root_on_port_8080() -> None:
    text = render_dockerfile(SPECS["matmul"])
    assert text.startswith("# Image of the scoretune function matmul")
    assert "FROM python:3.11-slim\n" in text
    assert 'CMD ["python", "-m", "functions.runtime", "--function", "matmul", "--host", "0.0.0.0"]' in text
    assert "USER 10001" in text and "EXPOSE 8080" in text and "PORT=8080" in text
    assert "{{" not in text


def test_requirements_are_the_runtimes_plus_the_specs() -> None:
    assert requirements_txt(SPECS["thumbnailer"]).splitlines() == [
        "starlette>=0.36,<1",
        "uvicorn>=0.27,<1",
        "anyio>=3.6.2,<5",
        "PyYAML>=6,<7",
        "Pillow>=10,<13",
    ]
    assert "numpy" in requirements_txt(SPECS["linpack"]) and "numpy" not in requirements_txt(
        SPECS["float-ops"]
    )


def test_an_unpacked_context_runs_its_function_without_the_repository(tmp_path: Path) -> None:
    """The context is self-sufficient: from it alone the runtime finds the spec and the handler."""
    with tarfile.open(fileobj=io.BytesIO(build_context(SPECS["aes"]))) as tar:
        tar.extractall(tmp_path, filter="data")
    code = (
        "import json, functions.runtime as r; c = r.load_runtime_config('aes'); h, _ = r.import_handler(c.handler);"
        "print(json.dumps({'file': r.__file__, 'out': h({**c.payload, 'num_of_iterations': 1})}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # ``python -c`` puts the working directory first on sys.path, as WORKDIR /app does in the image.
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert Path(result["file"]).resolve().is_relative_to(tmp_path.resolve())
    assert result["out"]["num_of_iterations"] == 1


def test_without_an_engine_the_contexts_are_written_and_one_line_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    specs = [SPECS["float-ops"], SPECS["aes"]]
    with pytest.raises(EngineUnavailable) as err:
        build_images(specs, context_dir=tmp_path / "ctx")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"no Docker engine reachable at unix://{tmp_path}/no-such-docker.sock")
    assert message.endswith(f"build contexts for 2 function(s) written to {tmp_path / 'ctx'}")
    assert sorted(p.name for p in (tmp_path / "ctx").iterdir()) == ["aes.tar", "float-ops.tar"]
    assert (tmp_path / "ctx" / "aes.tar").read_bytes() == build_context(SPECS["aes"])


class RecordingImages:
    """Stands in for ``DockerClient.images`` to check the calls the build makes (not an engine)."""

    def __init__(self) -> None:
        self.builds: list[dict] = []
        self.pushes: list[tuple[str, str]] = []

    def build(self, **kwargs):
        fileobj = kwargs.pop("fileobj")
        kwargs["context"] = fileobj.read()
        self.builds.append(kwargs)
        return SimpleNamespace(id=f"sha256:{len(self.builds):064d}", attrs={"Size": 123 * 2**20}), iter(())

    def push(self, repository: str, tag: str, stream: bool, decode: bool):
        self.pushes.append((repository, tag))
        return iter([{"status": "Pushed"}])


def test_build_sends_each_context_with_its_tag_and_pushes_to_the_registry(tmp_path: Path) -> None:
    images = RecordingImages()
    client = SimpleNamespace(images=images)
    specs = [SPECS["matmul"], SPECS["aes"]]
    results = build_images(
        specs, context_dir=tmp_path, registry="localhost:5000/lab", push=True, client=client
    )
    assert [b["tag"] for b in images.builds] == [
        "localhost:5000/lab/fn-matmul:0.1.0",
        "localhost:5000/lab/fn-aes:0.1.0",
    ]
    assert all(b["custom_context"] is True for b in images.builds)
    assert images.builds[0]["context"] == build_context(SPECS["matmul"])
    assert images.pushes == [
        ("localhost:5000/lab/fn-matmul", "0.1.0"),
        ("localhost:5000/lab/fn-aes", "0.1.0"),
    ]
    assert [r.size_bytes for r in results] == [123 * 2**20] * 2 and all(r.pushed for r in results)


def test_image_references() -> None:
    spec = SPECS["float-ops"]
    assert image_ref(spec) == spec.image
    assert image_ref(spec, "registry.local:5000/") == "registry.local:5000/fn-float-ops:0.1.0"
    assert split_ref("localhost:5000/fn") == ("localhost:5000/fn", "latest")
    assert split_ref("ghcr.io/a/b:1.2") == ("ghcr.io/a/b", "1.2")


def test_write_contexts_creates_the_directory(tmp_path: Path) -> None:
    paths = write_contexts([SPECS["linpack"]], tmp_path / "a" / "b")
    assert [p.name for p in paths] == ["linpack.tar"] and paths[0].stat().st_size > 0


def test_a_built_image_size_is_written_into_the_spec(tmp_path: Path) -> None:
    import shutil

    from functions.build import write_image_size
    from functions.spec import load_spec

    shutil.copytree(SPECS["aes"].path.parent, tmp_path / "aes")
    spec = load_spec(tmp_path / "aes" / "spec.yaml")
    updated = write_image_size(spec, 140 * 2**20 + 5)
    assert updated.image_size_bytes == 141 * 2**20
    assert "  size: 141Mi\n" in (tmp_path / "aes" / "spec.yaml").read_text()
    assert (updated.work_cpu_s, updated.payload) == (spec.work_cpu_s, spec.payload)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_requirements_cover_every_third_party_import_in_the_context(name: str) -> None:
    """Each module the image runs imports only the stdlib, the context itself, or a listed requirement."""
    import ast
    import importlib.metadata
    import re

    providers = importlib.metadata.packages_distributions()
    required = {
        re.split(r"[<>=!~ ;\[]", line, maxsplit=1)[0].lower().replace("_", "-")
        for line in requirements_txt(SPECS[name]).splitlines()
    }
    for path, data in context_members(SPECS[name]).items():
        if not path.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(data)):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in ("functions", "__future__"):
                    continue
                dists = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
                assert dists & required, f"{path} imports {top} ({dists}), not in requirements.txt"
