"""A node's image store: pulls through the node's link, layers unpacked once, as containerd does.

- **pull**: ``skopeo copy docker://REGISTRY/... oci:STORE/oci:TAG`` run *inside the node's network
  namespace* (so the bytes cross its shaped link) and *inside the node's CPU group* (so digest
  checks cost the node's CPU). Blobs the store's OCI layout already has are not fetched again, so
  an image whose base and library layers the node holds downloads its function layer only;
- **unpack**: each layer not yet on the node is extracted once (``tar -xzf``, again in the node's
  CPU group) into ``layers/<digest>``, which every pod of every image using it shares as an
  overlay lower directory (containerd's overlayfs snapshotter); OCI whiteouts become overlay
  whiteouts;
- **reset**: the whole store is deleted (the lab's cache reset between steps), once no pull is in
  flight.

Pulls are serialised per node (kubelet's ``serializeImagePulls`` default).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from functions.oci import blob_path, read_manifest

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


@dataclass(frozen=True)
class Fetch:
    """One image made available on a node: seconds pulling and unpacking, bytes downloaded."""

    pull_s: float
    unpack_s: float
    bytes_pulled: int
    layers_unpacked: int

    @property
    def total_s(self) -> float:
        return self.pull_s + self.unpack_s


def convert_whiteouts(root: Path) -> int:
    """OCI whiteout files -> overlayfs whiteouts (a 0/0 char device; an opaque directory xattr)."""
    n = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.startswith(WHITEOUT):
                continue
            path = Path(dirpath) / name
            path.unlink()
            if name == OPAQUE:
                os.setxattr(dirpath, "trusted.overlay.opaque", b"y")
            else:
                os.mknod(Path(dirpath) / name[len(WHITEOUT):], stat.S_IFCHR | 0o000, os.makedev(0, 0))
            n += 1
    return n


class NodeStore:
    """The image store of one node under ``root`` (``oci/`` layout, ``layers/`` unpacked)."""

    def __init__(self, root: Path, *, netns: str, registry: str, enter_node: Callable[[], None]) -> None:
        self.root = root
        self.netns = netns
        self.registry = registry
        self.enter_node = enter_node
        """Runs in a child before exec: joins the node's CPU group (kubelet's pulls are the node's)."""
        self.images: dict[str, tuple[str, ...]] = {}
        """image (as the spec names it) -> its layer digests, for images complete on this node."""
        self._lock = asyncio.Lock()

    @property
    def layout(self) -> Path:
        return self.root / "oci"

    @property
    def layers_dir(self) -> Path:
        return self.root / "layers"

    def layer_dir(self, digest: str) -> Path:
        return self.layers_dir / digest.split(":", 1)[1]

    def _blobs(self) -> dict[str, int]:
        d = self.layout / "blobs" / "sha256"
        return {p.name: p.stat().st_size for p in d.iterdir()} if d.exists() else {}

    async def _exec(self, args: list[str], what: str, *, netns: bool) -> None:
        argv = (["ip", "netns", "exec", self.netns] if netns else []) + args
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=self.enter_node,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed: {(err or out).decode(errors='replace').strip()[-300:]}")

    def _manifest_layers(self, tag: str) -> tuple[str, ...]:
        return tuple(layer["digest"] for layer in read_manifest(self.layout, tag)["layers"])

    def config(self, tag: str) -> dict:
        """The image config of ``tag`` (entrypoint, env, user: what the pod's runtime spec starts from)."""
        return json.loads(blob_path(self.layout, read_manifest(self.layout, tag)["config"]["digest"]).read_text())

    async def fetch(self, image: str, ref: str, tag: str) -> Fetch:
        """Make ``image`` (registry reference ``ref``, stored as ``tag``) available on the node."""
        async with self._lock:
            if image in self.images:
                return Fetch(0.0, 0.0, 0, 0)
            self.root.mkdir(parents=True, exist_ok=True)
            before = self._blobs()
            t0 = time.monotonic()
            await self._exec(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{ref}", f"oci:{self.layout}:{tag}"],
                             f"pulling {ref}", netns=True)
            t1 = time.monotonic()
            pulled = sum(size for name, size in self._blobs().items() if name not in before)
            layers = self._manifest_layers(tag)
            unpacked = 0
            self.layers_dir.mkdir(exist_ok=True)
            for digest in layers:
                target = self.layer_dir(digest)
                if target.exists():
                    continue
                tmp = target.with_name(target.name + ".part")
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                blob = blob_path(self.layout, digest)
                await self._exec(["tar", "-xzf", str(blob), "-C", str(tmp), "--numeric-owner", "--same-permissions"],
                                 f"unpacking layer {digest[:19]} of {image}", netns=False)
                convert_whiteouts(tmp)
                tmp.rename(target)
                unpacked += 1
            t2 = time.monotonic()
            self.images[image] = layers
            return Fetch(t1 - t0, t2 - t1, pulled, unpacked)

    def lowerdirs(self, image: str) -> list[Path]:
        """The image's unpacked layers, topmost first (overlayfs' ``lowerdir`` order)."""
        return [self.layer_dir(d) for d in reversed(self.images[image])]

    async def reset_when_idle(self, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """:meth:`reset` once no fetch is in flight: a pull the reset interrupted would otherwise
        finish afterwards and register an image whose first layers the reset had deleted (the
        next pod of it then fails to mount, or to find its interpreter). Pods are stopped before a
        reset, but the task that was starting one may still be pulling its image."""
        async with self._lock:
            await asyncio.get_running_loop().run_in_executor(None, self.reset, keep)

    def reset(self, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """Forget every image (no pod may be using any): the layout is deleted, and every unpacked
        layer no image of ``keep`` uses. The caller copies ``keep`` back into the layout (fast,
        from the build); their layers are then found unpacked, as a node image baked with them."""
        kept = {d.split(":", 1)[1] for img in keep for d in self.images.get(img, ())}
        self.images.clear()
        shutil.rmtree(self.layout, ignore_errors=True)
        if self.layers_dir.exists():
            for d in self.layers_dir.iterdir():
                if d.name not in kept:
                    shutil.rmtree(d, ignore_errors=True)


__all__ = ["Fetch", "NodeStore", "convert_whiteouts"]
