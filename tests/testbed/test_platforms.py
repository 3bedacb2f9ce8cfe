"""The platform registry (testbed.platforms): every platform name has one entry, each entry's pieces
are the modules that platform runs on every backend, and a name is checked in one place."""

from __future__ import annotations

import pytest

from functions.errors import InputError
from functions.platform import PLATFORMS, Platform, parse_platform
from functions.spec import discover_specs
from loadgen.targets import IngressTarget, OpenWhiskTarget
from testbed.cluster import load_cluster
from testbed.local.controllers.base import LabControl
from testbed.platforms import REGISTRY, load, platform_entry

KEY = "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:secret"


def test_every_platform_name_has_one_entry():
    assert set(REGISTRY) == set(Platform) and PLATFORMS == ("knative", "openwhisk")
    for name, entry in REGISTRY.items():
        assert entry.platform is name and platform_entry(str(name)) is entry


def test_an_unknown_name_is_one_line_naming_the_field_and_the_choices():
    with pytest.raises(InputError, match=r"field --platform: unknown platform 'lambda'; one of knative, openwhisk"):
        platform_entry("lambda", field="--platform")
    with pytest.raises(InputError, match="lab.json: field platform"):
        parse_platform("", file="lab.json")
    assert parse_platform("openwhisk") is Platform.OPENWHISK


def test_each_entry_names_its_own_pieces():
    from testbed.sim.engine import Simulation
    from testbed.sim.openwhisk import OpenWhiskSimulation

    knative, whisk = REGISTRY[Platform.KNATIVE], REGISTRY[Platform.OPENWHISK]
    assert knative.simulation_class() is Simulation and whisk.simulation_class() is OpenWhiskSimulation
    for entry in REGISTRY.values():
        controller = entry.lab_controller_class()
        assert issubclass(controller, LabControl) and controller.platform == entry.platform
        backend = load(entry.kube_backend)
        assert callable(backend.from_options) and backend.platform == entry.platform
    assert not knative.guest_key and whisk.guest_key


def test_each_platform_creates_its_own_pod_for_a_function():
    """What the lab checks a workload against: a revision pod (cpu request and queue-proxy) on
    Knative, an action pod (memory only) on OpenWhisk."""
    spec = discover_specs()["float-ops"]
    cluster = load_cluster("lab-small")
    knative, knative_what = platform_entry("knative").pod(spec, "p", None, cluster)
    whisk, whisk_what = platform_entry("openwhisk").pod(spec, "p", None, cluster)
    assert "queue-proxy" in knative_what and "action pod" in whisk_what
    assert [c["name"] for c in knative["spec"]["containers"]][-1] == "queue-proxy"
    assert "cpu" not in whisk["spec"]["containers"][0]["resources"].get("requests", {})


def test_each_platform_hands_the_replay_its_target():
    """The registry is the one place a platform becomes its request target: Knative's ingress
    with no headers, OpenWhisk's action URLs with Basic auth of the key."""
    knative = platform_entry("knative").lab_target("http://127.0.0.1:9", None)
    assert isinstance(knative, IngressTarget) and knative.headers() == {} and knative.answer == "headers"
    assert knative.routes(["aes"]) == ("http://127.0.0.1:9", None)
    whisk = platform_entry(Platform.OPENWHISK).lab_target("http://127.0.0.1:9/", KEY)
    assert isinstance(whisk, OpenWhiskTarget)
    routes, host = whisk.routes(["aes"])
    assert routes == {"aes": "http://127.0.0.1:9/api/v1/namespaces/_/actions/aes?blocking=true&result=false"}
    assert host is None and whisk.answer == "activation"
    assert whisk.headers()["Authorization"].startswith("Basic ")
    with pytest.raises(InputError, match="has no guest key"):
        platform_entry("openwhisk").lab_target("http://127.0.0.1:9", None)


def test_settings_are_the_platforms_own():
    platform_entry("openwhisk").check_settings({"invokers": 2})
    with pytest.raises(InputError, match="unknown OpenWhisk setting"):
        platform_entry("openwhisk").check_settings({"prewarm": 2})
    with pytest.raises(InputError, match="Knative takes no deployment settings"):
        platform_entry("knative").check_settings({"invokers": 2})


def test_the_kube_backend_of_openwhisk_needs_its_api_and_key():
    with pytest.raises(InputError, match="needs --openwhisk-api URL and --openwhisk-auth FILE"):
        platform_entry("openwhisk").kube_backend_for({"namespace": "default"}, {})


def test_a_platform_is_its_name_in_every_file_format():
    import json

    import yaml

    assert json.loads(json.dumps({"p": Platform.OPENWHISK})) == {"p": "openwhisk"}
    assert yaml.safe_load(yaml.safe_dump({"p": Platform.OPENWHISK})) == {"p": "openwhisk"}
