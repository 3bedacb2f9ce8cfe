"""Fixtures for the kube backend tests: a fake API server (fakeapi.py) and a client aimed at it."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from kubernetes import client

from testbed.kube.backend import KubeBackend, KubeTimeouts
from testbed.kube.render import scheduler_objects
from testbed.scheduler.config import default_profile


@pytest.fixture
def fake():
    api = FakeKube().start()
    api.install_scheduler(scheduler_objects(default_profile("scoretune-scheduler"))[-2:])
    yield api
    api.stop()


def make_backend(fake: FakeKube, **timeouts: float) -> KubeBackend:
    cfg = client.Configuration(host=fake.url)
    cfg.retries = 0
    base = {"poll_s": 0.01, "rollout_s": 5.0, "rollback_s": 5.0, "drain_s": 5.0, "api_s": 5.0, "watch_s": 1,
            "settle_s": 0.3}
    base.update(timeouts)
    return KubeBackend(api_client=client.ApiClient(cfg), functions=list(fake.functions), ingress_url=fake.url,
                       timeouts=KubeTimeouts(**base), start_lead_s=1.5)


@pytest.fixture
def backend(fake):
    b = make_backend(fake)
    yield b
    b.close()
