"""An invoker's health as the controller sees it, ported from apache/openwhisk
``core/controller/.../loadBalancer/InvokerSupervision.scala`` at ef725a6 (``InvokerActor``),
run by the embedded lab's controller (the simulator's compiled loop, testbed.sim.openwhisk_kernel,
takes the same steps).

Every completed activation is one result in a ring buffer of the invoker's last 10
(``bufferSize``): a *system error* when its statusCode is 3 (a whisk error: the ack's
``isSystemError``), else a success (an application or developer error is the action's, not the
invoker's). More than 3 system errors (``bufferErrorTolerance``) turn a healthy invoker
*unhealthy*: the balancer stops giving it activations (they go to the others, or the controller
answers 503 when none is left) and the controller sends it its health-test action at once and
every minute after (``healthPingingTransitionHandler``); every success while unhealthy sends the
next one at once, and the invoker is healthy again at the first success that finds at most 3
system errors in the buffer. While the buffer holds 3 entries or fewer (primed after a restart
by the two test actions that made the invoker healthy), a single system error is enough.

Not ported: ``Unresponsive`` (acks that time out: neither backend models the completion-ack
timeout) and ``Offline`` (an invoker that stops pinging: the embedded lab marks the invoker of a
lost node down on its own).
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum

BUFFER_SIZE = 10
"""``InvokerActor.bufferSize``."""
ERROR_TOLERANCE = 3
"""``InvokerActor.bufferErrorTolerance``."""
TEST_ACTION_PERIOD_S = 60.0
"""``startTimerAtFixedRate(..., Tick, 1.minute)``: a test action a minute while unhealthy."""


class Result(StrEnum):
    SUCCESS = "success"
    SYSTEM_ERROR = "system error"


class State(StrEnum):
    UP = "up"
    UNHEALTHY = "unhealthy"


class InvokerHealth:
    """One invoker's ``InvokerActor`` (see the module docstring). Starts healthy with the two
    successes of the health tests that made it so after its (re)start."""

    def __init__(self) -> None:
        self.state = State.UP
        self.buffer: deque[Result] = deque([Result.SUCCESS, Result.SUCCESS], maxlen=BUFFER_SIZE)
        self.transitions = 0

    @property
    def usable(self) -> bool:
        return self.state is State.UP

    def record(self, result: Result) -> bool:
        """``handleCompletionMessage``: add one result; True when the controller sends a
        health-test action now (a success while unhealthy, or the turn to unhealthy)."""
        self.buffer.append(result)
        test = result is Result.SUCCESS and self.state is State.UNHEALTHY
        if self.state is State.UP and result is Result.SUCCESS:
            return test
        errors = sum(1 for r in self.buffer if r is Result.SYSTEM_ERROR)
        if errors > ERROR_TOLERANCE:
            return self._goto(State.UNHEALTHY) or test
        if result is Result.SUCCESS:
            self._goto(State.UP)
        elif len(self.buffer) <= ERROR_TOLERANCE:  # the buffer is not primed yet
            return self._goto(State.UNHEALTHY) or test
        return test

    def _goto(self, state: State) -> bool:
        """Change state; True when the change is into unhealthy (the transition sends a test action)."""
        if state is self.state:
            return False
        self.state = state
        self.transitions += 1
        return state is State.UNHEALTHY


__all__ = ["BUFFER_SIZE", "ERROR_TOLERANCE", "TEST_ACTION_PERIOD_S", "InvokerHealth", "Result", "State"]
