"""The discrete-event simulator of Knative on Kubernetes (DESIGN.md, backend ``sim``).

``evaluate(cluster, workload, profile, seed=...)`` is the training fast path (a summary dict, no
disk); ``SimBackend`` implements the Backend protocol and writes a run directory.
"""

from testbed.sim.backend import SimBackend, evaluate, simulate
from testbed.sim.engine import SimConfig, Simulation

__all__ = ["SimBackend", "SimConfig", "Simulation", "evaluate", "simulate"]
