"""Where public traces come from and where they are kept: the pinned registry, fetch, verify, locate.

The repository holds no trace data (DESIGN.md, "Principles"). Every trace a scenario or generator
reads is named in ``loadgen/trace_registry.yaml`` with its official source pinned to a fixed
revision, and the size and SHA-256 of each file. ``scoretune traces fetch NAME`` downloads it with
pooch (which writes to a temporary file and moves it into place only once the checksum matches), on
top of a downloader that resumes an interrupted transfer from its ``.partial/`` file with an HTTP
range request, and unpacks archive members where the upstream file is a tarball.

Files are kept in the *trace directory*: ``$SCORETUNE_TRACES`` when set, else a per-user data
directory (platformdirs' ``user_data_dir("scoretune")/traces``). When ``$SCORETUNE_TRACES`` is not
set, ``../shared/traces`` beside the repository (a workshop convenience) is a read-only second
source, where a file may also be stored gzip'd under one of its ``aliases``; :func:`locate` looks in
both, and :func:`content_sha256` hashes a ``.gz`` alias's decompressed bytes so it verifies against
the same pinned checksum.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.atomic import write_atomic_with
from loadgen.errors import TraceError

REGISTRY_FILE = Path(__file__).with_name("trace_registry.yaml")
REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
PARTIAL = ".partial"
"""Subdirectory of the trace directory holding interrupted downloads until they resume."""

Sha256 = Field(pattern=r"^[0-9a-f]{64}$")


class TraceFile(BaseModel):
    """One stored file: ``path`` under the trace directory, downloaded from ``url``.

    ``size``/``sha256`` are the download's. When ``member`` is set the download is a tar archive
    (any compression) and the stored file is that member, with its own ``unpacked_*`` figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://")
    size: int = Field(gt=0)
    sha256: str = Sha256
    member: str | None = None
    unpacked_size: int | None = Field(default=None, gt=0)
    unpacked_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    aliases: tuple[str, ...] = ()

    @property
    def stored_sha256(self) -> str:
        return self.unpacked_sha256 or self.sha256

    @property
    def stored_size(self) -> int:
        return self.unpacked_size or self.size

    @property
    def names(self) -> tuple[str, ...]:
        return (self.path, *self.aliases)


class ManualTrace(BaseModel):
    """A release the readers accept but with no pinned checksum: fetched by hand from ``source``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    description: str
    source: str
    license: str = ""
    citation: str = ""


class Trace(ManualTrace):
    """A trace scoretune fetches: the same record, plus its pinned files."""

    files: tuple[TraceFile, ...] = Field(min_length=1)


class Registry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    traces: dict[str, Trace]
    manual: dict[str, ManualTrace] = {}

    def get(self, name: str) -> Trace:
        if name in self.traces:
            return self.traces[name]
        if name in self.manual:
            m = self.manual[name]
            raise TraceError(f"{name} has no pinned checksum and is not fetched by scoretune; download it from "
                             f"{m.source} and point `scoretune workload from-trace` at the unpacked files")
        raise TraceError(f"unknown trace {name!r}; known: {', '.join(sorted(self.traces))}")

    def owner(self, relpath: str) -> tuple[str, TraceFile] | None:
        """The trace and file that a path (or alias) under the trace directory belongs to."""
        for name, trace in self.traces.items():
            for f in trace.files:
                if relpath in f.names:
                    return name, f
        return None


def load_registry(path: str | Path | None = None) -> Registry:
    """The shipped registry, or a user's file of the same schema; bad files name the field."""
    file = Path(path) if path is not None else REGISTRY_FILE
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError("no such registry file", file=file) from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a registry file", file=file) from None
    except UnicodeDecodeError:
        raise TraceError("not UTF-8 text", file=file) from None
    except yaml.YAMLError as err:
        raise TraceError(f"not valid YAML: {str(err).splitlines()[0]}", file=file) from None
    try:
        return Registry.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise TraceError(first["msg"], file=file, field=where) from None


# --- where traces live --------------------------------------------------------------------------


def trace_dir() -> Path:
    """Where ``fetch`` stores traces (created on demand)."""
    env = os.environ.get("SCORETUNE_TRACES")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return platformdirs.user_data_path("scoretune") / "traces"


