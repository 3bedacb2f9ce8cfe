"""An invoker's ContainerPool, ported: which container runs an activation, and when.

apache/openwhisk core/invoker/src/main/scala/org/apache/openwhisk/core/containerpool/
ContainerPool.scala (``receive`` on ``Run``, ``NeedWork``, ``ContainerRemoved``; ``schedule``,
``remove``, ``hasPoolSpaceFor``), with ``clusterManagedResources`` off (the default):

- while the busy containers leave room for the action's memory, a free container already warm
  for the action (then one still starting for it) with spare concurrency takes the activation;
- else, if busy and free containers together leave room, a new container is created (a prewarm
  stem cell of the same kind and memory would be taken first: blackbox actions never match one);
- else the least recently used idle warm containers are removed until enough memory is free (at
  most what the idle ones hold) and a new container is created ("recreated");
- else the activation waits in the run buffer; the buffer is strictly first in, first out, and
  its head is retried whenever a container frees capacity or is removed.

A container idle for ``idle_timeout_s`` (ContainerProxy's ``pause-grace``, 10 s, then
``idle-container``, 10 minutes) is removed; the least recently *dispatched* idle ones go first
when memory is needed. The pool only decides; the caller (the embedded lab's controller) owns time, pods and execution;
the simulator's compiled loop (testbed.sim.openwhisk_kernel) takes the same steps over arrays.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

PAUSE_GRACE_S = 10.0
"""``whisk.container-proxy.timeouts.pause-grace`` (core/invoker/src/main/resources/application.conf
at ef725a6): a warm container is paused this long after its last activation ends..."""
IDLE_CONTAINER_S = PAUSE_GRACE_S + 600.0
"""...and removed ``idle-container`` (10 min) after it was paused: 610 s after its last activation."""


@dataclass(eq=False)
class Container:
    """One action container (one pod with KubernetesContainerFactory)."""

    action: str
    memory_mb: int
    max_concurrent: int
    seq: int
    warm: bool = False
    """Initialised (``WarmedData``); before that it is starting (``WarmingColdData``)."""
    active: int = 0
    last_used: float = 0.0
    """When its last activation ended: the idle timer runs from here (``ContainerProxy`` goes
    ``Ready``, then paused after ``pause-grace``, then removed after ``idle-container``)."""
    last_dispatch: float = 0.0
    """When an activation was last dispatched to it: the LRU key of removal (``WarmedData.lastUsed``
    is set by ``nextRun`` in ``ContainerPool.scala`` at ef725a6)."""
    removed: bool = False
    payload: Any = None
    """The caller's own record of the container (its pod)."""

    def has_capacity(self) -> bool:
        return self.active < self.max_concurrent


@dataclass
class Placement:
    """Where an activation went: the container and how it got it (``warm``, ``warming``, ``cold``,
    ``recreated``), with the containers removed to make room."""

    container: Container
    state: str
    removed: list[Container] = field(default_factory=list)


@dataclass
class ContainerPool:
    """One invoker's pool of ``user_memory_mb``."""

    user_memory_mb: int
    free: list[Container] = field(default_factory=list)
    busy: list[Container] = field(default_factory=list)
    buffer: deque[Any] = field(default_factory=deque)
    _seq: int = 0

    @staticmethod
    def _memory(pool: list[Container]) -> int:
        return sum(c.memory_mb for c in pool)

    def _space_for(self, pool: list[Container], memory_mb: int) -> bool:
        return self._memory(pool) + memory_mb <= self.user_memory_mb

    def _new(self, action: str, memory_mb: int, max_concurrent: int) -> Container:
        self._seq += 1
        c = Container(action, memory_mb, max_concurrent, self._seq)
        self.free.append(c)
        return c

    def _remove_for(self, memory_mb: int, now: float) -> list[Container]:
        """``remove``: the oldest idle warm containers, until ``memory_mb`` is covered; none when
        the idle ones cannot cover it."""
        idle = sorted((c for c in self.free if c.warm and c.active == 0 and c.last_used <= now),
                      key=lambda c: (c.last_dispatch, c.seq))
        if memory_mb <= 0 or not idle or self._memory(idle) < memory_mb:
            return []
        out: list[Container] = []
        for c in idle:
            if memory_mb <= 0:
                break
            out.append(c)
            memory_mb -= c.memory_mb
        return out

    def _try(self, action: str, memory_mb: int, max_concurrent: int, now: float) -> Placement | None:
        if not self._space_for(self.busy, memory_mb):
            return None
        for want_warm in (True, False):  # WarmedData first, then a container still starting for it
            for c in self.free:
                if c.action == action and c.warm == want_warm and c.has_capacity():
                    return Placement(c, "warm" if want_warm else "warming")
        if self._space_for(self.busy + self.free, memory_mb):
            return Placement(self._new(action, memory_mb, max_concurrent), "cold")
        victims = self._remove_for(min(memory_mb, self._memory(self.free)), now)
        if victims:
            for v in victims:
                self._drop(v)
            return Placement(self._new(action, memory_mb, max_concurrent), "recreated", victims)
        return None

    def _take(self, placement: Placement, now: float) -> None:
        c = placement.container
        c.active += 1
        c.last_dispatch = now
        if not c.has_capacity() and c in self.free:
            self.free.remove(c)
            self.busy.append(c)

    def _drop(self, c: Container) -> None:
        c.removed = True
        if c in self.free:
            self.free.remove(c)
        if c in self.busy:
            self.busy.remove(c)

    def run(self, job: Any, action: str, memory_mb: int, max_concurrent: int, now: float) -> Placement | None:
        """A ``Run`` from the feed: placed now, or None when it joins the buffer."""
        if self.buffer:
            self.buffer.append((job, action, memory_mb, max_concurrent))
            return None
        placement = self._try(action, memory_mb, max_concurrent, now)
        if placement is None:
            self.buffer.append((job, action, memory_mb, max_concurrent))
            return None
        self._take(placement, now)
        return placement

    def drain_buffer(self, now: float) -> list[tuple[Any, Placement]]:
        """The buffered jobs that can run now, head first, stopping at the first that cannot."""
        out: list[tuple[Any, Placement]] = []
        while self.buffer:
            job, action, memory_mb, max_concurrent = self.buffer[0]
            placement = self._try(action, memory_mb, max_concurrent, now)
            if placement is None:
                break
            self.buffer.popleft()
            self._take(placement, now)
            out.append((job, placement))
        return out

    def done(self, c: Container, now: float) -> None:
        """``NeedWork``: one activation of ``c`` ended (the container is warm from now on)."""
        c.active -= 1
        c.warm = True
        c.last_used = now
        if c.removed:
            return
        if c.has_capacity() and c in self.busy:
            self.busy.remove(c)
            self.free.append(c)

    def ready(self, c: Container) -> None:
        """The container finished ``/init``: later activations find it warm."""
        c.warm = True

    def expire(self, c: Container, now: float, idle_timeout_s: float = IDLE_CONTAINER_S) -> bool:
        """Remove ``c`` if it has been idle for ``idle_timeout_s`` at ``now``."""
        if c.removed or c.active > 0 or now - c.last_used < idle_timeout_s:
            return False
        self._drop(c)
        return True

    def fail(self, c: Container) -> None:
        """A container that could not start is removed (its activations end in error)."""
        self._drop(c)

    def containers(self) -> list[Container]:
        return self.free + self.busy



__all__ = ["IDLE_CONTAINER_S", "Container", "ContainerPool", "Placement"]
