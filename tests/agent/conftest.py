"""The agent tests' one backend fixture: ``scoretune tune`` runs the real backend it is asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import Crash

import agent.loop.backends


class CrashingBackend:
    """A real backend whose ``run`` raises :class:`Crash` on its N-th call (a kill mid-experiment)."""

    def __init__(self, inner: Any, crash_on_run: int) -> None:
        self.inner = inner
        self.crash_on_run = crash_on_run
        self.runs = 0

    def apply(self, profile: Any) -> None:
        self.inner.apply(profile)

    def reset(self) -> None:
        self.inner.reset()

    def run(self, workload: Any, out_dir: Path, *, seed: int = 0) -> Any:
        self.runs += 1
        if self.runs == self.crash_on_run:
            raise Crash(f"killed during run {self.runs}")
        return self.inner.run(workload, out_dir, seed=seed)

    def close(self, *, failed: bool = False) -> None:
        self.inner.close(failed=failed)


class Backends(list):
    """Every backend the command made, in order; set ``crash_on_run`` before a command to make its
    backend crash on that run."""

    crash_on_run: int | None = None


@pytest.fixture
def made_backends(monkeypatch: pytest.MonkeyPatch) -> Backends:
    """Records the backends ``scoretune tune`` makes through the real ``make_backend`` (so
    ``--backend sim`` runs the simulator) and injects a crash where a test asks for one."""
    made = Backends()
    real = agent.loop.backends.make_backend

    def make_backend(name: str, cluster: Any, *, seed: int = 0, kube: Any = None, platform: str = "knative",
                     runtime: str = "process", host_fit: str = "scale") -> Any:
        backend = real(name, cluster, seed=seed, kube=kube, platform=platform, runtime=runtime, host_fit=host_fit)
        if made.crash_on_run is not None:
            backend, made.crash_on_run = CrashingBackend(backend, made.crash_on_run), None
        made.append(backend)
        return backend

    monkeypatch.setattr(agent.loop.backends, "make_backend", make_backend)
    return made