def readonly_dirs() -> list[Path]:
    """Read-only sources searched after the trace directory: ``../shared/traces`` when present and
    ``$SCORETUNE_TRACES`` is unset (setting it makes that directory the only source)."""
    if os.environ.get("SCORETUNE_TRACES"):
        return []
    return [SHARED_TRACES] if SHARED_TRACES.is_dir() else []


def search_dirs() -> list[Path]:
    return [trace_dir(), *readonly_dirs()]


def find(relpath: str, registry: Registry | None = None, dirs: list[Path] | None = None) -> Path | None:
    """The first existing copy of a registered file (under its path or an alias) in ``dirs``
    (default :func:`search_dirs`), or None."""
    reg = registry or load_registry()
    owned = reg.owner(relpath)
    names = owned[1].names if owned else (relpath,)
    for root in dirs if dirs is not None else search_dirs():
        for name in names:
            candidate = root / name
            if candidate.is_file():
                return candidate
    return None


def locate(relpath: str, registry: Registry | None = None) -> Path:
    """A trace file by its path under the trace directory; a missing one says what to fetch."""
    reg = registry or load_registry()
    found = find(relpath, reg)
    if found is not None:
        return found
    owned = reg.owner(relpath)
    where = ", ".join(str(d) for d in search_dirs())
    hint = (f"run `scoretune traces fetch {owned[0]}`" if owned
            else "it is not in the trace registry (`scoretune traces list`)")
    raise TraceError(f"trace file not found (looked in {where}); {hint}", file=relpath)


