"""The embedded lab end to end: up -> a 10 s workload through real HTTP and Locust -> down, the
CLI's up/status/down, and the clear errors before any load starts."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from typer.testing import CliRunner

from agent.cli import app
from loadgen.workload import make_workload
from testbed.cluster import parse_cluster
from testbed.errors import InputError, TestbedError
from testbed.local import lab as labmod
from testbed.local.backend import LocalBackend
from testbed.local.state import LabState
from testbed.scheduler.config import default_profile, profile_record

pytestmark = pytest.mark.lab



def test_up_run_down_leaves_nothing(small_workload, cluster_file, state_dir, monkeypatch):
    wl = small_workload()
    backend = LocalBackend(cluster_file, state_dir=state_dir)
    monkeypatch.chdir(state_dir.parent)
    try:
        backend.reset()
        backend.apply(default_profile())  # the lab's own default: the record, not the placements, changes
        result = backend.run(wl, Path("runs/r"))  # a relative run directory, as the CLI defaults give
    finally:
        backend.close()
    s = result.summary
    # the test cluster's 1.5 cores are more than a 2-core host leaves beside the harness: the lab
    # keeps its share of the requests, and says so
    scale = s["lab_scale"]
    assert scale["requests_declared"] == len(wl) and scale["factor"] == scale["host_fit"]["factor"] <= 1
    assert s["count"] == scale["requests_replayed"] == s["ok"] + s["errors"] + s["timeouts"]
    assert s["host"]["probe"]["cpu_ms"] > 0 and set(s["host"]["drift"]) == {"cpu_ms", "unpack_ms"}
    assert s["by_start"]["cold"]["count"] + s["by_start"]["warm"]["count"] == s["ok"]
    assert s["host"]["seconds"] > 0 and 0 <= s["host"]["steal_share"] < 1  # what the machine did meanwhile
    assert s["ok"] == s["count"], s
    assert not result.failed
    req, pl = result.requests, result.placements
    # every request was served on a node that has a placement of its function
    placed = {(f, n) for f, n in zip(pl["function"], pl["node"], strict=True)}
    assert set(zip(req["function"], req["node"], strict=True)) <= placed
    # both functions start at zero, so each had at least one cold start, reported per request
    assert set(req.loc[req["cold_start"].astype(bool), "function"]) == {"float-ops", "dynamic-html"}
    # the slow node had no image cached: an instance placed there waited for the pull
    slow = pl[pl["node"] == "slow-0"]
    assert (slow["image_pull_s"].dropna() > 0).all()
    # the summary's breakdown counts those pods and pulls (it once kept the load generator's, which
    # knew no placements: the twin never saw a pull on the lab)
    where = s["where"]["nodes"]
    assert sum(c["pods"] for c in where.values()) == pl["node"].notna().sum()
    assert where["slow-0"]["pulls"] == int((slow["image_pull_s"].dropna() > 0).sum()) > 0
    assert (pl["ready_s"].dropna() >= pl["scheduled_s"].dropna().min()).all()
    assert s["cluster"] == "test-lab" and s["backend"] == "local"
    assert set(s["profile"]) == {"scheduler_name", "weights", "config"}  # the shape of every backend
    assert s["profile"] == profile_record(default_profile())
    assert not LabState(state_dir).live_procs()


def test_cli_up_status_down(cluster_file, state_dir):
    runner = CliRunner()
    up = runner.invoke(app, ["testbed", "up", "--cluster", str(cluster_file), "--port", "0", "--state-dir", str(state_dir)])
    assert up.exit_code == 0, up.output
    assert "notice: node CPU capacity is enforced with" in up.output
    st = runner.invoke(app, ["testbed", "status", "--json", "--state-dir", str(state_dir)])
    assert st.exit_code == 0, st.output
    data = json.loads(st.output)
    assert data["running"] and [n["name"] for n in data["nodes"]] == ["fast-0", "slow-0"]
    assert {p["role"] for p in data["processes"]} == {"controller", "agent"}
    harness = (LabState(state_dir).read_lab() or {})["cpu"]["harness"]
    if harness:  # the harness runs in its own group, weighted by its reserve, not at a niceness
        for p in data["processes"]:
            cpu_line = next(x for x in Path(f"/proc/{p['pid']}/cgroup").read_text().splitlines()
                            if x.split(":")[1] in ("cpu", "cpu,cpuacct", ""))
            assert harness.endswith(cpu_line.split(":", 2)[2]), (p, cpu_line)
    assert data["profile"] == profile_record(default_profile())  # the controller's, in the summary.json shape
    again = runner.invoke(app, ["testbed", "up", "--cluster", str(cluster_file), "--port", "0", "--state-dir", str(state_dir)])
    assert again.exit_code == 1 and "already running" in again.output  # "Error: ..." on stderr, mixed in
    recorded = LabState(state_dir).procs()
    down = runner.invoke(app, ["testbed", "down", "--state-dir", str(state_dir)])
    assert down.exit_code == 0 and "stopped 1 controller, 2 agent(s)" in down.output
    assert not any(r.alive() for r in recorded)
    gone = runner.invoke(app, ["testbed", "status", "--state-dir", str(state_dir)])
    assert "no lab running" in gone.output


def test_taken_port_is_a_clear_error_before_anything_starts(cluster_file, state_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(TestbedError, match=f"port {port} on 127.0.0.1 is already in use"):
            labmod.up(cluster_file, state_dir=state_dir, port=port)
    assert LabState(state_dir).procs() == []


def test_bad_workloads_fail_before_load(small_workload, cluster_file, state_dir, tmp_path):
    tiny = parse_cluster({"name": "tiny", "groups": [{"name": "n", "cpu": "200m", "memory": "1Gi"}]})
    backend = LocalBackend(tiny, state_dir=state_dir)
    try:
        with pytest.raises(InputError, match="unknown function 'no-such-fn'"):
            backend.run(small_workload(functions=("float-ops", "no-such-fn")), tmp_path / "r1")
        with pytest.raises(InputError, match="'float-ops' .* fits on no node of cluster 'tiny'"):
            backend.run(small_workload(functions=("float-ops",)), tmp_path / "r2")
        assert not (tmp_path / "r1" / "requests.parquet").exists()
    finally:
        backend.close()


def test_unschedulable_cluster_is_rejected_at_up(state_dir):
    spec = parse_cluster({"name": "cordoned", "groups": [{"name": "n", "cpu": "1", "memory": "1Gi", "unschedulable": True}]})
    with pytest.raises(InputError, match="every node is unschedulable"):
        labmod.up(spec, state_dir=state_dir, port=0)


def test_lab_stops_itself_when_its_backend_process_dies(cluster_file, state_dir):
    """A backend killed without close() (a crashed experiment) leaves nothing behind."""
    import subprocess
    import sys
    import time

    code = (
        "import sys, time\n"
        "from testbed.local.backend import LocalBackend\n"
        f"b = LocalBackend({str(cluster_file)!r}, state_dir={str(state_dir)!r})\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "up"
        recorded = LabState(state_dir).procs()
        assert {r.role for r in recorded} == {"controller", "agent"}
        owner.kill()
        owner.wait(10)
        deadline = time.monotonic() + 20
        while any(r.alive() for r in recorded) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(r.alive() for r in recorded)
        assert LabState(state_dir).read_lab() is None, "the lab's state was cleared"
    finally:
        if owner.poll() is None:
            owner.kill()


def _wait_dead(records, timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while any(r.alive() for r in records) and time.monotonic() < deadline:
        time.sleep(0.1)


def test_agents_stop_by_themselves_when_their_labs_folder_is_deleted(cluster_file, tmp_path):
    """A make tune that failed part-way, its controller killed and its folder deleted: nothing
    can stop the agents by pid any more, so each stops itself once its lab's state is gone."""
    import shutil
    import signal

    root = tmp_path / "doomed" / "lab-state"
    labmod.up(cluster_file, state_dir=root, port=0)
    lab = LabState(root).read_lab()
    group = Path(lab["cpu"]["base"]) / lab["cpu"]["lab_group"] if lab["cpu"]["base"] else None
    recorded = LabState(root).procs()
    agents = [r for r in recorded if r.role == "agent"]
    assert len(agents) == 2
    for rec in recorded:
        if rec.role == "controller":
            import os

            os.kill(rec.pid, signal.SIGKILL)
    shutil.rmtree(root.parent)
    _wait_dead(agents)
    assert not any(r.alive() for r in agents)
    # nor the lab's own CPU group: no `down` could remove it (CI left such empty groups behind)
    assert group is None or not group.exists(), f"left behind: {group}"


