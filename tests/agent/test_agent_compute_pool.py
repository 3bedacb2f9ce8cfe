"""The process pool of agent/compute.py stops when its command is stopped (the fast tier; the
Ray engine's tests are in test_agent_compute.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

_STOPPED_POOL = """
import sys, time
from agent.cli.app import terminate_as_interrupt
from agent.compute import Compute, run_tasks
terminate_as_interrupt()
done = []
try:
    print("started", flush=True)
    run_tasks(time.sleep, [30.0] * 8, Compute(jobs=2), on_done=lambda i, r: done.append(i))
except KeyboardInterrupt:
    print("interrupted after", len(done), flush=True)
"""


def test_a_stopped_pool_stops_its_workers_and_the_queue() -> None:
    """SIGTERM (or Ctrl-C) to a command running tasks on a process pool must end it: the
    executor's own exit waited for every queued task (found: a killed evaluation kept both cores
    busy, reporting nothing, for hours), and its workers took the next task after the signal."""
    import signal
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", _STOPPED_POOL], cwd=Path(__file__).resolve().parents[2],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        time.sleep(2.0)  # the workers are in their first task
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                   text=True).stdout.split()]
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=25)  # queued: 8 tasks x 30 s on two workers, 120 s
        assert out.strip() == "interrupted after 0"
        assert workers and not [w for w in workers if Path(f"/proc/{w}").exists()]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
