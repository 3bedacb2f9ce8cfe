"""The embedded lab's container runtime: real images from a registry, pods run by runc, per-node
namespaces and shaped links (DESIGN.md, "The container lab").

Modules, lowest first: ``tools`` and ``network`` (commands of this machine), ``registry``, ``store``
(a node's image store: pulls and unpacks), ``pods`` (a pod's OCI bundle and runc), ``runtime`` (the
node agent's seam, built from the others), ``bringup`` (the lab's shared parts, before any agent),
``teardown`` (finding and removing all of it after any crash).
"""
