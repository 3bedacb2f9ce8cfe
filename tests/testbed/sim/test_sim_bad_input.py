"""Bad input to the simulator and its CLI: `sim import-cluster` files, clusters where no pod fits,
workloads with long idle stretches, run directories and `-o` paths, and what a long run shows."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
from sim_fixtures import make_cluster, make_spec
from typer.testing import CliRunner

from agent.cli import app
from functions.errors import InputError
from loadgen.synth import poisson
from loadgen.workload import make_workload, write_workload
from testbed.errors import ClusterSpecError, InfeasibleClusterError
from testbed.scheduler.config import default_profile
from testbed.sim import engine as E
from testbed.sim.engine import SimConfig, Simulation
from testbed.sim.progress import COMPILE_NOTICE

runner = CliRunner()


@pytest.fixture(scope="module")
def workload_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "w.parquet"
    write_workload(poisson(2.0, 10.0, ["float-ops", "aes"], seed=0), path)
    return path


def _node(name="n1", cpu="4", memory="8Gi", pods="110", ann=None, **extra):
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": ann or {}},
           "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}
    obj.update(extra)
    return obj


def _nodelist(*items) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": list(items)})


def _one_error_line(r) -> str:
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(COMPILE_NOTICE)]
    assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert "scoretune bug" not in lines[0] and "Traceback" not in r.output
    return lines[0]


# --- sim import-cluster -------------------------------------------------------------------------

IMPORT_BAD = [
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00", None, "a binary file"),
    ("latin-1", '{"kind": "NodeList", "items": [], "x": "caf\xe9"}'.encode("latin-1"), None, "not UTF-8 text"),
    ("truncated", _nodelist(_node())[:-30].encode(), None, "not valid JSON"),
    ("deep", b"[" * 100000 + b"]" * 100000, None, "nested too deeply"),
    ("scalar", b"3", None, "expected a NodeList"),
    ("podlist", json.dumps({"kind": "PodList", "items": []}).encode(), "kind", "got kind 'PodList'"),
    ("pod item", json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}).encode(),
     "items[0].kind", "expected a Node"),
    ("items mapping", json.dumps({"kind": "NodeList", "items": {"a": 1}}).encode(), "items", "list of items"),
    ("annotations list", _nodelist(_node(ann=["x"])).encode(), "items[0].metadata.annotations", "must be a mapping"),
    ("speed nan", _nodelist(_node(ann={"scoretune.io/speed": "nan"})).encode(),
     "items[0].metadata.annotations.scoretune.io/speed", "is not a speed"),
    ("speed inf", _nodelist(_node(ann={"scoretune.io/speed": "inf"})).encode(),
     "items[0].metadata.annotations.scoretune.io/speed", "is not a speed"),
    ("speed zero", _nodelist(_node(ann={"scoretune.io/speed": "0"})).encode(),
     "items[0].metadata.annotations.scoretune.io/speed", "is not a speed"),
    ("bandwidth zero", _nodelist(_node(ann={"scoretune.io/image-pull-bandwidth": "0"})).encode(),
     "items[0].metadata.annotations.scoretune.io/image-pull-bandwidth", "must be positive"),
    ("bandwidth nan", _nodelist(_node(ann={"scoretune.io/image-pull-bandwidth": "NaN"})).encode(),
     "items[0].metadata.annotations.scoretune.io/image-pull-bandwidth", "not a finite quantity"),
    ("pods huge", _nodelist(_node(pods="1e12")).encode(), "items[0].status.allocatable.pods", "node 'n1'"),
    ("no allocatable", _nodelist({"kind": "Node", "metadata": {"name": "x"}, "status": {}}).encode(),
     "items[0].status.allocatable.cpu", "no allocatable cpu"),
    ("duplicate names", _nodelist(_node(), _node()).encode(), "items[1].metadata.name", "duplicate node name"),
    ("upper-case name", _nodelist(_node(name="Node-A")).encode(), "items[0].metadata.name", "node 'Node-A'"),
]


@pytest.mark.parametrize(("name", "raw", "field", "words"), IMPORT_BAD, ids=[c[0] for c in IMPORT_BAD])
def test_import_cluster_bad_nodes_file(tmp_path, name, raw, field, words):
    nodes = tmp_path / "nodes.json"
    nodes.write_bytes(raw)
    out = tmp_path / "twin.yaml"
    line = _one_error_line(runner.invoke(app, ["sim", "import-cluster", "--nodes", str(nodes), "-o", str(out)]))
    prefix = f"Error: {nodes}: " + (f"field {field}: " if field else "")
    assert line.startswith(prefix) and words in line, line
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_import_cluster_out_is_a_directory(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(_nodelist(_node()))
    line = _one_error_line(runner.invoke(app, ["sim", "import-cluster", "--nodes", str(nodes), "-o", str(tmp_path)]))
    assert line == f"Error: {tmp_path}: field --out: is a directory; give the path of the cluster spec YAML to write"


def test_import_cluster_failed_write_keeps_the_old_spec_and_no_temporary(tmp_path, monkeypatch):
    import yaml

    nodes = tmp_path / "nodes.json"
    nodes.write_text(_nodelist(_node()))
    out = tmp_path / "twin.yaml"
    out.write_text("old: spec\n")

    def broken_dump(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(yaml, "safe_dump", broken_dump)
    from testbed.sim.importer import import_cluster, write_cluster_yaml

    with pytest.raises(OSError):
        write_cluster_yaml(import_cluster(nodes), out)
    assert out.read_text() == "old: spec\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.json", "twin.yaml"]


def test_import_cluster_round_trips_a_good_file(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(_nodelist(_node(ann={"scoretune.io/speed": "1.5"}), _node(name="n2")))
    out = tmp_path / "sub" / "twin.yaml"
    r = runner.invoke(app, ["sim", "import-cluster", "--nodes", str(nodes), "-o", str(out)])
    assert r.exit_code == 0, r.output
    from testbed.cluster import load_cluster

    spec = load_cluster(out)
    assert [n.name for n in spec.nodes] == ["n1", "n2"] and spec.nodes[0].speed == 1.5
    assert sorted(p.name for p in out.parent.iterdir()) == ["twin.yaml"]


def test_import_pods_file_not_utf8(tmp_path):
    nodes = tmp_path / "nodes.json"
    nodes.write_text(_nodelist(_node()))
    pods = tmp_path / "pods.json"
    pods.write_bytes(b'{"kind": "PodList", "items": [], "x": "\xff"}')
    line = _one_error_line(runner.invoke(app, ["sim", "import-cluster", "--nodes", str(nodes), "--pods", str(pods),
                                               "-o", str(tmp_path / "t.yaml")]))
    assert line.startswith(f"Error: {pods}: not UTF-8 text")


# --- a cluster where no pod fits ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        ({"cpu": "100m", "memory": "8Gi"}, "0/3 nodes are available: 3 Insufficient cpu"),
        ({"cpu": "4", "memory": "16Mi"}, "0/3 nodes are available: 3 Insufficient memory"),
        ({"cpu": "4", "memory": "8Gi", "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
         "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}"),
        ({"cpu": "4", "memory": "8Gi", "unschedulable": True}, "0/3 nodes are available: 3 node(s) were unschedulable"),
    ],
    ids=["cpu", "memory", "taint", "unschedulable"],
)
def test_no_node_fits_fails_at_once_naming_function_and_reason(group, reason):
    cluster = make_cluster([{"name": "n", "count": 3, **group}])
    specs = {"a": make_spec("a"), "big": make_spec("big", memory_request="1Gi", memory_limit="2Gi")}
    wl = make_workload([1.0, 5000.0], ["a", "big"])
    # "at once": the constructor refuses the cluster, so no simulated time passes (no timing
    # threshold, which a loaded machine could break)
    with pytest.raises(InfeasibleClusterError) as err:
        Simulation(cluster, specs, wl, default_profile())
    msg = str(err.value)
    assert "function a (pod requests cpu 275m, memory 64Mi" in msg and reason in msg, msg
    assert isinstance(err.value, ClusterSpecError)


def test_a_function_that_fits_somewhere_is_not_refused():
    cluster = make_cluster([{"name": "small", "count": 2, "cpu": "100m", "memory": "8Gi"},
                            {"name": "big", "count": 1, "cpu": "4", "memory": "8Gi"}])
    out = Simulation(cluster, {"a": make_spec("a")}, make_workload([1.0, 2.0], ["a", "a"]), default_profile()).run()
    assert list(out.status) == [1, 1]


def test_sim_run_on_impossible_cluster_is_one_line_and_writes_nothing(tmp_path, workload_file):
    cluster = tmp_path / "tiny.yaml"
    cluster.write_text("name: tiny\ngroups: [{name: n, count: 4, cpu: 10m, memory: 16Mi}]\n")
    out = tmp_path / "run"
    line = _one_error_line(runner.invoke(app, ["sim", "run", "--cluster", str(cluster), "--workload", str(workload_file),
                                               "--out", str(out)]))
    assert line.startswith(f"Error: {cluster}: function aes (pod requests cpu ")
    assert "fits on no node of cluster 'tiny': 0/4 nodes are available: 4 Insufficient cpu, 4 Insufficient memory" in line
    assert not out.exists()


# --- idle stretches -----------------------------------------------------------------------------------


def test_stray_arrival_far_away_is_simulated_quickly(small_cluster, small_specs):
    """Stepping through 1e7 idle seconds took over a minute; the jump makes it instant."""
    wl = make_workload([1.0, 2.0, 1e7, 1e7 + 0.5], ["a", "b", "a", "c"])
    # counted, not timed: run() reports progress every 64 one-second control steps, so stepping
    # through the 1e7 s would report ~156,000 times; the jump leaves a handful
    reports: list[float] = []
    out = Simulation(small_cluster, small_specs, wl, default_profile()).run(progress=lambda t, _h: reports.append(t))
    assert len(reports) < 100, len(reports)
    assert list(out.status) == [1, 1, 1, 1] and out.sim_end_s > 1e7
    assert np.all(out.cold)  # every revision had scaled back to zero in between


def test_jumping_idle_time_gives_the_same_run_as_stepping(small_cluster, small_specs, monkeypatch):
    base = poisson(6.0, 40.0, ["a", "b", "c"], seed=2).frame
    t = base["t_s"].to_numpy()
    f = base["function"].tolist()
    wl = make_workload(np.concatenate([t, t + 45.0, t + 700.3, t + 2500.0, [9000.7]]), f * 4 + ["b"])

    segments = []

    def run():
        sim = Simulation(small_cluster, small_specs, wl, default_profile(), seed=5, config=SimConfig(timeout_s=10.0))
        calls = [0]
        kernel = sim._kernel

        def counted(limit):
            calls[0] += 1
            return kernel(limit)

        sim._kernel = counted
        out = sim.run()
        segments.append(calls[0])
        pods = [(p.node, p.created_s, p.scheduled_s, p.ready_s, p.deleted_s, p.image_pull_s) for p in out.pods]
        return out, pods

    jumped, jumped_pods = run()
    monkeypatch.setattr(E, "IDLE_JUMP_MIN_S", float("inf"))  # never quiet: step every second
    stepped, stepped_pods = run()
    assert segments[1] > 9000 > 3 * segments[0]  # the idle stretches were really skipped
    for name in ("status", "node", "pod_uid", "cold", "finish_s", "start_s"):
        assert np.array_equal(getattr(jumped, name), getattr(stepped, name), equal_nan=True), name
    assert jumped_pods == stepped_pods
    assert (jumped.events, jumped.sim_end_s) == (stepped.events, stepped.sim_end_s)


def test_idle_stretch_with_min_scale_pods_is_refused_with_the_rebase(small_cluster):
    specs = {"warm": make_spec("warm", min_scale=1)}
    wl = make_workload([1.0, 2.0, 5e6], ["warm"] * 3)
    sim = Simulation(small_cluster, specs, wl, default_profile())
    with pytest.raises(InputError) as err:
        sim.run()
    msg = str(err.value)
    assert msg.startswith("row 2: field t_s: an idle stretch of 5e+06 s (from t=2 s to the arrival at t=5e+06 s)")
    assert "warm keep(s) min-scale pods up" in msg and "rebase the workload" in msg


# --- run directory, sweep, autoscale -------------------------------------------------------------------


def test_sim_run_out_is_a_file(tmp_path, workload_file):
    out = tmp_path / "afile"
    out.write_text("x")
    line = _one_error_line(runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                                               "--out", str(out)]))
    assert line == f"Error: {out}: field --out: exists and is not a directory; give a run directory to write"
    assert out.read_text() == "x"


def test_failed_write_leaves_no_old_summary_describing_new_tables(tmp_path, workload_file, monkeypatch):
    from loadgen.workload import read_workload
    from testbed.sim import backend as B

    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"count": 1, "failed": false}')

    def broken_write_run(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(B, "write_run", broken_write_run)
    with pytest.raises(OSError):
        B.SimBackend("lab-small", progress=False).run(read_workload(workload_file), out)
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("kind", ["directory", "typo"])
def test_sim_run_workload_path_errors_name_the_path(tmp_path, kind):
    wl = tmp_path if kind == "directory" else tmp_path / "runs" / "w.pq"
    line = _one_error_line(runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(wl),
                                               "--out", str(tmp_path / "run")]))
    words = "is a directory" if kind == "directory" else "no such workload file"
    assert line.startswith(f"Error: {wl}: ") and words in line, line


def test_negative_seed_is_refused(tmp_path, workload_file, small_cluster, small_specs):
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file), "--seed", "-1",
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--seed" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "run").exists()
    with pytest.raises(InputError, match="field seed: the seed must be a non-negative integer, not -1"):
        Simulation(small_cluster, small_specs, make_workload([1.0], ["a"]), default_profile(), seed=-1)


def test_sweep_refuses_an_empty_workload(small_cluster):
    from testbed.sim.sweep import sweep

    with pytest.raises(InputError, match="has no requests"):
        sweep(small_cluster, make_workload([], []), samples=1)


def test_sim_autoscale_spec_not_utf8(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_bytes(b'{"target_value": "\xe9"}')
    steps = tmp_path / "steps.json"
    steps.write_text("[]")
    line = _one_error_line(runner.invoke(app, ["sim", "autoscale", "--spec", str(spec), "--steps", str(steps)]))
    assert line.startswith(f"Error: {spec}: not UTF-8 text")


def test_sim_autoscale_step_time_nan(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"target_value": 10, "total_value": 13.3}))
    steps = tmp_path / "steps.json"
    steps.write_text('[{"t_s": NaN, "ready_pods": 1, "observed_stable": 1, "observed_panic": 1}]')
    line = _one_error_line(runner.invoke(app, ["sim", "autoscale", "--spec", str(spec), "--steps", str(steps)]))
    assert line == f"Error: {steps}: field 0.t_s: Input should be a finite number"


# --- what a long run shows ---------------------------------------------------------------------------


def test_progress_appears_only_after_the_delay_and_says_how_far():
    from testbed.sim.progress import Progress

    quiet = io.StringIO()
    with Progress("sim run", stream=quiet, show_after_s=60.0) as bar:
        bar.update(5, 10)
    assert quiet.getvalue() == ""

    shown = io.StringIO()
    bar = Progress("sim run", stream=shown, show_after_s=0.0)
    bar.phase("simulating")
    bar.update(250, 1000)
    with bar:
        time.sleep(0.2)
    lines = shown.getvalue().splitlines()
    assert lines[0].startswith("sim run: simulating, 250 of 1,000 simulated s (25 %), ")
    assert lines[-1].startswith("sim run: finished in")

    failed = io.StringIO()
    with pytest.raises(InputError), Progress("sim run", stream=failed, show_after_s=0.0):
        time.sleep(0.1)
        raise InputError("bad")
    assert failed.getvalue().splitlines()[-1].startswith("sim run: stopped after")


def test_sim_run_shows_progress_on_stderr_and_keeps_stdout_json(tmp_path, workload_file, monkeypatch):
    from testbed.sim import progress

    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)  # as if the run took longer than the delay
    r = runner.invoke(app, ["sim", "run", "--cluster", "lab-small", "--workload", str(workload_file),
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["out"] == str(tmp_path / "run")
    assert "sim run of " in r.stderr and " on lab-small: " in r.stderr


def test_simulation_reports_progress_through_the_run(small_cluster, small_specs):
    seen: list[tuple[float, float]] = []
    wl = make_workload(np.arange(1.0, 400.0, 0.5), ["a"] * 798)
    Simulation(small_cluster, small_specs, wl, default_profile()).run(progress=lambda t, h: seen.append((t, h)))
    assert len(seen) >= 5 and all(h == seen[0][1] for _, h in seen)
    assert [t for t, _ in seen] == sorted(t for t, _ in seen) and seen[-1][0] <= seen[0][1]


def test_numba_compilation_is_announced_once(capsys):
    from numba import njit
    from numba.core import event as numba_event

    from testbed.sim.progress import _CompileNotice

    notice = _CompileNotice(__name__)

    @njit
    def twice(x):
        return 2 * x

    @njit
    def thrice(x):
        return 3 * x

    with numba_event.install_listener("numba:compile", notice):
        assert twice(2) == 4 and thrice(2) == 6 and twice(3) == 6
    err = capsys.readouterr().err
    assert err.count("compiling the simulator's and the scheduler's kernels with numba") == 1
