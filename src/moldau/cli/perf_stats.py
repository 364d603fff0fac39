"""What kafka-producer-perf-test counts and prints, and how it paces itself, apart
from any client: `ProducerStats` (a line every reporting interval, then the totals
with latency percentiles, in Kafka's words and number formats) and
`ThroughputThrottler` (Kafka's: sleep off the deficit whenever the rate so far is
above the target). Both take their clock, so tests drive them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Kafka's tools keep at most this many latency samples (every n-th record).
MAX_SAMPLES = 500_000
MB = 1024.0 * 1024.0
# Below this, a deficit is left to grow: sleeping 2 ms or less is not precise.
_MIN_SLEEP_NS = 2_000_000


class ProducerStats:
    def __init__(
        self,
        num_records: int,
        write: Callable[[str], None],
        clock_ms: Callable[[], int],
        reporting_interval_ms: int = 5000,
    ) -> None:
        self._write = write
        self._clock_ms = clock_ms
        self.start_ms = self.window_start_ms = clock_ms()
        self.reporting_interval_ms = reporting_interval_ms
        self.sampling = max(1, num_records // max(1, min(num_records, MAX_SAMPLES)))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.total_latency = 0
        self.max_latency = 0
        self._new_window()

    def _new_window(self) -> None:
        self.window_start_ms = self._clock_ms()
        self.window_count = 0
        self.window_bytes = 0
        self.window_total_latency = 0
        self.window_max_latency = 0

    def record(self, latency_ms: int, size: int, now_ms: int) -> None:
        """A record acknowledged `latency_ms` after it was sent."""
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if now_ms - self.window_start_ms >= self.reporting_interval_ms:
            self._write(self.window_line())
            self._new_window()

    def window_line(self) -> str:
        elapsed = max(self._clock_ms() - self.window_start_ms, 1)
        count = self.window_count
        return (
            f"{count} records sent, {1000.0 * count / elapsed:.1f} records/sec "
            f"({1000.0 * self.window_bytes / elapsed / MB:.2f} MB/sec), "
            f"{self.window_total_latency / max(count, 1):.1f} ms avg latency, "
            f"{float(self.window_max_latency):.1f} ms max latency."
        )

    def total_line(self) -> str:
        elapsed = max(self._clock_ms() - self.start_ms, 1)
        p50, p95, p99, p999 = percentiles(self.latencies, (0.5, 0.95, 0.99, 0.999))
        return (
            f"{self.count} records sent, {1000.0 * self.count / elapsed:.1f} records/sec "
            f"({1000.0 * self.bytes / elapsed / MB:.2f} MB/sec), "
            f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, "
            f"{float(self.max_latency):.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
            f"{p99} ms 99th, {p999} ms 99.9th."
        )


def percentiles(samples: list[int], fractions: tuple[float, ...]) -> list[int]:
    """Kafka's: the sample at index int(fraction * n) of the sorted samples."""
    ordered = sorted(samples)
    if not ordered:
        return [0 for _ in fractions]
    return [ordered[min(int(f * len(ordered)), len(ordered) - 1)] for f in fractions]


class ThroughputThrottler:
    """Kafka's ThroughputThrottler: `target` records a second (negative: no limit,
    0: stop sending)."""

    def __init__(
        self,
        target: float,
        start_ms: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = target
        self.start_ms = start_ms
        self._sleep = sleep
        self.sleep_time_ns = int(1e9 / target) if target > 0 else 0
        self.deficit_ns = 0

    def should_throttle(self, amount_so_far: int, send_start_ms: int) -> bool:
        if self.target < 0:
            return False
        elapsed_s = (send_start_ms - self.start_ms) / 1000.0
        return elapsed_s > 0 and amount_so_far / elapsed_s > self.target

    def throttle(self) -> None:
        if self.target == 0:
            raise ValueError("a throughput of 0 sends nothing")
        self.deficit_ns += self.sleep_time_ns
        if self.deficit_ns < _MIN_SLEEP_NS:
            return
        self._sleep(self.deficit_ns / 1e9)
        self.deficit_ns = 0
