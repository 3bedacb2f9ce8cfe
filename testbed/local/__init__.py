"""The embedded lab (backend ``local``): real function processes on this machine, placed by
testbed/scheduler, behind the platform's own front (Knative's activator and KPA, or OpenWhisk's
controller and invokers).

Rooms, top to bottom: ``cli.py`` (``scoretune testbed``, ``calibrate``, ``fidelity``);
``studies/`` (what the lab measures about itself: noise, fidelity against the simulator);
``backend.py`` (:class:`~testbed.local.backend.LocalBackend`, the Backend over a lab); ``lab.py``
(``up``, ``status``, the control API's client); ``controllers/`` (one per platform on a common
base, started as ``python -m testbed.local.controllers``); ``teardown.py`` (``down``); and the
mechanics below them: ``node_agent.py`` (a node, the lab's kubelet), ``placement.py``,
``routing.py``, ``cpu.py``, ``state.py`` (the state directory: records, ports, the guest key).
The lab scenario of ``make tune`` is :func:`testbed.scenarios.lab_workload`.
"""
