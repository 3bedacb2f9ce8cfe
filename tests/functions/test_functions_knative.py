"""Knative Services and revision Pods: golden files, Kubernetes' own Pod schema, the scheduler's
parser, and Knative's webhook rules ported from knative/serving (see functions/knative_validation.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from functions.errors import FunctionsError
from functions.knative import QUEUE_CPU_REQUEST, memory_quantity, revision_pod, service_manifest
from functions.knative_validation import (
    DEFAULT_CONFIG,
    LAB_CONFIG,
    KnativeConfig,
    autoscaling_annotation_errors,
    check_service,
    container_concurrency_errors,
    parse_go_duration,
    schema_errors,
    validate_service,
    webhook_errors,
)
from functions.spec import discover_specs

SPECS = discover_specs()
GOLDEN = Path(__file__).parent / "golden"
A = "autoscaling.knative.dev"


def test_service_matches_the_golden_file() -> None:
    # Regenerate after an intended change: scoretune functions manifest float-ops --scheduler-name scoretune-tuned
    expected = yaml.safe_load((GOLDEN / "float-ops.service.yaml").read_text())
    assert service_manifest(SPECS["float-ops"], scheduler_name="scoretune-tuned") == expected


def test_revision_pod_matches_the_golden_file() -> None:
    expected = yaml.safe_load((GOLDEN / "float-ops.pod.yaml").read_text())
    assert revision_pod(SPECS["float-ops"], scheduler_name="scoretune-tuned") == expected


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_service_is_admitted_by_a_lab_configured_knative(name: str) -> None:
    service = service_manifest(SPECS[name], scheduler_name="scoretune-tuned")
    assert validate_service(service, LAB_CONFIG) == []
    check_service(service)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_revision_pod_is_a_valid_v1_pod(name: str) -> None:
    kubernetes_validate.validate(revision_pod(SPECS[name], scheduler_name="s"), "1.36.0", strict=True)


def test_revision_pod_has_knatives_shape() -> None:
    spec = SPECS["matmul"]
    pod = revision_pod(spec, scheduler_name="tuned", name="p-1", revision="matmul-00007")
    user, queue = pod["spec"]["containers"]
    assert (user["name"], queue["name"]) == ("user-container", "queue-proxy")
    assert user["resources"] == {
        "requests": {"cpu": "1", "memory": memory_quantity(spec.memory_request_bytes)},
        "limits": {"cpu": "1", "memory": memory_quantity(spec.memory_limit_bytes)},
    }
    # queue-proxy: only a 25m CPU request, no limits (queueproxy.resource-defaults is disabled).
    assert queue["resources"] == {"requests": {"cpu": QUEUE_CPU_REQUEST}} and QUEUE_CPU_REQUEST == "25m"
    assert {e["name"]: e.get("value") for e in queue["env"]}["CONTAINER_CONCURRENCY"] == "1"
    assert "readinessProbe" not in user  # HTTP readiness moves to queue-proxy
    assert [p["containerPort"] for p in user["ports"]] == [8080]
    assert {e["name"] for e in user["env"]} >= {"PORT", "K_REVISION", "K_CONFIGURATION", "K_SERVICE"}
    labels = pod["metadata"]["labels"]
    assert labels["serving.knative.dev/revision"] == "matmul-00007" and labels["app"] == "matmul-00007"
    assert labels["serving.knative.dev/service"] == "matmul"
    assert pod["spec"]["affinity"]["podAntiAffinity"] == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"serving.knative.dev/revision": "matmul-00007"}},
                },
            }
        ]
    }
    assert pod["spec"]["schedulerName"] == "tuned" and pod["metadata"]["name"] == "p-1"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 300
    assert pod["status"] == {"phase": "Pending", "qosClass": "Burstable"}
    assert "autoscaling.knative.dev/class" not in pod["metadata"]["annotations"]
    assert revision_pod(spec)["spec"]["schedulerName"] == "default-scheduler"


def test_revision_pods_are_reproducible_and_replicas_differ_only_by_name() -> None:
    a = revision_pod(SPECS["aes"], name="a")
    b = revision_pod(SPECS["aes"], name="b")
    assert revision_pod(SPECS["aes"], name="a") == a
    a["metadata"].pop("name"), b["metadata"].pop("name"), a["metadata"].pop("uid"), b["metadata"].pop("uid")
    assert a == b


def test_the_scheduler_reads_revision_pods_with_the_queue_proxy_request() -> None:
    from testbed.scheduler import objects  # the project's own module: a broken import fails, never skips

    spec = SPECS["matmul"]
    pod = objects.pod_from_k8s(revision_pod(spec, scheduler_name="tuned"))
    assert pod.requests["cpu"] == spec.cpu_request_milli + 25
    assert pod.requests["memory"] == spec.memory_request_bytes
    assert pod.scheduler_name == "tuned" and pod.owner_kind == "ReplicaSet"
    (term,) = pod.anti_affinity_preferred
    assert term.weight == 100 and term.topology_key == "kubernetes.io/hostname"


def test_upstream_defaults_reject_scheduler_name_and_field_ref_without_their_features() -> None:
    service = service_manifest(SPECS["aes"], scheduler_name="tuned")
    errs = webhook_errors(service, DEFAULT_CONFIG)
    assert any("schedulerName: must not set the field(s)" in e for e in errs)
    assert any("valueFrom.fieldRef: must not set the field(s)" in e for e in errs)
    assert webhook_errors(service_manifest(SPECS["aes"], node_name_env=False), DEFAULT_CONFIG) == []
    allowed = KnativeConfig(
        features={"kubernetes.podspec-schedulername": "allowed", "kubernetes.podspec-fieldref": "enabled"}
    )
    assert webhook_errors(service, allowed) == []
    with pytest.raises(FunctionsError, match="Knative Service aes: .*schedulerName"):
        check_service(service, DEFAULT_CONFIG)


@pytest.mark.parametrize(
    ("cc", "config", "error"),
    [
        (0, DEFAULT_CONFIG, None),
        (1000, DEFAULT_CONFIG, None),
        (1001, DEFAULT_CONFIG, "expected 0 <= 1001 <= 1000"),
        (-1, DEFAULT_CONFIG, "expected 0 <= -1 <= 1000"),
        (0, KnativeConfig(allow_container_concurrency_zero=False), "expected 1 <= 0 <= 1000"),
        (50, KnativeConfig(container_concurrency_max_limit=10), "expected 0 <= 50 <= 10"),
    ],
)
def test_container_concurrency_bounds(cc: int, config: KnativeConfig, error: str | None) -> None:
    errs = container_concurrency_errors(cc, config)
    assert errs == ([] if error is None else [f"containerConcurrency: {error}"])


# Cases of knative/serving pkg/apis/autoscaling/annotation_validation_test.go (TestValidateAnnotations),
# upstream's "MESSAGE: PATH" written here as "PATH: MESSAGE".
UPSTREAM_CASES = [
    ({}, None),
    ({f"{A}/class": "unsupported.knative.dev"}, f"{A}/class: invalid value: unsupported.knative.dev"),
    ({f"{A}/class": "some.other.domain"}, None),
    ({f"{A}/min-scale": "0"}, None),
    ({f"{A}/max-scale": "0"}, None),
    ({f"{A}/min-scale": "-1"}, f"{A}/min-scale: expected 0 <= -1 <= 2147483647"),
    ({f"{A}/max-scale": "2147483648"}, f"{A}/max-scale: expected 0 <= 2147483648 <= 2147483647"),
    ({f"{A}/min-scale": "foo"}, f"{A}/min-scale: invalid value: foo"),
    ({f"{A}/min-scale": "2", f"{A}/max-scale": "5"}, None),
    (
        {f"{A}/min-scale": "5", f"{A}/max-scale": "2"},
        f"{A}/max-scale, {A}/min-scale: max-scale=2 is less than min-scale=5",
    ),
    ({f"{A}/min-scale": "1", f"{A}/activation-scale": "2", f"{A}/max-scale": "3"}, None),
    (
        {f"{A}/min-scale": "3", f"{A}/activation-scale": "2"},
        f"{A}/activation-scale: min-scale=3 is greater than activation-scale=2",
    ),
    (
        {f"{A}/max-scale": "1", f"{A}/activation-scale": "2"},
        f"{A}/activation-scale: max-scale=1 is less than activation-scale=2",
    ),
    (
        {
            f"{A}/class": "kpa.autoscaling.knative.dev",
            f"{A}/metric-aggregation-algorithm": "random-selection",
        },
        f"{A}/metric-aggregation-algorithm: invalid value: random-selection",
    ),
    ({f"{A}/panic-window-percentage": "-1"}, f"{A}/panic-window-percentage: expected 1 <= -1 <= 100"),
    ({f"{A}/panic-window-percentage": "202"}, f"{A}/panic-window-percentage: expected 1 <= 202 <= 100"),
    ({f"{A}/panic-window-percentage": "fifty"}, f"{A}/panic-window-percentage: invalid value: fifty"),
    ({f"{A}/panic-threshold-percentage": "210"}, None),
    (
        {f"{A}/panic-threshold-percentage": "109"},
        f"{A}/panic-threshold-percentage: expected 110 <= 109 <= 1000",
    ),
    (
        {f"{A}/panic-threshold-percentage": "10009"},
        f"{A}/panic-threshold-percentage: expected 110 <= 10009 <= 1000",
    ),
    ({f"{A}/target": "-11"}, f"{A}/target: target -11 should be at least 0.01"),
    ({f"{A}/target": "0"}, f"{A}/target: target 0 should be at least 0.01"),
    ({f"{A}/target": "100}"}, f"{A}/target: invalid value: 100}}"),
    ({f"{A}/target": "11"}, None),
    ({f"{A}/target-burst-capacity": "-11"}, f"{A}/target-burst-capacity: invalid value: -11"),
    ({f"{A}/target-burst-capacity": "-1"}, None),
    ({f"{A}/target-burst-capacity": "0"}, None),
    (
        {f"{A}/target-utilization-percentage": "0"},
        f"{A}/target-utilization-percentage: expected 1 <= 0 <= 100",
    ),
    (
        {f"{A}/target-utilization-percentage": "101"},
        f"{A}/target-utilization-percentage: expected 1 <= 101 <= 100",
    ),
    ({f"{A}/window": "jerry-was-a-racecar-driver"}, f"{A}/window: invalid value: jerry-was-a-racecar-driver"),
    ({f"{A}/window": "1s"}, f"{A}/window: expected 6s <= 1s <= 1h0m0s"),
    ({f"{A}/window": "365h"}, f"{A}/window: expected 6s <= 365h <= 1h0m0s"),
    ({f"{A}/window": "1m9s82ms"}, f"{A}/window: must be specified with at most second precision"),
    ({f"{A}/window": "7s", f"{A}/class": "test"}, None),
    ({f"{A}/scale-to-zero-pod-retention-period": "0"}, None),
    ({f"{A}/scale-to-zero-pod-retention-period": "21m31s"}, None),
    (
        {f"{A}/scale-to-zero-pod-retention-period": "311m"},
        f"{A}/scale-to-zero-pod-retention-period: expected 0s <= 311m <= 1h0m0s",
    ),
    (
        {f"{A}/scale-to-zero-pod-retention-period": "-42s"},
        f"{A}/scale-to-zero-pod-retention-period: expected 0s <= -42s <= 1h0m0s",
    ),
    ({f"{A}/scale-down-delay": "0"}, None),
    ({f"{A}/scale-down-delay": "21m31s"}, None),
    ({f"{A}/scale-down-delay": "311m"}, f"{A}/scale-down-delay: expected 0s <= 311m <= 1h0m0s"),
    (
        {f"{A}/scale-down-delay": "42.5s"},
        f"{A}/scale-down-delay: must be specified with at most second precision",
    ),
    (
        {f"{A}/scale-down-delay": "twenty-two-minutes-and-five-seconds"},
        f"{A}/scale-down-delay: invalid value: twenty-two-minutes-and-five-seconds",
    ),
    (
        {
            f"{A}/panic-threshold-percentage": "125",
            f"{A}/panic-window-percentage": "75",
            f"{A}/min-scale": "5",
            f"{A}/max-scale": "8",
            f"{A}/window": "1984s",
        },
        None,
    ),
    ({f"{A}/metric": "cpu"}, f"{A}/metric: invalid value: cpu"),
    ({f"{A}/metric": "", f"{A}/class": "hpa.autoscaling.knative.dev"}, f"{A}/metric: invalid value: "),
    ({f"{A}/metric": "rps"}, None),
    ({f"{A}/class": "hpa.autoscaling.knative.dev", f"{A}/metric": "cpu"}, None),
    ({f"{A}/class": "other", f"{A}/metric": "rps"}, None),
    ({f"{A}/initial-scale": "0"}, f"{A}/initial-scale=0 not allowed by cluster: invalid value: 0"),
    ({f"{A}/initial-scale": "2"}, None),
    ({f"{A}/initial-scale": "-1"}, f"{A}/initial-scale must be greater than 0: invalid value: -1"),
    ({f"{A}/initial-scale": "invalid"}, f"{A}/initial-scale: invalid value: invalid"),
]


@pytest.mark.parametrize(("annotations", "error"), UPSTREAM_CASES)
def test_autoscaling_annotations_as_upstream_validates_them(
    annotations: dict[str, str], error: str | None
) -> None:
    assert autoscaling_annotation_errors(annotations) == ([] if error is None else [error])


def test_max_scale_limit_and_zero_initial_scale_follow_the_cluster_config() -> None:
    limited = KnativeConfig(max_scale_limit=10)
    assert autoscaling_annotation_errors({f"{A}/max-scale": "11"}, limited) == [
        f"{A}/max-scale: expected 1 <= 11 <= 10"
    ]
    assert autoscaling_annotation_errors({f"{A}/max-scale": "0"}, limited) == [
        f"{A}/max-scale: max-scale=0 (unlimited), must be less than 10"
    ]
    assert autoscaling_annotation_errors({f"{A}/max-scale": "9"}, limited) == []
    assert (
        autoscaling_annotation_errors(
            {f"{A}/initial-scale": "0"}, KnativeConfig(allow_zero_initial_scale=True)
        )
        == []
    )


def test_autoscaling_annotations_on_the_service_itself_are_rejected() -> None:
    service = service_manifest(SPECS["aes"])
    service["metadata"]["annotations"] = {f"{A}/min-scale": "1"}
    assert any('must be put under "spec.template.metadata.annotations"' in e for e in webhook_errors(service))


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0].update(name="queue-proxy"),
            "is a reserved container name",
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "PORT", "value": "1"}
            ),
            "'PORT' is a reserved environment variable",
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort=8012),
            "8012 is a reserved port",
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(name="grpc"),
            "Port name grpc is not allowed",
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].update(
                failureThreshold=3
            ),
            "failureThreshold is disallowed when periodSeconds is zero",
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["readinessProbe"].update(tcpSocket={}),
            "expected exactly one, got both: httpGet, tcpSocket",
        ),
        (
            lambda s: s["spec"]["template"]["spec"].update(timeoutSeconds=601),
            "timeoutSeconds: expected 0 <= 601 <= 600",
        ),
        (lambda s: s["metadata"].update(name="Float_Ops"), "not a DNS 1035 label"),
    ],
)
def test_webhook_rules_for_containers_probes_and_names(mutate, error: str) -> None:
    service = copy.deepcopy(service_manifest(SPECS["float-ops"]))
    mutate(service)
    assert any(error in e for e in webhook_errors(service)), webhook_errors(service)


def test_schema_rejects_misspelt_fields_and_bad_quantities() -> None:
    good = service_manifest(SPECS["float-ops"])
    assert schema_errors(good) == []
    bad = copy.deepcopy(good)
    bad["spec"]["template"]["spec"]["containerConcurency"] = 1
    assert any("containerConcurency" in e for e in schema_errors(bad))
    bad = copy.deepcopy(good)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "12 parsecs"
    (err,) = schema_errors(bad)
    assert err.startswith("spec.template.spec.containers.0.resources.limits.memory:")
    bad = copy.deepcopy(good)
    bad["spec"]["template"]["spec"]["containerConcurrency"] = "1"
    assert schema_errors(bad) == ["spec.template.spec.containerConcurrency: '1' is not of type 'integer'"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("1m9s82ms", 69.082),
        ("1h", 3600.0),
        ("0", 0.0),
        ("-42s", -42.0),
        ("1.5s", 1.5),
        ("365h", 365 * 3600.0),
        ("", None),
        ("s", None),
        ("10", None),
        ("jerry", None),
    ],
)
def test_go_duration_parsing(text: str, seconds: float | None) -> None:
    got = parse_go_duration(text)
    assert got == (pytest.approx(seconds) if seconds is not None else None)
