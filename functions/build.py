"""Container images of the function suite: one Dockerfile template, one build context per function,
built (and optionally pushed) through the Docker Engine API with the ``docker`` SDK.

A build context is a tar archive holding exactly what the image needs and nothing else:

    Dockerfile            rendered from functions/Dockerfile.j2
    requirements.txt      the runtime's requirements + the spec's ``requirements``
    functions/__init__.py, errors.py, payload.py, runtime.py    the shared runtime
    functions/<pkg>/...   the function's own directory (handler, spec.yaml, templates)

The archive is deterministic (sorted entries, zero mtimes and owners), so the same sources give
the same context digest — the tests pin its contents, and a rebuild can be told apart from a
change. Contexts are always written to disk first (``build/functions/<name>.tar``), so a machine
without a Docker engine still produces exactly what it would have sent.

What users get without an engine: ``scoretune functions build`` writes the contexts and then
fails with one line, because the images it was asked for do not exist; ``--context-only`` writes
the contexts and succeeds without looking for an engine.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from functions.errors import FunctionsError
from functions.runtime import SINGLE_THREAD_ENV
from functions.spec import FUNCTIONS_DIR, FunctionSpec
from functions.specfile import mib_quantity, update_spec_file

log = logging.getLogger(__name__)

BASE_IMAGE = "python:3.11-slim"
CONTAINER_PORT = 8080
CONTAINER_UID = 10001
# What functions/runtime.py imports, with the ranges pyproject.toml allows.
RUNTIME_REQUIREMENTS = ("starlette>=0.36,<1", "uvicorn>=0.27,<1", "anyio>=3.6.2,<5", "PyYAML>=6,<7")
RUNTIME_FILES = ("__init__.py", "errors.py", "payload.py", "platform.py", "openwhisk.py", "runtime.py")
TEMPLATE = "Dockerfile.j2"
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


class EngineUnavailable(FunctionsError):
    """No Docker engine answered; the build contexts were written anyway."""


def function_dir(spec: FunctionSpec) -> Path:
    """The directory that holds the spec (and so the handler package)."""
    if spec.path is not None:
        return spec.path.parent
    return FUNCTIONS_DIR / spec.handler.split(":")[0].split(".")[1]


def render_dockerfile(spec: FunctionSpec, *, base_image: str = BASE_IMAGE) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(FUNCTIONS_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(TEMPLATE).render(
        name=spec.name,
        description=spec.description.replace('"', "'").replace("\n", " "),
        base_image=base_image,
        port=CONTAINER_PORT,
        uid=CONTAINER_UID,
        spec_sha256=spec_digest(spec),
        thread_env=SINGLE_THREAD_ENV,
    )


def spec_digest(spec: FunctionSpec) -> str:
    """sha256 of the spec file as written (or of its name when it has no file)."""
    data = spec.path.read_bytes() if spec.path is not None else spec.name.encode()
    return hashlib.sha256(data).hexdigest()


def requirements_txt(spec: FunctionSpec) -> str:
    return "".join(f"{r}\n" for r in (*RUNTIME_REQUIREMENTS, *spec.requirements))


def _function_files(directory: Path) -> list[Path]:
    files = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if path.is_dir() or any(p in _SKIP_DIRS for p in rel.parts) or path.suffix in _SKIP_SUFFIXES:
            continue
        files.append(path)
    return files


def context_members(spec: FunctionSpec, *, base_image: str = BASE_IMAGE) -> dict[str, bytes]:
    """Archive path -> content of the build context of ``spec``, in archive order."""
    members: dict[str, bytes] = {
        "Dockerfile": render_dockerfile(spec, base_image=base_image).encode(),
        "requirements.txt": requirements_txt(spec).encode(),
    }
    for name in RUNTIME_FILES:
        members[f"functions/{name}"] = (FUNCTIONS_DIR / name).read_bytes()
    directory = function_dir(spec)
    for path in _function_files(directory):
        members[f"functions/{directory.name}/{path.relative_to(directory).as_posix()}"] = path.read_bytes()
    return members


def build_context(spec: FunctionSpec, *, base_image: str = BASE_IMAGE) -> bytes:
    """The deterministic, uncompressed tar the engine receives for ``spec``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in context_members(spec, base_image=base_image).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def image_ref(spec: FunctionSpec, registry: str | None = None) -> str:
    """The spec's image, or the same repository name and tag under ``registry``."""
    if not registry:
        return spec.image
    last = spec.image.rsplit("/", 1)[-1]
    return f"{registry.rstrip('/')}/{last}"


