"""Shared fixtures: the repository root, real traces (used where they are, or the test skips with the
fetch command to run) and fixture traces in the published formats (so no test fails for lack of data)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from trace_fixtures import write_fixture_traces

from loadgen import trace_store

REPO = Path(__file__).resolve().parents[1]
REAL_TRACE_DIRS = trace_store.search_dirs()
"""Where the real traces are, read before any fixture points ``$SCORETUNE_TRACES`` elsewhere."""


TRACE_FIXTURES = {"real_trace", "fixture_traces", "use_fixture_traces"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that reads a trace, so CI can rerun them with an empty trace directory."""
    for item in items:
        if TRACE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("traces")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def real_trace() -> Callable[[str], Path]:
    """``real_trace("azure/....csv")``: the real file wherever the tool finds it (the trace
    directory, or the read-only ``../shared/traces``), or a skip naming the trace to fetch."""
    registry = trace_store.load_registry()

    def get(relpath: str) -> Path:
        found = trace_store.find(relpath, registry, REAL_TRACE_DIRS)
        if found is None:
            owner = registry.owner(relpath)
            name = owner[0] if owner else relpath
            pytest.skip(f"real trace {relpath} is not present: run `scoretune traces fetch {name}`")
        return found

    return get


@pytest.fixture(scope="session")
def fixture_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace directory holding a small synthetic file for every registry file."""
    return write_fixture_traces(tmp_path_factory.mktemp("fixture-traces"))


@pytest.fixture(scope="module")
def use_fixture_traces(fixture_traces: Path) -> Iterator[Path]:
    """Point the tool at the fixture traces (``$SCORETUNE_TRACES``) and a fresh workload cache for
    one test module: scenarios and generators that read a trace run on any clone."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SCORETUNE_TRACES", str(fixture_traces))
        mp.setenv("SCORETUNE_CACHE", str(fixture_traces.parent / "cache"))
        yield fixture_traces


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before xdist starts its workers, compile the simulator's kernels once per platform, side by side
    (:mod:`testbed.sim.warmup`): on a cold numba cache every worker would compile each kernel it
    meets, and a clean clone's fast tier spent 140 s of its wall time compiling the same kernels
    twice. Runs in xdist's controller only (its own ``pytest_sessionstart`` starts the workers after
    this one); a failure is left to the tests that use the kernel to report in full."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return
    from testbed.sim.warmup import compile_all

    for failure in compile_all():
        session.config.issue_config_time_warning(
            pytest.PytestWarning(f"compiling the {failure.platform} kernels failed: {failure.last_line}"),
            stacklevel=2,
        )
