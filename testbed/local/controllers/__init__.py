"""The embedded lab's controllers, one per platform, beside their common base.

``base.py`` is every platform's half (nodes and their agents, the scheduler, node health, the
record of every instance, the ``/_lab/`` control API); ``knative.py`` is Knative's activator and
KPA, ``openwhisk.py`` OpenWhisk's controller and invokers. Which one a lab runs is the entry of
its platform in :mod:`testbed.platforms`, looked up once by ``python -m testbed.local.controllers``
(:mod:`testbed.local.controllers.__main__`).
"""
