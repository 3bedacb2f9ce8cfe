"""Knative's metric windows, ported: the 1-second bucket rings the KPA averages over, and the
sliding maximum behind scale-down-delay.

Ported from knative/serving at 98e5ef90 (``pkg/autoscaler/aggregation/bucketing.go`` and
``pkg/autoscaler/aggregation/max/{timewindow,window}.go``). Times are float seconds on the
caller's clock (the simulator's virtual clock or the lab's monotonic clock); nothing here reads
the wall clock. Go truncates a ``time.Time`` to the granularity; here that is
``floor(t / g) * g`` on the seconds value, and a bucket index is ``floor(t) // g`` as upstream's
``int(tm.Unix()) / granularitySeconds`` is for the non-negative times the simulator uses.
"""

from __future__ import annotations

import math
from collections import deque

# bucketing.go constants
MIN_EXPONENT = 0.2
WEIGHT_PRECISION = 0.9999
PRECISION = 6


def round_to_n_digits(n: int, f: float) -> float:
    """Go's ``math.Round(f*10^n)/10^n``: halves round away from zero (Python's round() would not)."""
    p = 10.0**n
    x = f * p
    r = math.floor(abs(x) + 0.5)
    return math.copysign(r, x) / p


def compute_smoothing_coeff(num_buckets: float) -> float:
    """``computeSmoothingCoeff``: the decay with which weightedExponential forgets old buckets."""
    return max(1.0 - math.pow(1.0 - WEIGHT_PRECISION, 1.0 / num_buckets), MIN_EXPONENT)


class TimedFloat64Buckets:
    """``TimedFloat64Buckets``: a ring of ``ceil(window/granularity)`` buckets with the linear
    average upstream uses by default. ``first_write``/``last_write`` are bucket start times (or
    None before the first write, Go's zero time)."""

    def __init__(self, window_s: float, granularity_s: float = 1.0) -> None:
        if window_s <= 0 or granularity_s <= 0:
            raise ValueError(f"window ({window_s}) and granularity ({granularity_s}) must be positive")
        self.window_s = float(window_s)
        self.granularity_s = float(granularity_s)
        self.buckets = [0.0] * int(math.ceil(self.window_s / self.granularity_s))
        self.first_write: float | None = None
        self.last_write: float | None = None
        self.window_total = 0.0

    def _truncate(self, t: float) -> float:
        return math.floor(t / self.granularity_s) * self.granularity_s

    def _index(self, t: float) -> int:
        return int(math.floor(t)) // int(self.granularity_s)

    def is_empty(self, now: float) -> bool:
        """No data for more than a window (``now - lastWrite > window``)."""
        if self.last_write is None:
            return True
        return self._truncate(now) - self.last_write > self.window_s

    def record(self, now: float, value: float) -> None:
        """Add ``value`` to the bucket of ``now``; a gap since the last write reads as zeros, a
        gap of a whole window resets the ring, a write a window old or older is ignored."""
        bucket_time = self._truncate(now)
        write_idx = self._index(now)
        n = len(self.buckets)
        if self.last_write != bucket_time:
            last = self.last_write
            if last is None or bucket_time + self.window_s > last:
                if self.first_write is None or self.first_write > bucket_time:
                    self.first_write = bucket_time
                if last is None or bucket_time > last:
                    if last is None or bucket_time - last >= self.window_s:
                        self.first_write = bucket_time
                        self.buckets = [0.0] * n
                        self.window_total = 0.0
                    else:
                        for i in range(self._index(last) + 1, write_idx + 1):
                            idx = i % n
                            self.window_total -= self.buckets[idx]
                            self.buckets[idx] = 0.0
                    self.last_write = bucket_time
            else:
                return
        self.buckets[write_idx % n] += value
        self.window_total += value

    def window_average(self, now: float) -> float:
        """The average over the seconds seen so far in the window (trailing silence is not
        counted as zeros, interior gaps are), rounded to 6 digits; 0 once a window is silent."""
        if self.last_write is None or self.first_write is None:
            return 0.0
        now = self._truncate(now)
        g = self.granularity_s
        d = now - self.last_write
        n = len(self.buckets)
        seen = math.floor((self.last_write - self.first_write) / g) + 1
        if d <= 0:
            return round_to_n_digits(PRECISION, self.window_total / min(seen, n))
        if d < self.window_s:
            st = self._index(self.last_write)
            e = self._index(now)
            ret = self.window_total
            for i in range(st + 1, e + 1):
                ret -= self.buckets[i % n]
            return round_to_n_digits(PRECISION, ret / min(seen, n - (e - st)))
        return 0.0

    def for_each_bucket(self, now: float) -> list[tuple[float, float]]:
        """(bucket time, value) of the ring read back from the last write, newest first, as
        upstream's test helper ``forEachBucket`` walks it."""
        out: list[tuple[float, float]] = []
        if self.last_write is None or self.is_empty(now):
            return out
        now = self._truncate(now)
        n = len(self.buckets)
        count = n - int((now - self.last_write) // self.granularity_s)
        t = self.last_write
        si = self._index(t)
        for _ in range(count):
            out.append((t, self.buckets[si % n]))
            si -= 1
            t -= self.granularity_s
        return out


class WeightedFloat64Buckets(TimedFloat64Buckets):
    """``WeightedFloat64Buckets`` (metric-aggregation-algorithm: weightedExponential): an
    exponentially weighted sum of the buckets, not normalised, so a partial window reads low."""

    def __init__(self, window_s: float, granularity_s: float = 1.0) -> None:
        super().__init__(window_s, granularity_s)
        self.smoothing_coeff = compute_smoothing_coeff(math.ceil(window_s / granularity_s))

    def window_average(self, now: float) -> float:
        now = self._truncate(now)
        if self.is_empty(now) or self.last_write is None:
            return 0.0
        total_b = len(self.buckets)
        num_b = total_b
        m = self.smoothing_coeff
        multiplier = m
        if now > self.last_write:
            num_z = int((now - self.last_write) // self.granularity_s)
            multiplier *= math.pow(1 - m, num_z)
            num_b -= num_z
        start = self._index(self.last_write) + total_b
        ret = 0.0
        for i in range(num_b):
            ret += self.buckets[(start - i) % total_b] * multiplier
            multiplier *= 1 - m
        return ret


class MaxTimeWindow:
    """``max.TimeWindow``: the largest value recorded over the last ``ceil(duration/granularity)``
    slots, slot = ``floor(t) // granularity`` (the descending-maxima deque of ``window.go``)."""

    def __init__(self, duration_s: float, granularity_s: float = 2.0) -> None:
        self.size = int(math.ceil(duration_s / granularity_s))
        if self.size < 1:
            raise ValueError(f"duration {duration_s}s gives an empty window")
        self.granularity = int(granularity_s)
        self._maxima: deque[tuple[int, int]] = deque()  # (index, value), values descending

    def record(self, now: float, value: int) -> None:
        index = int(math.floor(now)) // self.granularity
        q = self._maxima
        while q and not value < q[-1][1]:
            q.pop()
        while q and index - q[0][0] >= self.size:
            q.popleft()
        if q and q[-1][0] == index:
            last = q.pop()
            value = max(value, last[1])
        q.append((index, value))

    def current(self) -> int:
        return self._maxima[0][1] if self._maxima else 0
