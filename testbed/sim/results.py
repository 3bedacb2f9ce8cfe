"""A simulation's output as the RunResult tables every backend writes (``loadgen.results``), and
the same summary computed straight from the arrays for the training fast path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from loadgen.results import REQUESTS_SCHEMA, PodTimes, placements_table, summarize_arrays
from testbed.openwhisk.faults import NO_INVOKERS, POD_NOT_READY
from testbed.sim import kernel as K
from testbed.sim.engine import FAULT_NO_INVOKER, FAULT_POD_NOT_READY, SimOutput

_STATUS = np.array(["pending", "ok", "error", "timeout"], dtype=object)


def requests_frame(out: SimOutput) -> pd.DataFrame:
    """One row per workload request, in workload order (``request_id`` = row)."""
    n = len(out.status)
    fnames = np.array(out.function_names, dtype=object)
    nodes = np.array([*out.node_names, None], dtype=object)
    served = out.node >= 0
    finished = out.finish_s
    http = np.full(n, None, dtype=object)
    http[out.status == K.ST_OK] = 200
    # a request that failed on a pod ran out of memory (500); one that never reached a pod was
    # turned away by the activator's full queue (503)
    err = out.status == K.ST_ERROR
    http[err & served] = 500
    http[err & ~served] = 503
    cold = np.full(n, None, dtype=object)
    cold[served] = out.cold[served]
    frame = pd.DataFrame(
        {
            "request_id": np.arange(n, dtype=np.int64),
            "function": fnames[out.fn] if n else np.array([], dtype=object),
            "scheduled_s": out.arrival_s,
            "sent_s": out.arrival_s,
            "finished_s": finished,
            "latency_s": finished - out.arrival_s,
            "status": _STATUS[out.status] if n else np.array([], dtype=object),
            "http_status": pd.array(http.tolist(), dtype="Int32"),
            "node": nodes[out.node] if n else np.array([], dtype=object),
            "cold_start": pd.array(cold.tolist(), dtype="boolean"),
        }
    )
    if out.fault is not None:  # what upstream answers, for the platform's one fault rule
        not_ready = out.fault == FAULT_POD_NOT_READY
        no_invoker = out.fault == FAULT_NO_INVOKER
        http[not_ready] = 500
        http[no_invoker] = 503
        frame["http_status"] = pd.array(http.tolist(), dtype="Int32")
        error = np.full(n, None, dtype=object)
        for i in np.flatnonzero(not_ready):
            error[i] = (f"activation statusCode 3 (whisk internal error): "
                        f"{POD_NOT_READY.format(image=out.function_names[out.fn[i]])}")
        error[no_invoker] = NO_INVOKERS
        return frame[REQUESTS_SCHEMA.names].assign(error=error)
    return frame[REQUESTS_SCHEMA.names]


def placements_frame(out: SimOutput) -> pd.DataFrame:
    """One row per pod the run created (warm min-scale pods included, created at 0)."""
    pods = []
    for p in out.pods:
        became_ready = p.ready_s is not None and (p.deleted_s is None or p.ready_s <= p.deleted_s) and p.ready_s <= out.sim_end_s
        pods.append(PodTimes(pod=p.name, function=out.function_names[p.function],
                             node=out.node_names[p.node] if p.node >= 0 else None, created_s=p.created_s,
                             scheduled_s=p.scheduled_s, ready_s=p.ready_s if became_ready else None,
                             deleted_s=p.deleted_s, image_pull_s=p.image_pull_s, start_s=p.start_s, init_s=p.init_s))
    return placements_table(pods)


def fast_summary(out: SimOutput, *, late_threshold_s: float = 0.020) -> dict[str, Any]:
    """Exactly ``loadgen.results.summarize(requests_frame(out))``, from the arrays (no frame)."""
    status = out.status
    ok = status == K.ST_OK
    served = out.node >= 0
    return summarize_arrays(
        ok=ok,
        errors=int((status == K.ST_ERROR).sum()),
        timeouts=int((status == K.ST_TIMEOUT).sum()),
        cold_starts=int(out.cold[served].sum()),
        latency_s=(out.finish_s - out.arrival_s)[ok],
        lag_s=np.zeros(len(status)),  # the simulator dispatches every request on time
        late_threshold_s=late_threshold_s,
    )