def test_down_stops_agents_no_record_names(cluster_file, state_dir):
    """An earlier lab in the same state directory whose records were lost (it failed, or another
    lab cleared them): `testbed down` still finds its processes by their command line."""
    labmod.up(cluster_file, state_dir=state_dir, port=0)
    state = LabState(state_dir)
    recorded = state.procs()
    assert {r.role for r in recorded} == {"controller", "agent"}
    for path in state.procs_dir.iterdir():  # the records are gone (lab.json stays), the processes are not
        path.unlink()
    assert state.procs() == [] and all(r.alive() for r in recorded)
    stopped = labmod.down(state_dir)
    _wait_dead(recorded, 5.0)
    assert not any(r.alive() for r in recorded)
    assert stopped["agent"] == 2 and stopped["controller"] == 1


def test_a_run_whose_lab_controller_died_is_void(cluster_file, state_dir, tmp_path):
    """The controller killed mid-run (as when the lab tears itself down): every request after it
    fails, which is the lab's failure and not the profile's; the run is written, and void."""
    backend = LocalBackend(cluster_file, state_dir=state_dir, timeout_s=5.0)

    def kill_controller() -> None:
        time.sleep(6.0)  # Locust is up a few seconds after the run starts
        (rec,) = LabState(state_dir).procs("controller")
        psutil.Process(rec.pid).kill()

    rng = np.random.default_rng(2)
    t = np.sort(rng.uniform(0.0, 8.0, 24))
    killer = threading.Thread(target=kill_controller, daemon=True)
    try:
        killer.start()
        result = backend.run(make_workload(t, ["float-ops"] * len(t), metadata={"name": "dies"}), tmp_path / "run")
        killer.join(timeout=10)
    finally:
        backend.close()
    assert result.failed and "controller at" in result.summary["failure"]
    assert "stopped answering during the run" in result.summary["failure"]
    assert result.summary["count"] == result.summary["lab_scale"]["requests_replayed"]  # nothing scheduled is lost
    assert not LabState(state_dir).live_procs()


@pytest.mark.parametrize("how", ["clean", "failed", "given"])
def test_a_backend_removes_the_state_directory_it_made_unless_the_work_failed(cluster_file, tmp_path, monkeypatch, how):
    """Every ``tune --backend local`` left its private ``scoretune-local-*`` directory (the lab's
    logs) in the temporary directory: 83 of them piled up on this machine. After a clean close the
    directory the backend made is gone; after a failure its logs stay for a post-mortem; a
    directory the caller gave is never removed."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    given = tmp_path / "given-state" if how == "given" else None
    backend = LocalBackend(cluster_file, state_dir=given, cpu_enforcement="duty-cycle")
    state = backend.state_dir
    try:
        assert (state / "lab.json").exists() and (given is None) == state.name.startswith("scoretune-local-")
    finally:
        backend.close(failed=how == "failed")
    assert labmod.running_lab(state) is None
    if how == "clean":
        assert not state.exists()
    else:
        assert (state / "logs" / "controller.log").exists() and not (state / "lab.json").exists()
