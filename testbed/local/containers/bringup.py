"""Bringing a container lab's shared parts up: images built, the network made, the registry
started and filled. Called by ``testbed up --runtime containers`` before any node agent starts;
each object is recorded in the state directory as soon as it exists, so ``down`` removes what a
failure half-way left."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed.cluster import ClusterSpec
from testbed.local import cpu
from testbed.local.containers import network, registry
from testbed.local.hardware import NodeHardware
from testbed.local.state import LabState, record_for

log = logging.getLogger(__name__)


def build(cache_dir: Path | None = None) -> tuple[dict[str, dict[str, Any]], Path]:
    """The suite's OCI images (built, or found in the cache): spec image -> {function, tag, size}."""
    from functions.oci import OciBuilder, default_cache_dir
    from functions.spec import discover_specs

    builder = OciBuilder(cache_dir or default_cache_dir())
    t0 = time.monotonic()
    built = builder.build(discover_specs().values())
    log.info("OCI images ready in %.1f s (%s)", time.monotonic() - t0, builder.layout)
    return ({img.image: {"function": img.function, "tag": img.tag, "size": img.size_bytes, "layers": list(img.layers)}
             for img in built.values()}, builder.layout)


def bring_up(spec: ClusterSpec, state: LabState, lab_id: str, hardware: dict[str, NodeHardware],
             images: dict[str, dict[str, Any]], layout: Path, write: Any) -> dict[str, Any]:
    """Network, registry, pushed images; returns the ``containers`` block of ``lab.json``.
    ``write(block)`` records the block in ``lab.json`` (called before anything is created)."""
    net = network.LabNetwork.plan(lab_id, {n.name: hardware[n.name].link_bytes_per_s for n in spec.nodes})
    for entry in images.values():
        entry["ref"] = registry.reference(net, entry["function"], entry["tag"].rsplit("-", 1)[-1])
    block = {"network": net.to_dict(), "images": images, "layout": str(layout), "lab_id": net.lab_id}
    write(block)
    network.create(net)
    reg_root = state.root / "containers" / "registry"
    config = registry.write_config(net, reg_root)
    logf = open(state.log_path("registry"), "ab")
    harness = ((state.read_lab() or {}).get("cpu") or {}).get("harness")
    proc = subprocess.Popen(registry.command(net, config), stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True, close_fds=True,
                            preexec_fn=cpu.entering(harness))
    logf.close()
    state.add_proc(record_for("registry", "registry", proc.pid))
    registry.wait_ready(net, alive=lambda: proc.poll() is None)
    t0 = time.monotonic()
    for entry in images.values():
        registry.push(layout, entry["tag"], entry["ref"])
    log.info("pushed %d images to %s in %.1f s", len(images), net.registry, time.monotonic() - t0)
    return block


__all__ = ["bring_up", "build"]
