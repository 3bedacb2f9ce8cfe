"""OCI images of the function suite, built on this machine without an engine or a registry outside.

The embedded lab's container runtime pulls real images, so it needs real ones, layered the way a
``FROM python:3.11-slim`` + ``pip install`` + ``COPY`` build layers them, so that what nodes share
on a real cluster they share here:

1. **base**: a minimal Debian root with Python from Debian's packages, made by ``mmdebstrap``
   (variant ``minbase`` + ``python3``; docs, man pages and locales left out as ``-slim`` images do);
2. **runtime**: the function server's requirements (:data:`functions.build.RUNTIME_REQUIREMENTS`),
   installed from PyPI wheels with ``pip install --target`` into ``/usr/local/lib/python3.11/dist-packages``;
3. **libraries**: one layer per distinct dependency set of the suite (numpy, Pillow, ...), so
   matmul and linpack share theirs;
4. **function**: ``/app/functions/`` -- the shared runtime files and the function's own directory.

Layers are tar archives written deterministically (sorted, zero mtimes and owners) and added with
``umoci raw add-layer``; the image config (entrypoint, env, user, working directory) with
``umoci config``. Everything is cached under one directory and keyed by content: a layer's key is
the sha256 of what went into it (and of the key of the layer below), an image is rebuilt only when
a key changes, and the OCI layout itself is content-addressed. The compressed size of each image
(the sum of its layer blobs, what a node downloads from scratch) is what the lab shows the
scheduler in ``Node.status.images``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from functions.build import CONTAINER_UID, RUNTIME_FILES, RUNTIME_REQUIREMENTS, _function_files, function_dir
from functions.errors import FunctionsError
from functions.runtime import SINGLE_THREAD_ENV
from functions.spec import FunctionSpec

log = logging.getLogger(__name__)

DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3",)
PYTHON_SITE = "usr/local/lib/python3.11/dist-packages"
"""Debian's python3 puts /usr/local/lib/python3.X/dist-packages on sys.path (site.py's Debian patch)."""
WHEEL_PLATFORM = ("--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311")
SLIM_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
LAYOUT_FORMAT = 1
TOOLS = {"mmdebstrap": "mmdebstrap", "umoci": "umoci"}
"""Executable -> the Debian package that provides it."""


def read_manifest(layout: Path, tag: str) -> dict:
    """The manifest of ``tag`` in an OCI image layout (``index.json``'s ``ref.name`` annotation)."""
    index = json.loads((layout / "index.json").read_text())
    desc = next(m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
    return json.loads(blob_path(layout, desc["digest"]).read_text())


def blob_path(layout: Path, digest: str) -> Path:
    algo, hexd = digest.split(":", 1)
    return layout / "blobs" / algo / hexd


class OciBuildError(FunctionsError):
    """An OCI image could not be built (a tool missing or failing); the message names which."""


def missing_tools(tools: dict[str, str] = TOOLS) -> list[str]:
    """The Debian packages to install for the executables not on PATH."""
    return sorted({pkg for exe, pkg in tools.items() if shutil.which(exe) is None})


def _run(args: Sequence[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise OciBuildError(f"{what}: {args[0]} is not installed (`make setup-containers`)") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise OciBuildError(f"{what} failed (exit {proc.returncode}): {' | '.join(tail)}")
    return proc


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()


def _deterministic_tar(root: Path, out: Path, *, prefix: str = "") -> None:
    """``root``'s tree as an uncompressed tar: sorted names, mtime 0, owner root."""

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            tar.add(path, arcname=f"{prefix}{rel}", recursive=False, filter=norm)


def _members_tar(members: dict[str, bytes], out: Path) -> None:
    """A layer from in-memory files (directories implied by the paths are added, mode 0755)."""
    dirs = sorted({"/".join(name.split("/")[:i]) for name in members for i in range(1, name.count("/") + 1)})
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(members[name]))


def function_members(spec: FunctionSpec) -> dict[str, bytes]:
    """The function layer: ``app/functions/<runtime files>`` and the function's own directory."""
    from functions.spec import FUNCTIONS_DIR

    members = {f"app/functions/{name}": (FUNCTIONS_DIR / name).read_bytes() for name in RUNTIME_FILES}
    directory = function_dir(spec)
    for path in _function_files(directory):
        members[f"app/functions/{directory.name}/{path.relative_to(directory).as_posix()}"] = path.read_bytes()
    return members


def library_set(spec: FunctionSpec) -> tuple[str, ...]:
    """The function's own requirements (beyond the runtime's), sorted: its library layer's identity."""
    return tuple(sorted(set(spec.requirements) - set(RUNTIME_REQUIREMENTS)))


@dataclass(frozen=True)
class OciImage:
    """One built image: where it is (layout + tag), its layers and its compressed size."""

    function: str
    image: str
    """The spec's image name (what clusters list and the scheduler sees)."""
    tag: str
    key: str
    layers: tuple[str, ...]
    size_bytes: int


@dataclass
class OciBuilder:
    """Builds (or finds in its cache) the suite's images in one OCI layout under ``cache_dir``."""

    cache_dir: Path
    python: str = sys.executable

    @property
    def layout(self) -> Path:
        return self.cache_dir / "layout"

    @property
    def index_file(self) -> Path:
        return self.cache_dir / "images.json"

    def _tag_exists(self, tag: str) -> bool:
        try:
            index = json.loads((self.layout / "index.json").read_text())
        except (OSError, ValueError):
            return False
        return any(m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag for m in index.get("manifests") or [])

    def _ensure_layout(self) -> None:
        if not (self.layout / "index.json").exists():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            _run(["umoci", "init", "--layout", str(self.layout)], "umoci init")
        if not self._tag_exists("empty"):
            _run(["umoci", "new", "--image", f"{self.layout}:empty"], "umoci new")

    def _add_layer(self, parent: str, tar_path: Path, tag: str) -> None:
        if not self._tag_exists(tag):
            _run(["umoci", "raw", "add-layer", "--image", f"{self.layout}:{parent}", str(tar_path), "--tag", tag],
                 f"umoci raw add-layer ({tag})")

    # --- layers ---
    def base_key(self) -> str:
        return _digest("base", DEBIAN_SUITE, *BASE_PACKAGES, *SLIM_EXCLUDES)

    def _base(self) -> str:
        key = self.base_key()
        tag = f"base-{key[:16]}"
        if self._tag_exists(tag):
            return tag
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            out = Path(tmp) / "base.tar"
            args = ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "--skip=output/dev", "--quiet"]
            args += [f"--dpkgopt=path-exclude={p}" for p in SLIM_EXCLUDES]
            log.info("building the base layer (Debian %s minbase + %s) with mmdebstrap", DEBIAN_SUITE, " ".join(BASE_PACKAGES))
            _run([*args, DEBIAN_SUITE, str(out)], "mmdebstrap (the base layer)", env={**os.environ, "SOURCE_DATE_EPOCH": "0"})
            self._add_layer("empty", out, tag)
        return tag

    def _pip_layer(self, parent: str, parent_key: str, requirements: Sequence[str], what: str) -> tuple[str, str]:
        key = _digest(what, parent_key, *requirements)
        tag = f"{what}-{key[:16]}"
        if self._tag_exists(tag):
            return tag, key
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            root = Path(tmp) / "root"
            site = root / PYTHON_SITE
            site.mkdir(parents=True)
            wheels = Path(tmp) / "wheels"
            pip = [self.python, "-m", "pip", "--disable-pip-version-check", "--quiet"]
            # a requirement published only as an sdist (pyaes) is built into a wheel first: pip
            # installs for another platform from wheels only
            _run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), *requirements],
                 f"pip wheel of {', '.join(requirements)} (the {what} layer)")
            _run([*pip, "install", "--no-compile", "--target", str(site), "--find-links", str(wheels),
                  "--only-binary=:all:", *WHEEL_PLATFORM, *requirements],
                 f"pip install of {', '.join(requirements)} (the {what} layer)")
            for junk in site.glob("bin"):
                shutil.rmtree(junk)
            out = Path(tmp) / "layer.tar"
            _deterministic_tar(root, out)
            self._add_layer(parent, out, tag)
        return tag, key

    def build(self, specs: Iterable[FunctionSpec]) -> dict[str, OciImage]:
        """Every spec's image, built or found in the cache; function name -> image."""
        missing = missing_tools()
        if missing:
            raise OciBuildError(f"building OCI images needs {', '.join(missing)}: install with `make setup-containers` "
                                f"(apt-get install {' '.join(missing)})")
        self._ensure_layout()
        base = self._base()
        runtime, runtime_key = self._pip_layer(base, self.base_key(), RUNTIME_REQUIREMENTS, "runtime")
        built: dict[str, OciImage] = {}
        for spec in sorted(specs, key=lambda s: s.name):
            libs = library_set(spec)
            parent, parent_key = (runtime, runtime_key)
            if libs:
                parent, parent_key = self._pip_layer(runtime, runtime_key, libs, "libs")
            members = function_members(spec)
            key = _digest("function", parent_key, spec.name, *(f"{k}:{_digest(v)}" for k, v in sorted(members.items())))
            tag = f"fn-{spec.name}-{key[:16]}"
            if not self._tag_exists(tag):
                with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
                    out = Path(tmp) / "fn.tar"
                    _members_tar(members, out)
                    self._add_layer(parent, out, f"{tag}-raw")
                    env = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", **SINGLE_THREAD_ENV,
                           "PATH": "/usr/local/bin:/usr/bin:/bin"}
                    cmd = ["umoci", "config", "--image", f"{self.layout}:{tag}-raw", "--tag", tag,
                           "--config.user", str(CONTAINER_UID), "--config.workingdir", "/app",
                           "--config.entrypoint", "python3", "--config.entrypoint", "-m",
                           "--config.entrypoint", "functions.runtime",
                           "--config.cmd", "--function", "--config.cmd", spec.name,
                           "--config.label", f"io.scoretune.function={spec.name}"]
                    for k, v in env.items():
                        cmd += ["--config.env", f"{k}={v}"]
                    _run(cmd, f"umoci config ({spec.name})")
                    _run(["umoci", "rm", "--image", f"{self.layout}:{tag}-raw"], "umoci rm")
            built[spec.name] = self.describe(spec, tag, key)
        self.index_file.write_text(json.dumps({"format": LAYOUT_FORMAT, "images": {k: asdict(v) for k, v in built.items()}}, indent=1))
        return built

    def manifest(self, tag: str) -> dict:
        return read_manifest(self.layout, tag)

    def describe(self, spec: FunctionSpec, tag: str, key: str) -> OciImage:
        manifest = self.manifest(tag)
        layers = tuple(layer["digest"] for layer in manifest["layers"])
        size = sum(int(layer["size"]) for layer in manifest["layers"]) + int(manifest["config"]["size"])
        return OciImage(spec.name, spec.image, tag, key, layers, size)


def default_cache_dir() -> Path:
    """Where built images live between runs (``$SCORETUNE_OCI_CACHE``, else the user cache dir)."""
    env = os.environ.get("SCORETUNE_OCI_CACHE")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("scoretune")) / "oci"


def build_images(specs: Iterable[FunctionSpec], cache_dir: Path | None = None) -> dict[str, OciImage]:
    return OciBuilder(cache_dir or default_cache_dir()).build(specs)


__all__ = ["OciBuildError", "OciBuilder", "OciImage", "build_images", "default_cache_dir", "missing_tools"]
