"""Nothing no API shows reaches a tuner (issue 44, item 2): every method's tuner, built from two worlds
that differ only in what a user cannot see (node speeds, pull bandwidths), is fed the same measured
runs for several steps and must propose the same profiles; and while it builds and runs, everything
that can read a cluster or a scenario by name (the spec loader, the scenario library, the generated
families, the mismatch truth) raises, so a tuner cannot look the truth up behind its view either.

The guard replaces each such function in every loaded module that holds it, so a tuner that imported
it at its top is caught as well as one that imports it late; and each world's truth lies on disk under
the view's name while its tuner runs (:data:`WORLD`), so a tuner that reads the spec file itself is
caught by the difference. Planted (the second twin audit's leak: the twin set to the speeds and pulls
of ``parse_cluster`` on ``CLUSTERS_DIR / f"{name}.yaml"``): passed the old test, fails 4 of the 5
twin variants here."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from agent.actions import ActionCodec
from agent.evaluation.runner import run_experiment
from agent.objectives.sim import SimObjective, workload_context
from agent.objectives.view import user_view
from agent.rl.artefacts import SHIPPED_POLICY
from agent.tuners.factory import METHODS, make_tuner
from testbed.cluster import load_cluster
from testbed.scenarios import lab_workload

CODEC = ActionCodec()
STEPS = 3
HIDDEN_READERS = (
    ("testbed.cluster", "load_cluster"),
    ("testbed.scenarios", "get_scenario"),
    ("testbed.scenarios", "build_workload"),
    ("testbed.generated", "generated_scenario"),
    ("testbed.sim.mismatch", "perturb"),
    ("agent.objectives.sim", "scenario_objective"),
    ("agent.objectives.sim", "scenario_by_name"),
    ("agent.objectives.sim", "load_user_scenario"),
    ("agent.objectives.sim", "mismatch_truth"),
    ("testbed.local.hardware", "load_hardware"),
    ("testbed.local.hardware", "parse_hardware"),
    ("testbed.local.hardware", "hardware_file"),
)
"""What can read a cluster or scenario by name, or draw the truth: a tuner calls none of them."""


class LeakError(AssertionError):
    pass


@contextlib.contextmanager
def nothing_hidden_readable() -> Iterator[list[str]]:
    """Every function of :data:`HIDDEN_READERS` raises while the block runs, wherever it is bound."""
    tried: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        for module_name, attr in HIDDEN_READERS:
            original = getattr(importlib.import_module(module_name), attr)

            def refuse(*args: Any, _what: str = f"{module_name}.{attr}", **kwargs: Any) -> Any:
                tried.append(_what)
                raise LeakError(f"a tuner called {_what}: it reads what no API shows")

            for module in list(sys.modules.values()):
                if getattr(module, attr, None) is original:
                    mp.setattr(module, attr, refuse)
        yield tried


def _hidden_changed(cluster: Any) -> Any:
    """The same cluster as the API shows it, with every hidden parameter changed."""
    nodes = tuple(dataclasses.replace(n, speed=n.speed * (0.3 + 0.4 * i), image_pull_bytes_per_s=n.image_pull_bytes_per_s / (i + 2))
                  for i, n in enumerate(cluster.nodes))
    return dataclasses.replace(cluster, nodes=nodes)


WORLD = "leak-test-world"
"""Both worlds' name. While a tuner is built and run, the spec directory holds ``WORLD.yaml`` with
the true (hidden) spec of the world the tuner was built from (:func:`_truth_on_disk`), so a tuner
that reads the spec file by name itself (``parse_cluster`` on the file, not the guarded
``load_cluster``) sees a different truth in each world and proposes differently. Named
``lab-small`` in both, as before, such a tuner found the same file behind both views and passed
(the second twin audit planted exactly that)."""


@contextlib.contextmanager
def _truth_on_disk(world: Any, tmp: Any) -> Iterator[None]:
    """``CLUSTERS_DIR`` (wherever a module holds it) is ``tmp``, holding ``world``'s true spec."""
    import yaml

    from testbed.cluster import CLUSTERS_DIR, cluster_to_dict

    (tmp / f"{WORLD}.yaml").write_text(yaml.safe_dump(cluster_to_dict(world)))
    with pytest.MonkeyPatch.context() as mp:
        for module in list(sys.modules.values()):
            if getattr(module, "CLUSTERS_DIR", None) == CLUSTERS_DIR:
                mp.setattr(module, "CLUSTERS_DIR", tmp)
        yield


@pytest.fixture(scope="module")
def worlds() -> tuple[Any, Any, Any]:
    from testbed.cluster import CLUSTERS_DIR

    cluster = dataclasses.replace(load_cluster("lab-small"), name=WORLD, path=None)
    assert not list(CLUSTERS_DIR.rglob(f"{WORLD}*"))  # only _truth_on_disk puts it there
    return cluster, _hidden_changed(cluster), lab_workload(3, duration_s=15.0)


def _proposals(method: str, cluster: Any, workload: Any, measured_on: Any, tmp: Any) -> list[str]:
    """The profiles ``method``'s tuner proposes when built from ``cluster`` (what it may know of it:
    the user's view and the workload's context) and measured on ``measured_on``, with ``cluster``'s
    truth on disk under the view's name."""
    context = workload_context(cluster, workload)
    with nothing_hidden_readable() as tried, _truth_on_disk(cluster, tmp):
        tuner = make_tuner(method, CODEC, seed=1, policy=SHIPPED_POLICY, steps=STEPS, context=context,
                           view=user_view(cluster, workload))
        settings, _ = run_experiment(tuner, SimObjective(measured_on, workload, 0), STEPS, CODEC)
    assert not tried, tried
    return [s.label() for s in settings]


@pytest.mark.parametrize("method", METHODS)
def test_no_tuner_sees_what_no_api_shows(worlds, method, tmp_path):
    cluster, other, workload = worlds
    assert other != cluster and user_view(other, workload).fingerprint() == user_view(cluster, workload).fingerprint()
    # the same runs (those of the first world) for both: only what the tuner was built from differs
    assert _proposals(method, cluster, workload, cluster, tmp_path) == _proposals(method, other, workload, cluster, tmp_path)


def test_the_guard_catches_a_late_and_an_early_import():
    from testbed import cluster as cluster_module

    early = load_cluster  # bound at this module's top, as a tuner's own import would be
    with nothing_hidden_readable() as tried:
        with pytest.raises(LeakError, match="testbed.cluster.load_cluster"):
            cluster_module.load_cluster("lab-small")
        with pytest.raises(LeakError):
            sys.modules[__name__].load_cluster("lab-small")
    assert tried == ["testbed.cluster.load_cluster"] * 2
    assert early("lab-small").name == "lab-small"  # restored afterwards
