"""The host figures every embedded-lab run records: steal and CPU pressure between two samples."""

from __future__ import annotations

import pytest

from testbed.local import host

STAT = """cpu  1000 50 500 7000 100 0 50 300 200 0
cpu0 500 25 250 3500 50 0 25 150 100 0
intr 12345
"""
PSI = """some avg10=1.00 avg60=2.00 avg300=3.00 total=4000000
full avg10=0.00 avg60=0.00 avg300=0.00 total=10
"""


def test_steal_is_the_eighth_field_and_guest_time_is_not_counted_twice():
    """``/proc/stat``'s cpu line: user nice system idle iowait irq softirq steal guest guest_nice;
    guest time is already in user and nice, so the total is the first eight fields."""
    assert host.parse_stat(STAT) == (300, 9000)
    assert host.parse_psi(PSI) == 4_000_000
    assert host.parse_stat("intr 1\n") is None and host.parse_psi("full total=3\n") is None


def test_shares_between_two_samples():
    a = host.HostSample(10.0, 300, 9000, 4_000_000)
    b = host.HostSample(12.0, 400, 10000, 5_000_000)  # 100 of 1000 jiffies stolen; 1 s waiting in 2 s
    assert host.between(a, b) == {"steal_share": 0.1, "cpu_pressure_share": 0.5, "seconds": 2.0}
    unknown = host.HostSample(12.0, None, None, None)
    assert host.between(a, unknown) == {"steal_share": None, "cpu_pressure_share": None, "seconds": 2.0}


def test_this_machine_is_sampled():
    if not host.PROC_STAT.exists():
        pytest.skip("no /proc/stat here")
    s = host.sample()
    assert s.steal is not None and s.total is not None and s.total > s.steal >= 0
