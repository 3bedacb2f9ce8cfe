"""The suite's functions as OpenWhisk actions (testbed/kube/openwhisk.py): the PUT each function
becomes, against a controller on 127.0.0.1 that answers as apache/openwhisk's does (the action
with its version, bumped on each overwrite; 401 for a refused key; 400 for a limit out of bounds)."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from functions.process import serving
from functions.spec import discover_specs
from testbed.errors import TestbedError
from testbed.kube.openwhisk import action_body, deploy_actions, log_collection_warning

KEY = "23bc46b1-0000-4ed5-8c54-816aa4f8c502:" + "k" * 64


class Controller:
    def __init__(self, max_memory_mb: int = 512) -> None:
        self.actions: dict[str, dict] = {}
        self.max_memory_mb = max_memory_mb
        app = Starlette(routes=[Route("/api/v1/namespaces/_/actions/{name}", self.put, methods=["PUT"])])
        self._serving = serving(app)

    async def put(self, request: Request) -> JSONResponse:
        import base64

        if request.headers.get("authorization") != "Basic " + base64.b64encode(KEY.encode()).decode():
            return JSONResponse({"error": "The supplied authentication is invalid."}, status_code=401)
        name = request.path_params["name"]
        if name in self.actions and request.query_params.get("overwrite") != "true":
            return JSONResponse({"error": "resource already exists"}, status_code=409)
        body = json.loads(await request.body())
        if body["limits"]["memory"] > self.max_memory_mb:
            return JSONResponse({"error": f"memory {body['limits']['memory']} MB exceeds allowed threshold of "
                                          f"{self.max_memory_mb} MB"}, status_code=400)
        old = self.actions.get(name, {}).get("version")
        version = "0.0.1" if old is None else f"0.0.{int(old.split('.')[-1]) + 1}"
        self.actions[name] = {**body, "name": name, "namespace": "guest", "version": version}
        return JSONResponse(self.actions[name])

    def __enter__(self) -> Controller:
        self.port = self._serving.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._serving.__exit__(*exc)


def test_each_function_becomes_a_blackbox_action_with_its_limits_and_a_version():
    specs = discover_specs()
    chosen = [specs["float-ops"], specs["aes"]]
    with Controller() as ow:
        url = f"http://127.0.0.1:{ow.port}"
        first = deploy_actions(url, KEY, chosen)
        assert {fn: a["version"] for fn, a in first.items()} == {"float-ops": "0.0.1", "aes": "0.0.1"}
        again = deploy_actions(url, KEY, chosen[:1])
        assert {fn: a["version"] for fn, a in again.items()} == {"float-ops": "0.0.2"}  # overwrite: a new revision
        stored = ow.actions["float-ops"]
    assert stored["exec"] == {"kind": "blackbox", "image": specs["float-ops"].image}
    body = action_body(specs["float-ops"])
    assert stored["limits"] == body["limits"] == again["float-ops"]["limits"] and body["limits"]["timeout"] == 60000
    # no log collection: upstream reads each activation's logs through kube-apiserver otherwise
    assert body["limits"]["logs"] == 0 and log_collection_warning("float-ops", again["float-ops"]) is None
    assert "log limit of the deployment's default" in log_collection_warning("x", {"limits": {}})
    assert body["limits"]["memory"] >= max(128, specs["float-ops"].memory_limit_bytes // 2**20)
    assert body["limits"]["concurrency"] == (specs["float-ops"].container_concurrency or 1)


def test_a_refused_key_or_limit_is_one_line_naming_the_action():
    specs = discover_specs()
    with Controller(max_memory_mb=1) as ow:
        url = f"http://127.0.0.1:{ow.port}"
        with pytest.raises(TestbedError, match="creating action float-ops failed: HTTP 401: The supplied"):
            deploy_actions(url, "x:y", [specs["float-ops"]])
        with pytest.raises(TestbedError, match="creating action float-ops failed: HTTP 400: memory .* exceeds"):
            deploy_actions(url, KEY, [specs["float-ops"]])
    with pytest.raises(TestbedError, match="UUID:KEY"):
        deploy_actions(url, "nokey", [specs["float-ops"]])


# openwhisk-deploy-kube 108f3275 helm/openwhisk/runtimes.json, reduced to two families: nodejs:14
# keeps two prewarmed 256 MB containers per invoker (reactive up to four), the others none.
RUNTIMES_AT_PIN = {
    "description": ["runtimes manifest"],
    "runtimes": {
        "nodejs": [
            {"kind": "nodejs:14", "default": True, "image": {"prefix": "openwhisk", "name": "action-nodejs-v14",
                                                             "tag": "1.20.0"},
             "deprecated": False, "attached": {"attachmentName": "codefile", "attachmentType": "text/plain"},
             "stemCells": [{"initialCount": 2, "memory": "256 MB",
                            "reactive": {"minCount": 1, "maxCount": 4, "ttl": "2 minutes", "threshold": 1,
                                         "increment": 1}}]},
            {"kind": "nodejs:16", "default": False, "image": {"prefix": "openwhisk", "name": "action-nodejs-v16",
                                                              "tag": "1.20.0"}, "deprecated": False},
        ],
        "python": [{"kind": "python:3", "default": True, "image": {"prefix": "openwhisk", "name": "action-python-v3.7",
                                                                    "tag": "1.17.0"}, "deprecated": False}],
    },
    "blackboxes": [{"prefix": "openwhisk", "name": "dockerskeleton", "tag": "1.14.0"}],
}


def test_the_runtimes_manifest_loses_its_stem_cells_and_nothing_else():
    from testbed.kube.openwhisk import without_stem_cells

    cleaned, removed = without_stem_cells(RUNTIMES_AT_PIN)
    assert removed == ["nodejs:14"]
    assert not any("stemCells" in k for kinds in cleaned["runtimes"].values() for k in kinds)
    # everything else is the chart's: the same kinds, images, defaults and blackboxes
    strip = {f: [{k: v for k, v in kind.items() if k != "stemCells"} for kind in kinds]
             for f, kinds in RUNTIMES_AT_PIN["runtimes"].items()}
    assert cleaned["runtimes"] == strip and cleaned["blackboxes"] == RUNTIMES_AT_PIN["blackboxes"]
    assert "stemCells" in RUNTIMES_AT_PIN["runtimes"]["nodejs"][0], "the input is not changed"
    with pytest.raises(TestbedError, match="x.json: runtimes.nodejs is not a list"):
        without_stem_cells({"runtimes": {"nodejs": {}}}, file="x.json")
    with pytest.raises(TestbedError, match="not an OpenWhisk runtimes manifest"):
        without_stem_cells([], file="x.json")


def test_openwhisk_runtimes_command_writes_beside_the_charts_and_names_bad_files(tmp_path):
    from typer.testing import CliRunner

    from agent.cli import app
    from testbed.kube.openwhisk import STEM_CELL_FREE_RUNTIMES

    chart = tmp_path / "helm" / "openwhisk"
    chart.mkdir(parents=True)
    (chart / "runtimes.json").write_text(json.dumps(RUNTIMES_AT_PIN))
    result = CliRunner().invoke(app, ["kube", "openwhisk-runtimes", str(chart)])
    assert result.exit_code == 0, result.output
    said = json.loads(result.output)
    assert said["stem_cells_removed"] == ["nodejs:14"] and said["path"].endswith(STEM_CELL_FREE_RUNTIMES)
    written = json.loads((chart / STEM_CELL_FREE_RUNTIMES).read_text())
    assert [k["kind"] for k in written["runtimes"]["nodejs"]] == ["nodejs:14", "nodejs:16"]
    (chart / "runtimes.json").write_bytes(b"\x00\xff{")
    result = CliRunner().invoke(app, ["kube", "openwhisk-runtimes", str(chart)])
    assert result.exit_code != 0 and "runtimes.json: cannot read the runtimes manifest" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["kube", "openwhisk-runtimes", str(tmp_path)])
    assert result.exit_code != 0 and "no runtimes manifest" in result.output


def test_the_role_installs_the_stem_cell_free_manifest_by_default():
    """The role writes the manifest before helm and points whisk.runtimes at it unless
    openwhisk_stem_cells is set (an Ansible expression, checked here by rendering it)."""
    from pathlib import Path

    import jinja2
    import yaml

    from testbed.kube.openwhisk import STEM_CELL_FREE_RUNTIMES

    role = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "openwhisk"
    tasks = yaml.safe_load((role / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    write = next(i for i, t in enumerate(tasks) if "openwhisk-runtimes" in str(t.get("ansible.builtin.command")))
    helm = next(i for i, t in enumerate(tasks) if "kubernetes.core.helm" in t)
    assert write < helm, names
    expr = tasks[helm]["kubernetes.core.helm"]["values"]["whisk"]["runtimes"]
    default = yaml.safe_load((role / "defaults" / "main.yml").read_text())["openwhisk_stem_cells"]
    env = jinja2.Environment()
    env.filters["bool"] = bool
    assert env.from_string(expr).render(openwhisk_stem_cells=default) == STEM_CELL_FREE_RUNTIMES
    assert env.from_string(expr).render(openwhisk_stem_cells=True) == "runtimes.json"
