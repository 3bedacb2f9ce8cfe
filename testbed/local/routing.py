"""The activator's data path: per-instance concurrency slots, buffering, load balancing.

This is the part of Knative's activator (``pkg/activator/net/throttler.go``) the lab needs: every
request of a function takes a slot of one *ready* instance (``containerConcurrency`` slots each,
unbounded -- capped at 1000 -- when it is 0) or waits, first come first served, in the function's
buffer until a slot frees or a new instance becomes ready. The balancing policy is the throttler's:
random choice of two for CC = 0, first available for CC <= 3, round robin otherwise.

It also keeps the metric the autoscaler reads: the function's in-flight requests (buffered ones
included, as the activator reports them), integrated over time so that every scrape gets the
time-weighted average concurrency of the last interval (queue-proxy's ``AverageConcurrentRequests``)
and the count of requests that arrived in it.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field

MAX_SLOTS = 1000  # Knative's bound on containerConcurrency; CC = 0 means "unbounded" up to it


@dataclass
class Instance:
    """One function instance as the ingress and the controller see it. Times are wall-clock epoch s."""

    id: str
    function: str
    pod_name: str
    slots: int
    node: str | None = None
    url: str | None = None
    state: str = "pending"  # pending -> starting -> ready -> draining -> gone
    active: int = 0
    created_s: float = 0.0
    scheduled_s: float | None = None
    ready_s: float | None = None
    deleted_s: float | None = None
    image_pull_s: float | None = None
    start_s: float | None = None
    init_s: float | None = None
    failure: str | None = None
    seq: int = 0

    @property
    def free(self) -> int:
        return self.slots - self.active if self.state == "ready" else 0


@dataclass
class _Waiter:
    arrival_s: float
    future: asyncio.Future


@dataclass
class ConcurrencyMeter:
    """Time-weighted in-flight count between scrapes, plus arrivals (for the rps metric)."""

    in_flight: int = 0
    last_s: float = 0.0
    area: float = 0.0
    arrivals: int = 0
    since_s: float = 0.0

    def change(self, now_s: float, delta: int) -> None:
        self.area += self.in_flight * max(0.0, now_s - self.last_s)
        self.last_s = now_s
        self.in_flight += delta
        if delta > 0:
            self.arrivals += delta

    def scrape(self, now_s: float) -> tuple[float, int]:
        """(average concurrency, arrivals) since the previous scrape; starts a new interval."""
        self.change(now_s, 0)
        span = now_s - self.since_s
        avg = self.area / span if span > 0 else float(self.in_flight)
        arrivals = self.arrivals
        self.area, self.arrivals, self.since_s = 0.0, 0, now_s
        return avg, arrivals


@dataclass
class Revision:
    """The routing state of one function: its instances and its buffer."""

    function: str
    container_concurrency: int
    rng: random.Random = field(default_factory=random.Random)
    instances: dict[str, Instance] = field(default_factory=dict)
    queue: deque[_Waiter] = field(default_factory=deque)
    meter: ConcurrencyMeter = field(default_factory=ConcurrencyMeter)
    _rr: int = 0

    @property
    def slots_per_instance(self) -> int:
        return self.container_concurrency or MAX_SLOTS

    def ready(self) -> list[Instance]:
        return sorted((i for i in self.instances.values() if i.state == "ready"), key=lambda i: i.seq)

    def live(self) -> list[Instance]:
        """Instances that exist or are coming (everything but draining/gone)."""
        return [i for i in self.instances.values() if i.state in ("pending", "starting", "ready")]

    def pick(self) -> Instance | None:
        """An instance with a free slot by the throttler's policy, or None."""
        cands = [i for i in self.ready() if i.free > 0]
        if not cands:
            return None
        cc = self.container_concurrency
        if cc == 0:
            if len(cands) == 1:
                return cands[0]
            a, b = self.rng.sample(cands, 2)
            return a if a.active <= b.active else b
        if cc <= 3:
            return cands[0]
        self._rr = (self._rr + 1) % len(cands)
        return cands[self._rr]

    def try_acquire(self) -> Instance | None:
        inst = self.pick()
        if inst is not None:
            inst.active += 1
        return inst

    def enqueue(self, arrival_s: float) -> asyncio.Future:
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.queue.append(_Waiter(arrival_s, fut))
        return fut

    def release(self, inst: Instance) -> None:
        inst.active = max(0, inst.active - 1)
        self.dispatch()

    def dispatch(self) -> None:
        """Hand free slots to buffered requests, oldest first."""
        while self.queue:
            w = self.queue[0]
            if w.future.done():
                self.queue.popleft()
                continue
            inst = self.try_acquire()
            if inst is None:
                return
            self.queue.popleft()
            w.future.set_result(inst)

    def fail_waiters(self, exc: BaseException) -> None:
        while self.queue:
            w = self.queue.popleft()
            if not w.future.done():
                w.future.set_exception(exc)
