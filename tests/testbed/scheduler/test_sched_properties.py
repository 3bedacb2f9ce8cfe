"""Property tests: scores stay in 0..100, an infeasible node is never selected, and incremental
bind/unbind state equals state rebuilt from scratch."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.scheduler.builders import make_node, make_pod, weighted_term
from testbed.scheduler.config import SCORE_PLUGINS, profile_from_weights
from testbed.scheduler.framework import Scheduler
from testbed.scheduler.objects import HOSTNAME_LABEL, ZONE_LABEL

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REVS = ["r0", "r1", "r2"]


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 8))
    nodes = []
    for i in range(n):
        name = f"n{i}"
        labels = {HOSTNAME_LABEL: name}
        if draw(st.booleans()):
            labels[ZONE_LABEL] = f"z{draw(st.integers(0, 2))}"
        taints = [{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}] if draw(st.booleans()) else []
        images = {"img-r0:latest": 300 * 2**20} if draw(st.booleans()) else {}
        nodes.append(
            make_node(
                name,
                capacity={"cpu": f"{draw(st.integers(1, 16))}", "memory": f"{draw(st.integers(1, 32))}Gi", "pods": str(draw(st.integers(1, 20)))},
                labels=labels,
                taints=taints,
                images=images,
            )
        )
    return nodes


@st.composite
def pods(draw):
    rev = draw(st.sampled_from(REVS))
    reqs = []
    for _ in range(draw(st.integers(0, 2))):
        r = {}
        if draw(st.booleans()):
            r["cpu"] = f"{draw(st.integers(0, 4000))}m"
        if draw(st.booleans()):
            r["memory"] = f"{draw(st.integers(0, 4096))}Mi"
        reqs.append(r)
    aff = None
    if draw(st.booleans()):
        aff = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [weighted_term(100, HOSTNAME_LABEL, {"matchLabels": {"rev": rev}})]}}
    return make_pod(
        f"p-{rev}",
        labels={"rev": rev},
        requests=reqs,
        images=[f"img-{rev}"] if draw(st.booleans()) else [],
        affinity=aff,
        owner_kind="ReplicaSet" if draw(st.booleans()) else "",
    )


weights = st.fixed_dictionaries({p: st.one_of(st.none(), st.integers(1, 100)) for p in SCORE_PLUGINS})
strategies = st.sampled_from(["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"])


@SETTINGS
@given(clusters(), st.lists(pods(), max_size=12), pods(), weights, strategies, st.sampled_from(["1.35", "1.36"]))
def test_scores_in_range_and_totals_are_weighted_sums(nodes, existing, pod, w, strategy, kv):
    prof = profile_from_weights(w, strategy=strategy)
    s = Scheduler(nodes, prof, kube_version=kv)
    for i, p in enumerate(existing):
        s.bind(p, i % len(nodes))
    res = s.score(pod)
    for name, detail in res.scores.items():
        for plugin, v in detail["plugins"].items():
            assert 0 <= v <= 100, (name, plugin, v)
        assert detail["total"] == sum(prof.weight(pl) * v for pl, v in detail["plugins"].items())
    assert set(res.skipped).isdisjoint(next(iter(res.scores.values()))["plugins"])


@SETTINGS
@given(clusters(), st.lists(pods(), max_size=12), pods(), st.integers(0, 2**31))
def test_selected_node_is_always_feasible(nodes, existing, pod, seed):
    s = Scheduler(nodes, profile_from_weights({}), seed=seed)
    for i, p in enumerate(existing):
        s.bind(p, i % len(nodes))
    res = s.score(pod)
    if res.selected is None:
        assert res.feasible == ()
    else:
        assert res.selected in res.feasible
    pick = s.schedule(pod)
    assert (pick is None) == (not res.feasible)
    if pick is not None:
        assert s.node_names[pick] in res.feasible


@SETTINGS
@given(clusters(), st.lists(st.tuples(pods(), st.integers(0, 7)), min_size=1, max_size=15), st.data(), pods())
def test_incremental_bind_unbind_equals_recomputation(nodes, placements, data, probe):
    prof = profile_from_weights({})
    inc = Scheduler(nodes, prof)
    inc.score(probe)  # templates and selectors exist before any bind
    bound = []
    for p, i in placements:
        inc.bind(p, i % len(nodes))
        bound.append((p, i % len(nodes)))
    removed = data.draw(st.lists(st.integers(0, len(bound) - 1), unique=True, max_size=len(bound)))
    for k in sorted(removed, reverse=True):
        p, i = bound.pop(k)
        inc.unbind(p, i)
    fresh = Scheduler(nodes, prof)
    for p, i in bound:
        fresh.bind(p, i)
    for r in ("cpu", "memory"):
        assert np.array_equal(inc.requested(r), fresh.requested(r))
    assert np.array_equal(inc.pod_counts, fresh.pod_counts)
    a, sa = inc.plugin_scores(probe)
    b, sb = fresh.plugin_scores(probe)
    assert sa == sb
    assert {k: v.tolist() for k, v in a.items()} == {k: v.tolist() for k, v in b.items()}
