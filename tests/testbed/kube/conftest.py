"""Fixtures for the kube backend tests: a fake API server (fakeapi.py) and a client aimed at it."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, make_backend

from testbed.kube.render import scheduler_objects
from testbed.scheduler.config import default_profile


@pytest.fixture
def fake():
    api = FakeKube().start()
    api.install_scheduler(scheduler_objects(default_profile("scoretune-scheduler"))[-2:])
    yield api
    api.stop()


@pytest.fixture
def backend(fake):
    b = make_backend(fake)
    yield b
    b.close()
