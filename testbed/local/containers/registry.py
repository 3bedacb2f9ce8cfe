"""The lab's image registry: Debian's ``docker-registry`` (distribution 2.8) in its own namespace,
its storage in the lab's state directory, the suite's images pushed to it with ``skopeo``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import requests
import yaml

from testbed.local.containers.network import REGISTRY_PORT, LabNetwork

REPOSITORY = "scoretune"


def write_config(net: LabNetwork, root: Path) -> Path:
    """The registry's config: HTTP on the registry namespace's address only, filesystem storage."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"{net.registry_address}:{REGISTRY_PORT}"},
    }
    path = root / "config.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def command(net: LabNetwork, config: Path) -> list[str]:
    """The registry process, started in its namespace (``ip netns exec`` keeps the pid)."""
    return ["ip", "netns", "exec", net.registry_netns, "docker-registry", "serve", str(config)]


def wait_ready(net: LabNetwork, timeout_s: float = 30.0, alive=lambda: True) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://{net.registry}/v2/"
    while time.monotonic() < deadline and alive():
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"the lab's registry did not answer at {url} within {timeout_s:.0f} s")


def reference(net: LabNetwork, function: str, tag: str) -> str:
    return f"{net.registry}/{REPOSITORY}/{function}:{tag}"


def push(layout: Path, tag: str, ref: str) -> None:
    """Copy one image from the build's OCI layout into the registry."""
    proc = subprocess.run(
        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}", f"docker://{ref}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"skopeo could not push {tag} to {ref}: {proc.stderr.strip()}")
