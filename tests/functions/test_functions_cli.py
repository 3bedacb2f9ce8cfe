"""``scoretune functions ...`` through typer's CliRunner on the root app."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agent.cli import app
from functions.spec import discover_specs
from testbed.sim.progress import COMPILE_NOTICE

runner = CliRunner()
SPECS = discover_specs()


def failure_text(result) -> str:
    """What a failed command printed, after checking it failed with one clean line, no traceback."""
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith(COMPILE_NOTICE)]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def test_list_json_has_every_spec() -> None:
    result = runner.invoke(app, ["functions", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted(r["name"] for r in rows) == sorted(SPECS)
    assert all("work" in r and "resources" in r for r in rows)


def test_list_table_names_every_function() -> None:
    result = runner.invoke(app, ["functions", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and all(name in result.output for name in SPECS)


def test_invoke_runs_the_handler_in_process() -> None:
    result = runner.invoke(app, ["functions", "invoke", "float-ops", "--payload", '{"n": 3}'])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["n"] == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["functions", "invoke", "nope"], "unknown function(s) nope"),
        (["functions", "invoke", "float-ops", "--payload", "{n: 3"], "--payload is not JSON"),
        (["functions", "invoke", "float-ops", "--payload", "[3]"], "--payload must be a JSON object"),
        (["functions", "invoke", "float-ops", "--payload", '{"n": -3}'], "payload.n must be an integer"),
        (["functions", "manifest", "nope"], "unknown function(s) nope"),
        (["functions", "serve", "nope", "--port", "1"], "unknown function(s) nope"),
        (["functions", "profile", "nope"], "unknown function(s) nope"),
    ],
)
def test_bad_input_fails_with_one_clear_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in failure_text(result)


def test_manifest_renders_a_validated_service_with_the_scheduler_name() -> None:
    result = runner.invoke(app, ["functions", "manifest", "matmul", "--scheduler-name", "tuned", "-n", "fn"])
    assert result.exit_code == 0, result.output
    service = yaml.safe_load(result.output)
    assert service["kind"] == "Service" and service["metadata"]["namespace"] == "fn"
    assert service["spec"]["template"]["spec"]["schedulerName"] == "tuned"


def test_manifest_of_all_functions_is_a_multi_document_yaml_and_pods_on_request() -> None:
    docs = list(yaml.safe_load_all(runner.invoke(app, ["functions", "manifest"]).output))
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(SPECS)
    pod = yaml.safe_load(
        runner.invoke(app, ["functions", "manifest", "aes", "--pod", "--registry", "r.local"]).output
    )
    assert pod["kind"] == "Pod" and pod["spec"]["containers"][0]["image"] == "r.local/fn-aes:0.1.0"


def test_build_context_only_writes_one_tar_per_function(tmp_path: Path) -> None:
    result = runner.invoke(app, ["functions", "build", "--context-only", "--context-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.stem for p in tmp_path.glob("*.tar")) == sorted(SPECS)
    with tarfile.open(tmp_path / "aes.tar") as tar:
        assert "functions/aes/handler.py" in tar.getnames()


def test_build_without_an_engine_says_so_and_fails(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/absent.sock"}
    result = runner.invoke(app, ["functions", "build", "aes", "--context-dir", str(tmp_path / "c")], env=env)
    assert result.exit_code == 1
    assert f"no Docker engine reachable at unix://{tmp_path}/absent.sock" in failure_text(result)
    assert (tmp_path / "c" / "aes.tar").exists()


def test_profile_dry_run_measures_without_writing() -> None:
    path = SPECS["float-ops"].path
    before = path.read_text()
    result = runner.invoke(
        app, ["functions", "profile", "float-ops", "--samples", "1", "--dry-run", "--json"]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["name"] == "float-ops" and row["cpu_s_mean"] > 0 and row["samples"] == 1
    assert path.read_text() == before
