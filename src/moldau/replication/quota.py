"""Replication throttling (Kafka's ReplicationQuotaManager, KIP-73): a byte rate
bound measured over a window of samples, and the partitions it applies to.

A leader leaves out of its answers to followers, and a follower out of its fetches,
the throttled partitions of replicas that are not in sync while the rate of such
traffic is above the bound; in-sync replicas are never throttled, so a throttle
slows a reassignment's copying, never the ISR's."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from moldau.clock import Clock

# A topic's throttled replicas: "*" or partition:broker pairs.
ALL = "*"


def throttled_partitions(values: Iterable[str], broker_id: int) -> frozenset[int] | None:
    """The partitions of a topic throttled on `broker_id`, from a
    *.replication.throttled.replicas value; None means every partition."""
    out = set()
    for value in values:
        item = value.strip()
        if item == ALL:
            return None
        partition, _, broker = item.partition(":")
        if partition.strip().isdigit() and broker.strip() == str(broker_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    def __init__(self, clock: Clock, samples: int = 11, sample_ms: int = 1000) -> None:
        self.clock = clock
        self.samples = samples
        self.sample_ms = sample_ms
        self.bound = math.inf  # bytes/s
        self._windows: deque[list[int]] = deque()  # [start ms, bytes]
        # topic -> throttled partitions (None: all of them)
        self.throttled: dict[str, frozenset[int] | None] = {}

    def update_bound(self, bytes_per_second: float) -> None:
        self.bound = bytes_per_second

    def mark_throttled(self, topic: str, partitions: frozenset[int] | None) -> None:
        if partitions is not None and not partitions:
            self.throttled.pop(topic, None)
        else:
            self.throttled[topic] = partitions

    def is_throttled(self, topic: str, partition: int) -> bool:
        if topic not in self.throttled:
            return False
        partitions = self.throttled[topic]
        return partitions is None or partition in partitions

    def record(self, n: int) -> None:
        now = self.clock.monotonic_ms()
        if not self._windows or now - self._windows[-1][0] >= self.sample_ms:
            self._windows.append([now, 0])
            while len(self._windows) > self.samples:
                self._windows.popleft()
        self._windows[-1][1] += n

    def rate(self) -> float:
        """Bytes/s over the samples kept (Kafka's Rate: the window spans at least
        samples - 1 sample periods, so a first burst is not over-counted)."""
        now = self.clock.monotonic_ms()
        while self._windows and now - self._windows[0][0] >= self.samples * self.sample_ms:
            self._windows.popleft()
        if not self._windows:
            return 0.0
        elapsed = max(now - self._windows[0][0], (self.samples - 1) * self.sample_ms)
        return sum(n for _, n in self._windows) * 1000 / max(elapsed, 1)

    def is_quota_exceeded(self) -> bool:
        return self.bound != math.inf and self.rate() > self.bound
