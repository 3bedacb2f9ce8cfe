"""The one OpenWhisk fault rule (testbed/openwhisk/faults.py): each of upstream's answers is the
fault it names, the run's verdict follows the table (a platform failure voids, a consequence of
placement is scored), and docs/lab.md shows the table the code applies."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from testbed.openwhisk.faults import (
    ABNORMAL_INIT,
    ABNORMAL_RUN,
    BY_KEY,
    FAULTS,
    IMAGE_PULL,
    MEMORY_EXHAUSTED,
    NO_INVOKERS,
    POD_NOT_READY,
    PROVISION,
    RULE,
    Verdict,
    classify,
    judge,
    judge_run,
    markdown_table,
)

ROOT = Path(__file__).resolve().parents[3]


def _act(code: int, message: str) -> str:
    """The error text the load generator records for an activation (loadgen/locustfile.py)."""
    return f"activation statusCode {code} (whatever): {message}"


@pytest.mark.parametrize(("http", "error", "key"), [
    (502, _act(1, "ValueError: bad n"), "application-error"),
    (202, "the controller's blocking wait ran out (HTTP 202)", "timeout"),
    (500, _act(3, POD_NOT_READY.format(image="ghcr.io/x/aes:1")), "pod-not-ready"),
    (502, _act(2, ABNORMAL_RUN), "container-died"),
    (502, _act(2, ABNORMAL_INIT), "container-died"),
    (502, _act(2, MEMORY_EXHAUSTED), "container-died"),
    (500, _act(3, ABNORMAL_RUN), "container-died"),  # queued on a cold start that failed (abortBuffered)
    (502, _act(2, IMAGE_PULL.format(image="ghcr.io/x/aes:1")), "image-pull-failed"),
    (500, _act(3, PROVISION), "provision-failed"),
    (500, _act(3, "the lab was reset"), "whisk-error"),
    (502, _act(2, "the action did not initialise: 500"), "developer-error"),
    (503, NO_INVOKERS, "no-invoker"),
    (429, "Too many requests in the last minute", "throttled"),
    (None, "connection refused", None),
])
def test_each_upstream_answer_is_the_fault_it_names(http, error, key):
    assert classify(http, error) == key
    if key is not None:
        assert key in {f.key for f in FAULTS}


def test_a_platform_failure_voids_and_a_placement_consequence_is_scored():
    not_ready = (500, _act(3, POD_NOT_READY.format(image="i")))
    scored = judge([not_ready, (502, _act(2, ABNORMAL_RUN)), (502, _act(1, "boom"))])
    assert scored.void == [] and scored.record()["verdict"] == "scored"
    assert scored.counts == {"pod-not-ready": 1, "container-died": 1, "application-error": 1}
    # 503 with no pod-start failure in the run: no invoker was usable, the platform's failure
    alone = judge([(503, NO_INVOKERS)])
    assert alone.void and "no-invoker" in alone.void[0]
    # after pod-start failures, the invokers their system errors turned unhealthy are the placement's doing
    after = judge([not_ready] * 4 + [(503, NO_INVOKERS)], invokers={"invoker0/0": "unhealthy", "invoker1/1": "up"})
    assert after.void == [] and after.counts["invoker-unhealthy-after-pod-start-failures"] == 1
    assert after.invokers == {"invoker0/0": "unhealthy: invoker-unhealthy-after-pod-start-failures"}
    # an invoker unhealthy without them, or down whatever happened: void
    assert judge([], invokers={"invoker0/0": "unhealthy"}).void
    assert judge([not_ready], invokers={"invoker0/0": "down"}).void
    # what the backend saw of the platform voids, and is recorded
    seen = judge([], platform_faults=["pod openwhisk/owdev-controller-0: restarted"])
    assert seen.void_observed == [] and len(seen.void) == 1 and seen.record()["verdict"] == "void"
    assert seen.record()["rule"] == RULE
    assert "(platform-pod-restarted: " in seen.void[0]
    # each platform fault under its own row: an action pod's image that cannot be pulled is not a
    # core pod restarting, nor is an invoker whose state could not be read
    pull = judge([], platform_faults=["pod openwhisk/wskowdev-invoker-00-1-guest-a: container user-action is "
                                      "ImagePullBackOff: Back-off pulling image"])
    assert pull.void == ["pod openwhisk/wskowdev-invoker-00-1-guest-a: container user-action is ImagePullBackOff: "
                         f"Back-off pulling image (image-pull-failed: {BY_KEY['image-pull-failed'].why})"]
    unknown = judge([], platform_faults=["invoker https://ow: the invokers' state after the run is unknown: timed out"])
    assert "(invoker-not-up: " in unknown.void[0]


def test_the_rule_reads_a_requests_table_as_every_backend_writes_it():
    frame = pd.DataFrame({"status": ["ok", "error", "error", "timeout"],
                          "http_status": pd.array([200, 500, 503, None], dtype="Int32"),
                          "error": [None, _act(3, POD_NOT_READY.format(image="i")), NO_INVOKERS, "HTTP 202"]})
    judged = judge_run(frame)
    assert judged.counts == {"pod-not-ready": 1, "invoker-unhealthy-after-pod-start-failures": 1}
    assert judged.void == []
    assert judge_run(frame.iloc[[0, 2]]).void  # the 503 alone
    assert judge_run(frame.iloc[:0]).record()["verdict"] == "scored"


def test_docs_show_the_rule_the_code_applies():
    text = (ROOT / "docs" / "lab.md").read_text(encoding="utf-8")
    assert markdown_table() in text, "docs/lab.md's fault table differs from testbed/openwhisk/faults.py"
    assert {f.verdict for f in FAULTS} == {Verdict.SCORED, Verdict.VOID}
