"""The embedded lab (backend ``local``): real function processes on this machine behind an
ingress/activator, scaled by the shared KPA and placed by testbed/scheduler.

Public API: :class:`testbed.local.backend.LocalBackend`, :func:`testbed.local.lab.up` /
:func:`~testbed.local.lab.down` / :func:`~testbed.local.lab.status`, and the lab scenario
:func:`testbed.local.scenario.lab_workload`.
"""