def content_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, of its decompressed bytes for a ``.gz`` copy."""
    digest = hashlib.sha256()
    opener: Callable[[Path], object] = gzip.open if path.suffix == ".gz" else open  # type: ignore[assignment]
    try:
        with opener(path, "rb") as fh:  # type: ignore[operator]
            for chunk in iter(lambda: fh.read(1 << 20), b""):  # type: ignore[attr-defined]
                digest.update(chunk)
    except (OSError, EOFError) as err:
        raise TraceError(f"cannot read: {err}", file=path) from None
    return digest.hexdigest()


# --- verify -------------------------------------------------------------------------------------

Status = Literal["ok", "missing", "mismatch"]


@dataclass(frozen=True)
class FileStatus:
    trace: str
    file: TraceFile
    status: Status
    found: Path | None
    detail: str = ""


def verify(names: list[str], registry: Registry) -> list[FileStatus]:
    out = []
    for name in names:
        for f in registry.get(name).files:
            found = find(f.path, registry)
            if found is None:
                out.append(FileStatus(name, f, "missing", None, f"run `scoretune traces fetch {name}`"))
                continue
            try:
                got = content_sha256(found)
            except TraceError as err:
                out.append(FileStatus(name, f, "mismatch", found, str(err)))
                continue
            if got == f.stored_sha256:
                out.append(FileStatus(name, f, "ok", found))
            else:
                out.append(FileStatus(name, f, "mismatch", found, f"sha256 {got}, expected {f.stored_sha256}"))
    return out


# --- fetch --------------------------------------------------------------------------------------


class ResumableDownloader:
    """A pooch downloader that keeps an interrupted transfer in ``part`` and resumes it with a
    ``Range`` request (pooch's own HTTPDownloader restarts from zero). pooch hands it a temporary
    file beside the target and checks the checksum before moving that into place."""

    def __init__(self, part: Path, size: int, *, label: str, attempts: int = 4, timeout_s: float = 30.0,
                 progress: bool | None = None) -> None:
        self.part, self.size, self.label = part, size, label
        self.attempts, self.timeout_s, self.progress = attempts, timeout_s, progress

    def __call__(self, url: str, output_file: str, pooch: object, check_only: bool = False) -> bool | None:
        import requests
        from tqdm import tqdm

        self.part.parent.mkdir(parents=True, exist_ok=True)
        last: Exception | None = None
        with tqdm(total=self.size, unit="B", unit_scale=True, desc=self.label, file=sys.stderr, leave=False,
                  disable=(not self.progress) if self.progress is not None else None, ncols=78) as bar:
            for _ in range(self.attempts):
                done = self.part.stat().st_size if self.part.exists() else 0
                if done > self.size:  # a stale part of some other file: start over
                    self.part.unlink()
                    done = 0
                bar.reset(total=self.size)
                bar.update(done)
                if done == self.size:
                    break
                headers = {"Accept-Encoding": "identity", "User-Agent": "scoretune"}
                if done:
                    headers["Range"] = f"bytes={done}-"
                try:
                    with requests.get(url, headers=headers, stream=True, timeout=self.timeout_s) as resp:
                        if done and resp.status_code == 416:  # nothing left to send
                            break
                        resp.raise_for_status()
                        append = bool(done) and resp.status_code == 206
                        if not append:
                            bar.reset(total=self.size)
                        with open(self.part, "ab" if append else "wb") as out:
                            # small chunks: a cut connection loses at most one chunk of what arrived
                            for chunk in resp.iter_content(chunk_size=1 << 13):
                                out.write(chunk)
                                bar.update(len(chunk))
                            out.flush()
                            os.fsync(out.fileno())
                    last = None
                    if self.part.stat().st_size >= self.size:
                        break
                except requests.exceptions.HTTPError as err:
                    raise TraceError(f"download failed: {err}", file=url) from None
                except requests.exceptions.RequestException as err:
                    last = err
        if last is not None:
            kept = self.part.stat().st_size if self.part.exists() else 0
            reason = f"{type(last).__name__}: {str(last).rsplit(': ', 1)[-1].strip(' ()')[:160]}"
            if not kept:
                self.part.unlink(missing_ok=True)
                raise TraceError(f"download failed after {self.attempts} attempts ({reason})", file=url)
            raise TraceError(f"download interrupted ({reason}); {kept:,} of {self.size:,} bytes kept in "
                             f"{self.part}; run the fetch again to resume", file=url)
        os.replace(self.part, output_file)
        return None


def _unpack_member(archive: Path, f: TraceFile, target: Path) -> None:
    def unpack(tmp: Path) -> None:
        try:
            with tarfile.open(archive, "r:*") as tar:
                src = tar.extractfile(f.member or "")
                if src is None:
                    raise TraceError(f"archive member {f.member!r} is not a file", file=archive)
                with src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        except KeyError:
            raise TraceError(f"archive has no member {f.member!r}", file=archive) from None
        except (tarfile.TarError, OSError, EOFError) as err:
            raise TraceError(f"cannot unpack: {err}", file=archive) from None
        got = content_sha256(tmp)
        if got != f.stored_sha256:
            raise TraceError(f"checksum mismatch after unpacking {f.member}: sha256 {got}, expected "
                             f"{f.stored_sha256}; nothing was stored", file=f.path)

    write_atomic_with(target, unpack)  # a failed check leaves no file, and no temporary


def _download(f: TraceFile, dest: Path, root: Path, *, label: str, progress: bool | None) -> None:
    """``f.url`` to ``dest`` through pooch with the resumable downloader; checksum-checked."""
    import pooch

    pooch.get_logger().setLevel("WARNING")  # our own progress bar and result line say what happens
    part = root / PARTIAL / (f.path.replace("/", "__") + ".part")
    downloader = ResumableDownloader(part, f.size, label=label, progress=progress)
    try:
        pooch.retrieve(f.url, known_hash=f"sha256:{f.sha256}", fname=dest.name, path=dest.parent,
                       downloader=downloader)
    except ValueError as err:  # pooch's checksum mismatch; the temporary file is already gone
        part.unlink(missing_ok=True)
        detail = str(err).split("\n")[0]
        raise TraceError(f"checksum mismatch for {f.url}: {detail}; nothing was stored", file=f.path) from None


def fetch(name: str, registry: Registry, *, progress: bool | None = None,
          echo: Callable[[str], None] = lambda _s: None) -> list[Path]:
    """Every file of one trace into the trace directory; files already present and intact are kept."""
    trace = registry.get(name)
    root = trace_dir()
    stored = []
    for f in trace.files:
        target = root / f.path
        if target.is_file() and content_sha256(target) == f.stored_sha256:
            echo(f"{name}: {f.path} present")
            stored.append(target)
            continue
        if f.member is None:
            _download(f, target, root, label=Path(f.path).name, progress=progress)
        else:
            archive = root / PARTIAL / (f.path.replace("/", "__") + "." + Path(f.url).name)
            _download(f, archive, root, label=Path(f.url).name, progress=progress)
            try:
                _unpack_member(archive, f, target)
            finally:
                archive.unlink(missing_ok=True)
        echo(f"{name}: {f.path} fetched ({f.stored_size:,} bytes, sha256 ok)")
        stored.append(target)
    return stored
