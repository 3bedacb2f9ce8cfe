"""Reference for the simulator benchmark: a SimPy process-per-request FaaS model.

This is the core of how SimPy-based FaaS simulators (faas-sim among them) execute invocations: one
SimPy process per request that waits for a free instance slot and holds it for its service time.
It models far less than scoretune's simulator (no autoscaler, no scheduler, no cold starts, no
processor sharing), so the ratio flatters the reference, not scoretune. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import simpy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=40, help="instance slots per function")
    ap.add_argument("--functions", type=int, default=4)
    ap.add_argument("--invocations", type=int, default=200_000)
    ap.add_argument("--utilisation", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    service_mean_s = 0.05
    rate = args.utilisation * args.instances / service_mean_s  # per function
    n = args.invocations // args.functions
    env = simpy.Environment()
    done = [0]

    def invocation(slots: simpy.Resource, service_s: float):
        with slots.request() as req:
            yield req
            yield env.timeout(service_s)
        done[0] += 1

    def arrivals(slots: simpy.Resource, gaps: np.ndarray, services: np.ndarray):
        for gap, s in zip(gaps.tolist(), services.tolist(), strict=True):
            yield env.timeout(gap)
            env.process(invocation(slots, s))

    for _ in range(args.functions):
        slots = simpy.Resource(env, capacity=args.instances)
        gaps = rng.exponential(1.0 / rate, n)
        services = rng.lognormal(np.log(service_mean_s) - 0.5 * np.log1p(0.25), np.sqrt(np.log1p(0.25)), n)
        env.process(arrivals(slots, gaps, services))
    t0 = time.perf_counter()
    env.run()
    elapsed = time.perf_counter() - t0
    print(json.dumps({"reference": f"SimPy {simpy.__version__} process-per-request M/G/c model",
                      "invocations": done[0], "invocations_per_s": done[0] / elapsed,
                      "sim_s_per_wall_s": env.now / elapsed}))


if __name__ == "__main__":
    main()
