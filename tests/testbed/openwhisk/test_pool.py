"""The invoker's container pool against ContainerPool.scala's rules (apache/openwhisk
core/invoker/.../containerpool/ContainerPool.scala)."""

from __future__ import annotations

from testbed.openwhisk.pool import ContainerPool


def test_cold_then_warm_reuse_of_the_same_container() -> None:
    pool = ContainerPool(512)
    p1 = pool.run("r1", "a", 128, 1, now=0.0)
    assert p1 is not None and p1.state == "cold"
    pool.ready(p1.container)
    pool.done(p1.container, now=1.0)
    p2 = pool.run("r2", "a", 128, 1, now=2.0)
    assert p2 is not None and p2.state == "warm" and p2.container is p1.container


def test_a_starting_container_takes_more_work_only_with_spare_concurrency() -> None:
    pool = ContainerPool(512)
    c = pool.run("r1", "a", 128, 2, now=0.0)
    again = pool.run("r2", "a", 128, 2, now=0.0)
    assert again is not None and again.state == "warming" and again.container is c.container
    third = pool.run("r3", "a", 128, 2, now=0.0)
    assert third is not None and third.state == "cold" and third.container is not c.container


def test_least_recently_dispatched_idle_containers_are_removed_to_make_room() -> None:
    """The LRU key is when a container was last given work (``WarmedData.lastUsed`` set by
    ``nextRun``, ContainerPool.scala at ef725a6), not when that work ended: ``a`` was dispatched
    first and ran longer, so it goes though it ended last."""
    pool = ContainerPool(256)
    a = pool.run("r1", "a", 128, 1, now=0.0).container
    b = pool.run("r2", "b", 128, 1, now=1.0).container
    pool.done(a, now=5.0)
    pool.done(b, now=3.0)
    placed = pool.run("r3", "c", 128, 1, now=6.0)
    assert placed is not None and placed.state == "recreated" and placed.removed == [a]
    assert a.removed and not b.removed


def test_no_room_buffers_first_in_first_out() -> None:
    pool = ContainerPool(256)
    a = pool.run("r1", "a", 256, 1, now=0.0).container
    assert pool.run("r2", "b", 128, 1, now=0.0) is None
    assert pool.run("r3", "a", 256, 1, now=0.0) is None  # behind r2 even though a frees first
    pool.done(a, now=1.0)
    drained = pool.drain_buffer(now=1.0)
    # r2 needs room: a (idle, oldest) is removed for it; r3 then finds no room behind it
    assert [job for job, _ in drained] == ["r2"]
    assert drained[0][1].removed == [a]
    assert list(pool.buffer)[0][0] == "r3"


def test_busy_memory_caps_the_pool() -> None:
    pool = ContainerPool(256)
    pool.run("r1", "a", 128, 1, now=0.0)
    pool.run("r2", "a", 128, 1, now=0.0)
    assert pool.run("r3", "a", 128, 1, now=0.0) is None
    assert sum(c.memory_mb for c in pool.containers()) == 256


def test_idle_containers_expire_after_the_timeout_only() -> None:
    pool = ContainerPool(512)
    c = pool.run("r1", "a", 128, 1, now=0.0).container
    pool.done(c, now=10.0)  # pause-grace 10 s, then idle-container 10 min: 610 s after the run ended
    assert not pool.expire(c, now=619.0)
    assert pool.expire(c, now=620.0)
    assert c.removed and pool.containers() == []
