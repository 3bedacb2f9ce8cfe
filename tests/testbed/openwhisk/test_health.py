"""An invoker's health (testbed/openwhisk/health.py) against InvokerSupervision.scala at ef725a6:
more than 3 system errors among the last 10 results make it unhealthy, a success while unhealthy
sends the next health test, and it is healthy again once at most 3 system errors remain; while the
buffer is not primed (<= 3 results) one system error is enough."""

from __future__ import annotations

import pytest

from testbed.openwhisk.health import BUFFER_SIZE, InvokerHealth, Result, State

S, E = Result.SUCCESS, Result.SYSTEM_ERROR


def test_more_than_three_system_errors_in_ten_turn_it_unhealthy():
    h = InvokerHealth()
    for _ in range(BUFFER_SIZE):
        h.record(S)
    sends = [h.record(E) for _ in range(3)]
    assert h.state is State.UP and sends == [False] * 3  # 3 of 10: tolerated
    assert h.record(E) is True and h.state is State.UNHEALTHY  # the 4th: unhealthy, a test action at once
    assert not h.usable


def test_successes_while_unhealthy_send_the_next_test_and_bring_it_back():
    h = InvokerHealth()
    for r in [S] * 6 + [E] * 4:
        h.record(r)
    assert h.state is State.UNHEALTHY
    # each test's success evicts the oldest entry; the errors are the newest four, so they stay
    # until six successes pushed the older successes out and the first error with them
    steps = []
    while h.state is State.UNHEALTHY:
        steps.append(h.record(S))
    assert all(steps) and len(steps) == 7  # 6 to push out the old successes, the 7th evicts an error
    assert h.state is State.UP and sum(r is E for r in h.buffer) == 3


@pytest.mark.parametrize("primed", [0, 1, 2, 3])
def test_an_unprimed_buffer_turns_unhealthy_at_one_system_error(primed):
    h = InvokerHealth()
    h.buffer.clear()
    for _ in range(primed):
        h.record(S)
    h.record(E)
    assert h.state is (State.UNHEALTHY if primed + 1 <= 3 else State.UP)


def test_a_restarted_invoker_starts_with_its_two_health_tests():
    h = InvokerHealth()
    assert h.state is State.UP and list(h.buffer) == [S, S]
    h.record(E)  # 3 results: not primed, so one system error is enough (upstream's fragility after a restart)
    assert h.state is State.UNHEALTHY
