"""Shared fixtures: paths to the shared traces (read, never copied) and the repository root."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    path = SHARED / "traces"
    if not path.exists():
        pytest.skip("../shared/traces is not present beside the repository")
    return path
