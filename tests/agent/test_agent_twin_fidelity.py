"""``scoretune twin fidelity``: the twin fitted to a lab's runs, read back from a fidelity directory.

The fidelity directory here is written by the fidelity study itself with the simulator standing in
for the lab (its run directories have the lab's format), on ``lab-small`` as the API shows it: a
"lab" that is the twin's own engine on the view, so the unfitted twin must predict every profile
exactly, and the fitted one must rank them as the lab does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.errors import AgentError, InputError
from agent.evaluation.twin_fidelity import twin_fidelity
from testbed.cluster import load_cluster
from testbed.local.studies.fidelity import fidelity, fidelity_profiles
from testbed.scenarios import lab_workload
from testbed.sim.backend import SimBackend
from testbed.sim.twin import TWIN_SEED, cluster_view

runner = CliRunner()


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fid")
    view = cluster_view(load_cluster("lab-small"))
    workload = lab_workload(0, duration_s=15.0)
    lab = SimBackend(view, seed=TWIN_SEED)  # the twin's own engine, seed and view: what it predicts unfitted
    fidelity(lab, {"sim": SimBackend(load_cluster("lab-small"), seed=0)}, workload, fidelity_profiles(7, seed=1), out,
             seed=TWIN_SEED)
    return out


def test_a_lab_that_is_the_twins_engine_is_ranked_exactly(study: Path) -> None:
    result = twin_fidelity(study, [1, 3])
    assert result["profiles"] == 7 and [r["ranked"] for r in result["fits"]] == [6, 4]
    assert result["unfitted_s"] == pytest.approx(result["lab_s"], rel=1e-9)  # the view is the lab here
    for row in result["fits"]:
        assert row["rho"]["unfitted"] == pytest.approx(1.0)
        assert row["mae_s"]["unfitted"] == pytest.approx(0.0, abs=1e-9)
        assert row["rho"]["twin"] > 0.8  # a fit to the lab's own runs keeps its order
        assert len(row["predicted_s"]) == 7


def test_the_command_writes_its_table_and_refuses_bad_input_in_one_line(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "twin-fidelity.md"
    got = runner.invoke(app, ["twin", "fidelity", str(study), "--fit", "2", "-o", str(out)])
    assert got.exit_code == 0, got.output
    assert out.read_text().startswith("Command: `scoretune twin fidelity") and "| 2 | 5 |" in out.read_text()
    assert json.loads(out.with_suffix(".json").read_text())["fits"][0]["fitted_on"] == 2
    with pytest.raises(AgentError, match="within 1..4"):
        twin_fidelity(study, [5])
    with pytest.raises(InputError, match="fidelity.json"):
        twin_fidelity(tmp_path, [1])
    broken = tmp_path / "broken"
    shutil.copytree(study, broken)
    shutil.rmtree(broken / "local" / "profile-03")
    with pytest.raises(InputError, match="profile-03"):
        twin_fidelity(broken, [1])
    bad = runner.invoke(app, ["twin", "fidelity", str(study), "--fit", "x"])
    assert bad.exit_code != 0 and "--fit" in bad.output and "Traceback" not in bad.output
