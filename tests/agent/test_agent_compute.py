"""Compute beyond one machine (agent/compute.py, agent/rl/ray_vec_env.py): a local Ray gives the
same results as the process pool, progress comes as tasks finish, a task whose worker dies is
rerun, and an address nothing answers at is one line."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray", reason="Ray is the optional extra scoretune[ray] (installed by make test)")

import agent_fixtures  # noqa: E402

from agent.cli import app  # noqa: E402
from agent.compute import Compute, run_tasks  # noqa: E402
from agent.errors import AgentError  # noqa: E402
from agent.evaluation.study import Protocol, evaluate  # noqa: E402
from loadgen.workload import write_workload  # noqa: E402
from testbed.cluster import CLUSTERS_DIR  # noqa: E402
from testbed.scenarios import lab_workload  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def local_ray():
    """One Ray on this machine for the module; functions of the test modules travel by value (Ray's
    workers cannot import tests/)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(agent_fixtures)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _scenario(tmp_path: Path, name: str, seed: int) -> str:
    cluster = tmp_path / f"{name}.yaml"
    shutil.copy(CLUSTERS_DIR / "lab-small.yaml", cluster)
    workload = tmp_path / f"{name}.parquet"
    write_workload(lab_workload(seed, duration_s=8.0), workload)
    return f"{cluster}={workload}"


def test_a_grid_on_a_local_ray_equals_the_process_pool(local_ray, tmp_path):
    scenarios = [_scenario(tmp_path, "a", 1), _scenario(tmp_path, "b", 2)]
    kw = dict(seeds=2, protocol=Protocol(steps=3, oracle_runs=12), methods=["default", "random", "tpe"])
    seen: list[tuple[str, int, int]] = []
    evaluate(scenarios, out_dir=tmp_path / "pool", compute=Compute(jobs=2), **kw)
    evaluate(scenarios, out_dir=tmp_path / "ray", compute=Compute(jobs=2, ray="auto"),
             on_done=lambda s, k, n: seen.append((s, k, n)), **kw)
    for name in ("results.csv", "table.md", "table.csv", "budget.md", "oracle.json"):
        assert (tmp_path / "ray" / name).read_text() == (tmp_path / "pool" / name).read_text(), name
    assert [k for _, k, _ in seen] == [1, 2, 3, 4] and {n for _, _, n in seen} == {4}  # as tasks finished


def _dies_once(marker: str) -> int:
    """Kills its own worker process the first time it runs (a lost worker), answers the second time."""
    path = Path(marker)
    if not path.exists():
        path.write_text("died")
        os._exit(1)
    return len(path.read_text())


def test_a_task_whose_worker_dies_is_rerun(local_ray, tmp_path):
    done: list[int] = []
    results = run_tasks(_dies_once, [str(tmp_path / "m0"), str(tmp_path / "m1")], Compute(ray="auto"),
                        on_done=lambda i, r: done.append(i))
    assert results == [4, 4] and sorted(done) == [0, 1]


def _fails(x: int) -> int:
    raise AgentError(f"task {x} says what is wrong")


def test_a_task_error_is_its_own_line_not_retried(local_ray):
    with pytest.raises(AgentError, match="task 3 says what is wrong"):
        run_tasks(_fails, [3], Compute(ray="auto"))


def test_an_unreachable_ray_address_is_one_line_and_quick(tmp_path):
    t0 = time.monotonic()
    result = CliRunner().invoke(app, ["evaluate", "--scenarios", "lab-web", "--methods", "random", "--policy", "none",
                                      "--seeds", "1", "--steps", "1", "--oracle-runs", "0", "--ray", "127.0.0.1:1",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--ray 127.0.0.1:1: no Ray cluster answers there" in lines[0], result.output
    assert time.monotonic() - t0 < 30


def _train(tmp_path: Path, name: str, **extra):
    from agent.rl.train import Args, train

    args = Args(out=str(tmp_path / name), total_timesteps=48, num_envs=2, n_steps=12, batch_size=12, n_epochs=2,
                steps=5, checkpoint_freq=0, progress_bar=False, normalize_reward=False, **extra)
    return train(args, sampler=agent_fixtures.analytic_sampler)


def test_training_on_ray_actors_equals_subprocesses(local_ray, tmp_path):
    import torch
    from stable_baselines3 import PPO

    a = PPO.load(str(_train(tmp_path, "subproc", vec="subproc")), device="cpu").policy.state_dict()
    b = PPO.load(str(_train(tmp_path, "ray", ray="auto")), device="cpu").policy.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "the same seed trained a different policy on Ray"
    assert np.isfinite(float(next(iter(b.values())).abs().sum()))
