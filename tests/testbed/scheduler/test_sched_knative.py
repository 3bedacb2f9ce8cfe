"""Knative revision pods (functions/knative.py) on a shipped cluster spec: the scheduler reads
them as kube-scheduler does and spreads replicas through InterPodAffinity's preferred hostname
anti-affinity and PodTopologySpread's system defaults."""

from __future__ import annotations

import numpy as np

from functions.knative import revision_pod
from functions.spec import discover_specs
from testbed.cluster import load_cluster
from testbed.scheduler.config import default_profile
from testbed.scheduler.framework import Scheduler
from testbed.scheduler.objects import node_from_k8s, pod_from_k8s


def test_replicas_of_one_revision_spread_over_identical_nodes():
    cluster = load_cluster("homogeneous-20")
    specs = discover_specs()
    spec = specs[sorted(specs)[0]]
    nodes = [node_from_k8s(n.to_k8s_node({spec.image: spec.image_size_bytes})) for n in cluster.nodes]
    sched = Scheduler(nodes, default_profile(), seed=3)
    pod = pod_from_k8s(revision_pod(spec))
    placed = []
    for _ in range(2 * len(nodes)):
        i = sched.schedule(pod)
        assert i is not None
        sched.bind(pod, i)
        placed.append(i)
    counts = np.bincount(placed, minlength=len(nodes))
    assert counts.max() - counts.min() <= 1
    detail = sched.score(pod)
    assert "InterPodAffinity" not in detail.skipped and "PodTopologySpread" not in detail.skipped


def test_a_renamed_revision_pod_is_the_template_under_another_name():
    """The simulator's replicas come from ``Pod.renamed``; it must give exactly what
    ``dataclasses.replace`` gives (a field lost or a name left unchanged would schedule a
    different pod, or the same one twice)."""
    import dataclasses

    specs = discover_specs()
    for name in sorted(specs)[:3]:
        tmpl = pod_from_k8s(revision_pod(specs[name]))
        new = tmpl.renamed("x-00007", "sim-7")
        want = dataclasses.replace(tmpl, name="x-00007", uid="sim-7")
        for f in dataclasses.fields(tmpl):
            assert getattr(new, f.name) == getattr(want, f.name), f.name
        assert type(new) is type(tmpl) and new is not tmpl
        assert (tmpl.name, tmpl.uid) != ("x-00007", "sim-7")