def split_ref(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); a colon in a registry host:port is not a tag."""
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, "latest"


def write_contexts(
    specs: Iterable[FunctionSpec], directory: Path, *, base_image: str = BASE_IMAGE
) -> list[Path]:
    """Write ``<directory>/<name>.tar`` for every spec; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for spec in specs:
        path = directory / f"{spec.name}.tar"
        path.write_bytes(build_context(spec, base_image=base_image))
        paths.append(path)
    return paths


@dataclass(frozen=True)
class BuildResult:
    name: str
    image: str
    image_id: str
    size_bytes: int
    pushed: bool
    context_path: Path


def engine_address() -> str:
    """Where the docker SDK looks for an engine (``docker.from_env`` reads ``DOCKER_HOST``)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client() -> Any:
    """``docker.from_env()``, or :class:`EngineUnavailable` naming the address tried."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env()
        client.ping()
    except DockerException as err:
        raise EngineUnavailable(
            f"no Docker engine reachable at {engine_address()} ({type(err).__name__})"
        ) from None
    return client


def _push(client: Any, ref: str) -> None:
    repo, tag = split_ref(ref)
    for line in client.images.push(repo, tag=tag, stream=True, decode=True):
        if isinstance(line, dict) and line.get("error"):
            raise FunctionsError(f"push of {ref} failed: {line['error']}")


def write_image_size(spec: FunctionSpec, size_bytes: int) -> FunctionSpec:
    """Record a built image's size as the spec's ``image.size`` (whole MiB, rounded up), so the
    simulator's pull times and ImageLocality scores use the real figure."""
    if spec.path is None:
        raise FunctionsError(f"{spec.name}: spec has no file to write the image size to")
    size = mib_quantity(size_bytes)

    def change(data: dict[str, Any]) -> None:
        data["image"]["size"] = size

    return update_spec_file(spec.path, change)


def build_images(
    specs: Sequence[FunctionSpec],
    *,
    context_dir: Path,
    registry: str | None = None,
    push: bool = False,
    client: Any = None,
    base_image: str = BASE_IMAGE,
) -> list[BuildResult]:
    """Write every context, then build each image through the engine (and push it).

    ``client`` is a ``docker.DockerClient``; by default one from the environment. Without an
    engine this raises :class:`EngineUnavailable` after the contexts are on disk.
    """
    paths = write_contexts(specs, context_dir, base_image=base_image)
    if client is None:
        try:
            client = docker_client()
        except EngineUnavailable as err:
            raise EngineUnavailable(
                f"{err}; build contexts for {len(paths)} function(s) written to {context_dir}"
            ) from None
    from docker.errors import APIError, BuildError

    results = []
    for spec, path in zip(specs, paths, strict=True):
        ref = image_ref(spec, registry)
        log.info("building %s from %s", ref, path)
        try:
            with path.open("rb") as context:
                image, _logs = client.images.build(
                    fileobj=context,
                    custom_context=True,
                    tag=ref,
                    rm=True,
                    labels={"io.scoretune.function": spec.name},
                )
        except BuildError as err:
            raise FunctionsError(f"build of {spec.name} failed: {err.msg}") from None
        except APIError as err:
            raise FunctionsError(f"build of {spec.name} failed: {err.explanation or err}") from None
        if push:
            _push(client, ref)
        results.append(
            BuildResult(
                name=spec.name,
                image=ref,
                image_id=str(image.id),
                size_bytes=int(image.attrs.get("Size", 0)),
                pushed=push,
                context_path=path,
            )
        )
    return results
