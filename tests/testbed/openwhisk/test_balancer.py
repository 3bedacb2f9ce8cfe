"""The sharding balancer against apache/openwhisk's own test vectors
(tests/src/test/scala/org/apache/openwhisk/core/loadBalancer/test/ShardingContainerPoolBalancerTests.scala)
and the worked example in ShardingContainerPoolBalancer.scala's scaladoc."""

from __future__ import annotations

import random

import pytest

from testbed.openwhisk.balancer import (
    Balancer,
    InvokerSlots,
    generate_hash,
    invoker_shard_mb,
    java_string_hash,
    pairwise_coprime_numbers_until,
    partition,
    schedule,
)


@pytest.mark.parametrize(("text", "expected"), [("", 0), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
                                                ("polygenelubricants", -2147483648), ("é", 233)])
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_generate_hash_is_non_negative_xor_of_the_two_hashes() -> None:
    h = generate_hash("guest", "guest/aes")
    assert h == abs(java_string_hash("guest") ^ java_string_hash("guest/aes"))
    assert h >= 0


def test_pairwise_coprime_numbers_until() -> None:
    assert pairwise_coprime_numbers_until(0) == []
    assert pairwise_coprime_numbers_until(-1) == []
    assert pairwise_coprime_numbers_until(1) == [1]
    assert pairwise_coprime_numbers_until(2) == [1]
    assert pairwise_coprime_numbers_until(3) == [1, 2]
    assert pairwise_coprime_numbers_until(4) == [1, 3]
    assert pairwise_coprime_numbers_until(5) == [1, 2, 3]
    assert pairwise_coprime_numbers_until(9) == [1, 2, 5, 7]
    assert pairwise_coprime_numbers_until(10) == [1, 3, 7]


def test_scaladoc_example_progression() -> None:
    # 10 invokers, hash 13: home 3, step sizes 1, 3, 7, step 3: 3, 6, 9, 2, 5, 8, 1, 4, 7, 0
    steps = pairwise_coprime_numbers_until(10)
    step = steps[13 % len(steps)]
    slots = [InvokerSlots(1) for _ in range(10)]
    order = [schedule(1, "ns/a", [True] * 10, list(range(10)), slots, 1, 13 % 10, step, random.Random(0))[0]
             for _ in range(10)]
    assert order == [3, 6, 9, 2, 5, 8, 1, 4, 7, 0]


def test_first_available_then_random_forced() -> None:
    # "choose the first available invoker, jumping in stepSize steps, falling back to randomized ..."
    ids = [3, 4, 5]
    slots = [InvokerSlots(3) for _ in range(6)]
    rng = random.Random(1)
    got = [schedule(1, "ns/a", [True] * 3, ids, slots, 1, 0, 2, rng) for _ in range(9)]
    assert [g[0] for g in got] == [3, 3, 3, 5, 5, 5, 4, 4, 4]
    assert not any(g[1] for g in got)
    brute = [schedule(1, "ns/a", [True] * 3, ids, slots, 1, 0, 2, rng) for _ in range(101)]
    assert {b[0] for b in brute} == {3, 4, 5}
    assert all(b[1] for b in brute)


def test_unhealthy_invokers_are_skipped_and_none_healthy_is_none() -> None:
    healthy = [True, False, False, True]
    slots = [InvokerSlots(3) for _ in range(4)]
    rng = random.Random(2)
    got = [schedule(1, "ns/a", healthy, [0, 1, 2, 3], slots, 1, 0, 1, rng)[0] for _ in range(6)]
    assert got == [0, 0, 0, 3, 3, 3]
    brute = {schedule(1, "ns/a", healthy, [0, 1, 2, 3], slots, 1, 0, 1, rng)[0] for _ in range(101)}
    assert brute == {0, 3}
    assert schedule(1, "ns/a", [False] * 3, [0, 1, 2], [InvokerSlots(3)] * 3, 1, 0, 2, rng) is None
    assert schedule(1, "ns/a", [], [], [], 1, 0, 2, rng) is None


def test_only_invokers_with_enough_free_slots() -> None:
    slots = [InvokerSlots(4) for _ in range(3)]
    rng = random.Random(3)
    picks = [schedule(1, "ns/a", [True] * 3, [0, 1, 2], slots, m, 0, 1, rng)[0] for m in (3, 2, 1, 4, 2)]
    assert picks == [0, 1, 0, 2, 1]
    assert [s.permits for s in slots] == [0, 0, 0]


def test_concurrent_actions_share_a_memory_slot() -> None:
    # "allow concurrent actions to be scheduled to same invoker without affecting memory slots"
    slots = [InvokerSlots(2) for _ in range(3)]
    rng = random.Random(4)
    for i in range(3):
        for _ in range(2):
            for c in range(1, 4):
                assert schedule(3, "ns/a", [True] * 3, [0, 1, 2], slots, 1, 0, 1, rng)[0] == i
                assert slots[i].concurrent["ns/a"] == 3 - c


def test_release_gives_memory_back_once_a_container_worth_is_free() -> None:
    s = InvokerSlots(256)
    for _ in range(3):
        assert s.try_acquire_concurrent("a", 3, 128)
    assert s.permits == 128
    s.release_concurrent("a", 3, 128)
    s.release_concurrent("a", 3, 128)
    assert s.permits == 128
    s.release_concurrent("a", 3, 128)
    assert s.permits == 256 and "a" not in s.concurrent


@pytest.mark.parametrize("bf", [0.1, 0.2, 0.3, 0.4, 0.5])
def test_managed_and_blackbox_overlap_only_for_small_n(bf: float) -> None:
    # "allow managed partition to overlap with blackbox for small N"
    limits = {0.1: 10, 0.2: 5, 0.3: 4, 0.4: 3, 0.5: 2}
    for i in range(1, 101):
        m, b = partition(i, 1.0 - bf, bf)
        assert m <= i
        assert b == max(1, int(bf * i))
        assert m + b == (i + 1 if i < limits[bf] else i)


def test_blackbox_fraction_one_uses_every_invoker() -> None:
    assert partition(100, 1.0, 1.0) == (100, 100)
    bal = Balancer(3, 512, blackbox_fraction=1.0)
    assert bal.blackbox == [0, 1, 2]
    assert Balancer(3, 512, blackbox_fraction=0.1).blackbox == [2]  # the chart's 10 %: one of three


def test_invoker_shard_divides_among_controllers_but_never_below_min_memory() -> None:
    assert invoker_shard_mb(1280, 1) == 1280
    assert invoker_shard_mb(1280, 2) == 640
    assert invoker_shard_mb(1280, 20) == 128


def test_balancer_publish_fills_the_home_invoker_then_steps_and_releases() -> None:
    bal = Balancer(3, 256, blackbox_fraction=1.0)
    h = generate_hash("guest", "guest/a")
    home = h % 3
    first = [bal.publish("guest", "a", 128)[0] for _ in range(2)]
    assert first == [home, home]
    third = bal.publish("guest", "a", 128)
    assert third[0] != home and not third[1]
    bal.release(home, "guest", "a", 128)
    assert bal.publish("guest", "a", 128)[0] == home
