"""Image references as a node's containerd holds them, and the image-state pod's report.

Why a module of its own: a node's cache is not a set of the strings a Knative Service names. One
image is one ID with several references: the tag it was pulled by (``repo:tag``) and the digest
(``repo@sha256:...``). Knative resolves a Service's tag to a digest (unless its registry is in
``registries-skipping-tag-resolving``), so the kubelet pulls ``repo@sha256:...`` and the node holds
that reference and no tag; the scheduler's ImageLocality then matches the pod's digest against
the node's ``status.images`` names. A purge by tag finds nothing there and leaves the image
cached. So the reset purges by *repository* (every image with any reference in it, removed by ID:
CRI RemoveImage removes an image with all its references, containerd
``internal/cri/server/images/image_remove.go``), warms by the reference the pods really run (the
ready Revision's ``imageDigest``), and checks both by repository.

Names are compared in containerd's normalized form (``docker.io/library/busybox:latest``), the
``ParseNormalizedNamed`` rules of github.com/distribution/reference (``normalize.go``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """(normalized repository, tag, digest) of an image reference; a bare name gets ``latest``."""
    text = ref.strip()
    name, _, digest = text.partition("@")
    tag = None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, sep, rest = name.partition("/")
    if not sep or ("." not in first and ":" not in first and first != "localhost"):
        domain, path = DEFAULT_DOMAIN, name
    else:
        domain, path = first, rest
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = OFFICIAL_REPO_PREFIX + path
    if tag is None and not digest:
        tag = "latest"
    return f"{domain}/{path}", tag, (digest or None)


def normalize(ref: str) -> str:
    """The reference as containerd stores it (``repo:tag``, ``repo@digest`` or ``repo:tag@digest``)."""
    repo, tag, digest = split_reference(ref)
    return repo + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def repository(ref: str) -> str:
    """The normalized repository of a reference: what every tag and digest of one image share."""
    return split_reference(ref)[0]


@dataclass(frozen=True)
class FunctionImage:
    """One function container's image: as its Knative Service names it, and as its pods run it."""

    function: str
    image: str
    """The Service's ``spec.template.spec.containers[].image`` (a tag, usually)."""
    digest: str | None = None
    """The ready Revision's ``status.containerStatuses[].imageDigest`` (``repo@sha256:...``): what
    the kubelet pulls and ImageLocality matches. ``None``: Knative did not resolve it (a registry
    in ``registries-skipping-tag-resolving``); the pods then run :attr:`image`."""

    @property
    def runs(self) -> str:
        """The normalized reference the function's pods run: what a warm node must hold."""
        return normalize(self.digest or self.image)

    @property
    def repository(self) -> str:
        return repository(self.image)


@dataclass
class NodeImages:
    """One image-state pod's report (render.IMAGE_STATE_SCRIPT's log) for one node."""

    present: list[str] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    pull_failed: list[str] = field(default_factory=list)
    purge_failed: list[tuple[str, str]] = field(default_factory=list)
    """(repository, image ID) whose removal the runtime refused."""
    holds: dict[str, list[str]] = field(default_factory=dict)
    """Repository -> every reference (tags and digests) of it the node still holds."""
    complete: bool = False
    """The script reached its end (its last line is ``done``)."""


def parse_report(text: str) -> NodeImages:
    """The image-state pod's log, line by line; unknown lines are ignored."""
    rec = NodeImages()
    for line in str(text).splitlines():
        words = line.split()
        if not words:
            continue
        kind, args = words[0], words[1:]
        if kind == "present" and args:
            rec.present.append(args[0])
        elif kind == "absent" and args:
            rec.absent.append(args[0])
        elif kind == "pull-failed" and args:
            rec.pull_failed.append(args[0])
        elif kind == "purge-failed" and len(args) >= 2:
            rec.purge_failed.append((args[0], args[1]))
        elif kind == "holds" and len(args) >= 2:
            rec.holds.setdefault(args[0], []).append(args[1])
        elif kind == "done":
            rec.complete = True
    return rec


def problems(node: str, report: NodeImages, *, cold: bool, images: Iterable[FunctionImage]) -> list[str]:
    """What keeps ``node`` from the declared state: a cold node holds no reference of any function
    repository; a warm node holds the reference every function's pods run. Each names the node
    and the image."""
    out = []
    for repo, image_id in report.purge_failed:
        out.append(f"{node} could not remove image {image_id} of {repo}")
    for ref in report.pull_failed:
        out.append(f"{node} could not pull {ref}")
    for img in images:
        if cold:
            held = report.holds.get(img.repository, [])
            if held:
                out.append(f"{node} still holds {', '.join(sorted(held))} (declared cold)")
        elif img.runs not in report.present:
            if img.runs not in report.pull_failed:
                out.append(f"{node} lacks {img.runs}")
    return out


__all__ = ["FunctionImage", "NodeImages", "normalize", "parse_report", "problems", "repository", "split_reference"]
