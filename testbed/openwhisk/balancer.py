"""OpenWhisk's ShardingContainerPoolBalancer, ported: which invoker an activation goes to.

apache/openwhisk core/controller/src/main/scala/org/apache/openwhisk/core/loadBalancer/
ShardingContainerPoolBalancer.scala (``generateHash``, ``pairwiseCoprimeNumbersUntil``,
``schedule``, ``ShardingContainerPoolBalancerState.updateInvokers``) and common/scala/.../
NestedSemaphore.scala (``tryAcquireConcurrent``, ``forceAcquireConcurrent``,
``releaseConcurrent``). Every action has a home invoker (its hash modulo the invokers it may use)
and a step (a co-prime of that count picked by the same hash); the controller walks from the
home invoker by the step and takes the first healthy one with room, counted in MB of the action's
memory against the invoker's user memory (divided among controllers); when none has room it
forces a random healthy one (overload: the invoker queues). The slots are released when the
activation's result comes back. Blackbox actions (``exec.pull``: the suite's images) may use
only the last ``max(1, floor(n * blackboxFraction))`` invokers, managed ones the first
``max(1, ceil(n * managedFraction))``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

MIN_MEMORY_MB = 128
"""``MemoryLimit.MIN_MEMORY``: an invoker's shard is never below one minimal action."""


def java_string_hash(text: str) -> int:
    """``java.lang.String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a
    signed 32-bit integer."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_abs(value: int) -> int:
    """``Int.abs``: Int.MinValue stays negative (two's complement)."""
    return value if value == -(1 << 31) else abs(value)


def generate_hash(namespace: str, action: str) -> int:
    """``generateHash``: ``(namespace.hashCode ^ fqn.hashCode).abs``; ``action`` is the fully
    qualified name without version (``namespace/name``)."""
    x = java_string_hash(namespace) ^ java_string_hash(action)
    x = (x + (1 << 31)) % (1 << 32) - (1 << 31)  # back to a signed 32-bit value
    return _java_abs(x)


def pairwise_coprime_numbers_until(x: int) -> list[int]:
    """``pairwiseCoprimeNumbersUntil``: 1..x, each co-prime to x and to every one kept before."""
    primes: list[int] = []
    for cur in range(1, x + 1):
        if math.gcd(cur, x) == 1 and all(math.gcd(i, cur) == 1 for i in primes):
            primes.append(cur)
    return primes


def partition(n: int, managed_fraction: float, blackbox_fraction: float) -> tuple[int, int]:
    """``updateInvokers``: how many invokers (the first ones) serve managed actions and how many
    (the last ones) serve blackbox actions; they overlap for small ``n``."""
    managed_f = max(0.0, min(1.0, managed_fraction))
    blackbox_f = max(1.0 - managed_f, min(1.0, blackbox_fraction))
    return max(1, math.ceil(n * managed_f)), max(1, math.floor(n * blackbox_f))


def invoker_shard_mb(user_memory_mb: int, cluster_size: int = 1) -> int:
    """``getInvokerSlot``: an invoker's memory divided among the controllers, at least 128 MB."""
    shard = user_memory_mb // max(1, cluster_size)
    return MIN_MEMORY_MB if shard < MIN_MEMORY_MB else shard


@dataclass
class InvokerSlots:
    """``NestedSemaphore``: memory permits (MB) that may go negative when forced, and per action
    the concurrency left in its containers counted here."""

    permits: int
    concurrent: dict[str, int] = field(default_factory=dict)

    def try_acquire_concurrent(self, action: str, max_concurrent: int, memory_mb: int, *, force: bool = False) -> bool:
        if max_concurrent == 1:
            if force or self.permits >= memory_mb:
                self.permits -= memory_mb
                return True
            return False
        free = self.concurrent.get(action, 0)
        if free > 0:
            self.concurrent[action] = free - 1
            return True
        if force or self.permits >= memory_mb:
            self.permits -= memory_mb
            self.concurrent[action] = free + max_concurrent - 1
            return True
        self.concurrent.setdefault(action, 0)
        return False

    def release_concurrent(self, action: str, max_concurrent: int, memory_mb: int) -> None:
        if max_concurrent == 1:
            self.permits += memory_mb
            return
        # ResizableSemaphore.release(1, true): a whole container's worth free gives its memory back
        free = self.concurrent.get(action, 0) + 1
        if free >= max_concurrent:
            free -= max_concurrent
            self.permits += memory_mb
        if free == 0:
            self.concurrent.pop(action, None)
        else:
            self.concurrent[action] = free


def schedule(
    max_concurrent: int,
    action: str,
    healthy: Sequence[bool],
    ids: Sequence[int],
    slots: Sequence[InvokerSlots],
    memory_mb: int,
    index: int,
    step: int,
    rng: random.Random,
) -> tuple[int, bool] | None:
    """``schedule``: (invoker id, forced) or None when no invoker is healthy. ``healthy`` and
    ``ids`` describe the invokers the action may use, in order; ``slots`` is indexed by id."""
    n = len(ids)
    if n == 0:
        return None
    steps_done = 0
    while True:
        inv = ids[index]
        if healthy[index] and slots[inv].try_acquire_concurrent(action, max_concurrent, memory_mb):
            return inv, False
        if steps_done == n + 1:
            usable = [ids[i] for i in range(n) if healthy[i]]
            if not usable:
                return None
            chosen = usable[rng.randrange(len(usable))]
            slots[chosen].try_acquire_concurrent(action, max_concurrent, memory_mb, force=True)
            return chosen, True
        index = (index + step) % n
        steps_done += 1


class Balancer:
    """One controller's balancer state over ``n`` invokers of equal user memory (all healthy
    unless marked): ``publish`` picks the invoker and takes its slots, ``release`` gives them back."""

    def __init__(self, n_invokers: int, user_memory_mb: int, *, managed_fraction: float = 0.9,
                 blackbox_fraction: float = 0.1, controllers: int = 1, seed: int = 0) -> None:
        self.n = n_invokers
        self.healthy = [True] * n_invokers
        managed, blackbox = partition(n_invokers, managed_fraction, blackbox_fraction)
        self.managed = list(range(managed))
        self.blackbox = list(range(n_invokers - blackbox, n_invokers))
        self.managed_steps = pairwise_coprime_numbers_until(managed)
        self.blackbox_steps = pairwise_coprime_numbers_until(blackbox)
        self.slots = [InvokerSlots(invoker_shard_mb(user_memory_mb, controllers)) for _ in range(n_invokers)]
        self.rng = random.Random(seed)

    def publish(self, namespace: str, action: str, memory_mb: int, max_concurrent: int = 1, *,
                blackbox: bool = True) -> tuple[int, bool] | None:
        """The invoker for one activation of ``namespace/action`` and whether it was forced."""
        ids = self.blackbox if blackbox else self.managed
        steps = self.blackbox_steps if blackbox else self.managed_steps
        fqn = f"{namespace}/{action}"
        h = generate_hash(namespace, fqn)
        return schedule(max_concurrent, fqn, [self.healthy[i] for i in ids], ids, self.slots, memory_mb,
                        h % len(ids), steps[h % len(steps)], self.rng)

    def release(self, invoker: int, namespace: str, action: str, memory_mb: int, max_concurrent: int = 1) -> None:
        self.slots[invoker].release_concurrent(f"{namespace}/{action}", max_concurrent, memory_mb)


__all__ = [
    "MIN_MEMORY_MB",
    "Balancer",
    "InvokerSlots",
    "generate_hash",
    "invoker_shard_mb",
    "java_string_hash",
    "pairwise_coprime_numbers_until",
    "partition",
    "schedule",
]
