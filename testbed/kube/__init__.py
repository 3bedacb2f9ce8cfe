"""The ``kube`` backend: a real Kubernetes cluster with Knative Serving and a second kube-scheduler.

``render`` turns scoretune's records (a scheduler profile, the function specs) into the Kubernetes
objects the Ansible roles apply, so the cluster is configured from one source of truth;
``backend`` drives a running cluster through the official ``kubernetes`` client.
"""
