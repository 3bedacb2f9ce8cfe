"""A node's containerd image store as the CRI shows it, and a ``crictl`` that works on it.

The fake API's kubelet runs the real image-state script (render.IMAGE_STATE_SCRIPT) in ``sh``
with this module as its ``crictl``, so a test exercises the script itself. What it models is what
makes a purge by tag wrong on a real node:

- an image is one ID with several references: the tags it was pulled by and its repo digests;
- pulling by digest (what a Knative pod does: Knative resolves the Service's tag to a digest)
  records the digest reference and no tag; pulling by tag records the tag and the digest;
- ``crictl rmi X`` asks ImageStatus(X) first and fails with "no such image" when X resolves to
  nothing; CRI RemoveImage then removes the whole image with every reference (containerd
  ``internal/cri/server/images/image_remove.go``: "Remove the whole image no matter the it's image
  id or reference");
- ``crictl inspecti X`` fails for a reference the node does not hold, even when it holds another
  reference of the same image;
- ``crictl images --verbose`` prints ``ID:``, ``RepoTags:`` and ``RepoDigests:`` lines per image
  (cri-tools ``cmd/crictl/image.go``).

Run as ``python fakecri.py SUBCOMMAND ...`` with ``FAKE_CRI_STATE`` naming the node's JSON state.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # testbed.kube.images, run as a script

from testbed.kube.images import normalize, split_reference  # noqa: E402


def digest_of(tag_ref: str) -> str:
    """The registry's manifest digest for a tag (deterministic: one registry, one content)."""
    return "sha256:" + hashlib.sha256(normalize(tag_ref).encode()).hexdigest()


def resolved(tag_ref: str) -> str:
    """``repo@sha256:...``: what Knative writes into a Revision for a Service's tag."""
    repo, _, _ = split_reference(tag_ref)
    return f"{repo}@{digest_of(tag_ref)}"


def _image_id(repo: str, digest: str) -> str:
    return "sha256:" + hashlib.sha256(f"config {repo}@{digest}".encode()).hexdigest()


class ImageStore:
    """One node's images: ``[{"id", "tags", "digests"}]`` plus injected faults."""

    def __init__(self, images: list[dict[str, Any]] | None = None) -> None:
        self.images: list[dict[str, Any]] = images or []
        self.unpullable: set[str] = set()
        """References (normalized) or repositories whose pull fails."""
        self.rmi_refused: set[str] = set()
        """Repositories whose images the runtime refuses to remove (in use, a broken store)."""

    # state in a file, for the crictl process
    def to_json(self) -> str:
        return json.dumps({"images": self.images, "unpullable": sorted(self.unpullable),
                           "rmi_refused": sorted(self.rmi_refused)})

    @classmethod
    def from_json(cls, text: str) -> ImageStore:
        data = json.loads(text)
        store = cls(data["images"])
        store.unpullable = set(data.get("unpullable", []))
        store.rmi_refused = set(data.get("rmi_refused", []))
        return store

    def find(self, ref: str) -> dict[str, Any] | None:
        """The image ``ref`` resolves to: an ID, or a tag or digest reference held as such."""
        for img in self.images:
            if ref == img["id"]:
                return img
        try:
            ref = normalize(ref)
        except ValueError:
            return None
        return next((img for img in self.images if ref in img["tags"] or ref in img["digests"]), None)

    def pull(self, ref: str) -> None:
        """A pull by tag records the tag and the digest; by digest, the digest alone."""
        repo, tag, digest = split_reference(ref)
        if normalize(ref) in self.unpullable or repo in self.unpullable:
            raise LookupError(f"failed to pull and unpack image {ref!r}: not found")
        if digest is None:
            digest = digest_of(f"{repo}:{tag}")
        image_id = _image_id(repo, digest)
        img = next((i for i in self.images if i["id"] == image_id), None)
        if img is None:
            img = {"id": image_id, "tags": [], "digests": []}
            self.images.append(img)
        if f"{repo}@{digest}" not in img["digests"]:
            img["digests"].append(f"{repo}@{digest}")
        if tag is not None and not split_reference(ref)[2] and f"{repo}:{tag}" not in img["tags"]:
            img["tags"].append(f"{repo}:{tag}")

    def references(self) -> set[str]:
        """Every reference the node holds: what the kubelet reports in ``status.images[].names``."""
        return {r for img in self.images for r in (*img["tags"], *img["digests"])}

    def repositories(self) -> set[str]:
        return {split_reference(r)[0] for r in self.references()}


def main(argv: list[str]) -> int:
    path = Path(os.environ["FAKE_CRI_STATE"])
    store = ImageStore.from_json(path.read_text())
    cmd, args = argv[0], argv[1:]
    if cmd == "images" and args == ["--verbose"]:
        for img in store.images:
            print(f"ID: {img['id']}")
            for t in img["tags"]:
                print(f"RepoTags: {t}")
            for d in img["digests"]:
                print(f"RepoDigests: {d}")
            print()
        return 0
    if cmd == "inspecti" and len(args) == 1:
        img = store.find(args[0])
        if img is None:
            print(f'no such image "{args[0]}" present', file=sys.stderr)
            return 1
        print(json.dumps({"status": {"id": img["id"], "repoTags": img["tags"], "repoDigests": img["digests"]}}))
        return 0
    if cmd == "pull" and len(args) == 1:
        try:
            store.pull(args[0])
        except LookupError as err:
            print(f"pulling image: {err}", file=sys.stderr)
            return 1
        path.write_text(store.to_json())
        return 0
    if cmd == "rmi" and len(args) == 1:
        img = store.find(args[0])
        if img is None:
            print(f"no such image {args[0]}", file=sys.stderr)
            return 1
        if {split_reference(r)[0] for r in (*img["tags"], *img["digests"])} & store.rmi_refused:
            print(f'error of removing image "{args[0]}": rpc error: code = Unknown', file=sys.stderr)
            return 1
        store.images.remove(img)
        path.write_text(store.to_json())
        for r in img["tags"] or img["digests"]:
            print(f"Deleted: {r}")
        return 0
    print(f"fake crictl: unsupported command {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
