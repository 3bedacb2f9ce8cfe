"""Mapping trace functions onto suite functions.

A trace names thousands of anonymous functions; the suite has a handful of real ones. Each trace
function is mapped to one suite function:

- by **similarity** when the trace gives a per-function duration (and possibly memory): the suite
  function nearest in log duration (+ log memory when both sides have it), as vHive InVitro's mapper
  does (``vhive-serverless/invitro:docs/mapper.md``: nearest proxy in log p50 memory and duration);
- otherwise by **popularity rank** with a seed: trace functions sorted by invocation count are dealt
  round-robin onto a seeded permutation of the suite functions, so the busiest trace functions land on
  different suite functions and a seed picks which.

A suite function's duration is its spec's mean CPU time plus its per-request I/O wait
(``FunctionSpec.work_cpu_s.mean + work_io_s``); its memory is ``work_memory_bytes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from functions.spec import FunctionSpec
from loadgen.errors import InputError

TRACE_REPLAY_FUNCTION = "trace-driven"
"""The trace-driven suite function (functions/trace_driven): its payload ``{"cpu_s", "memory_bytes"}`` replays the trace's own work."""


@dataclass(frozen=True)
class TraceFunction:
    """What a trace says about one of its functions."""

    name: str
    count: int
    duration_s: float | None = None
    memory_bytes: float | None = None


@dataclass(frozen=True)
class FunctionMapping:
    """Trace function -> suite function, and how the mapping was made (``similarity`` or ``popularity``)."""

    assignment: dict[str, str]
    method: str

    def __call__(self, names: np.ndarray) -> np.ndarray:
        lookup = self.assignment
        return np.asarray([lookup[n] for n in names], dtype=object)


def resolve_suite(
    functions: Sequence[str] | None, specs: Mapping[str, FunctionSpec] | None
) -> tuple[list[str], dict[str, FunctionSpec]]:
    """The suite subset to map onto: ``functions`` (names) restricted from ``specs``.

    ``specs`` defaults to the discovered suite (``functions/*/spec.yaml``). Names the specs do not know
    are allowed only when there are no specs at all (then only popularity mapping is possible); the
    trace-driven function is left out unless asked for by name, since it has no duration of its own.
    """
    if specs is None:
        from functions.spec import discover_specs

        specs = discover_specs()
    specs = dict(specs)
    if functions:
        names = [str(f).strip() for f in functions if str(f).strip()]
        unknown = [n for n in names if n not in specs]
        if unknown and specs:
            raise InputError(f"unknown suite function(s) {unknown}; known: {sorted(specs)}", field="functions")
        if len(set(names)) != len(names):
            raise InputError(f"duplicate function names in {names}", field="functions")
    else:
        names = sorted(n for n in specs if n != TRACE_REPLAY_FUNCTION)
    if not names:
        raise InputError("no suite functions to map the trace onto (no specs found; pass --functions)", field="functions")
    return names, {n: specs[n] for n in names if n in specs}


def _log(x: float) -> float:
    return math.log(max(float(x), 1e-9))


def map_functions(
    trace_functions: Sequence[TraceFunction],
    names: Sequence[str],
    specs: Mapping[str, FunctionSpec],
    *,
    seed: int = 0,
) -> FunctionMapping:
    """Map every trace function onto one of ``names`` (see the module docstring for the rule)."""
    names = list(names)
    have_durations = bool(trace_functions) and all(tf.duration_s is not None for tf in trace_functions)
    if have_durations and all(n in specs for n in names):
        sd = np.asarray([_log(specs[n].work_cpu_s.mean + specs[n].work_io_s) for n in names])
        sm = np.asarray([_log(specs[n].work_memory_bytes) for n in names])
        use_mem = all(tf.memory_bytes is not None for tf in trace_functions)
        out = {}
        for tf in trace_functions:
            dist = np.abs(sd - _log(tf.duration_s))  # type: ignore[arg-type]
            if use_mem:
                dist = dist + np.abs(sm - _log(tf.memory_bytes))  # type: ignore[arg-type]
            out[tf.name] = names[int(np.argmin(dist))]  # ties: the first in name order
        return FunctionMapping(out, "similarity")
    rng = np.random.default_rng(seed)
    order = [names[i] for i in rng.permutation(len(names))]
    ranked = sorted(trace_functions, key=lambda tf: (-tf.count, tf.name))
    return FunctionMapping({tf.name: order[i % len(order)] for i, tf in enumerate(ranked)}, "popularity")
