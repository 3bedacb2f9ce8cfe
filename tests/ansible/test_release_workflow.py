"""The release workflow publishes what the lab's prebuilt mode pulls: on a version tag it builds
every function image with ``scoretune functions build --push ghcr.io/OWNER`` (a command that
exists, with the option it has), so the images land where the specs name them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from typer.testing import CliRunner

from agent.cli import app
from functions.build import image_ref
from functions.spec import discover_specs

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "function-images.yml"


def test_release_tags_publish_the_images_the_specs_name():
    doc = yaml.safe_load(WORKFLOW.read_text())
    triggers = doc[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["push"]["tags"] == ["v*"]
    job = doc["jobs"]["publish"]
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    runs = [s.get("run", "") for s in job["steps"]]
    build = next(r for r in runs if "functions build" in r)
    registry = re.fullmatch(r'scoretune functions build --push "ghcr\.io/\$\{OWNER,,\}"', build.strip())
    assert registry, build
    # in the scoretune organisation, the pushed names are exactly the specs' images
    for spec in discover_specs().values():
        assert image_ref(spec, "ghcr.io/scoretune") == spec.image


def test_the_build_command_the_workflow_runs_has_that_option():
    result = CliRunner().invoke(app, ["functions", "build", "--help"])
    assert result.exit_code == 0 and "--push" in result.output
