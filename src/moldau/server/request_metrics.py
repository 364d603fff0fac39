"""Requests by API and version and each API's time to answer (Kafka's
RequestMetrics), read by the Prometheus collector (server/metrics.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# Kafka's histograms keep a reservoir of 1,028 samples; the last 1,028 stand in
# for its exponentially decaying one (both favour the recent past).
RESERVOIR_SIZE = 1028
QUANTILES = (0.50, 0.75, 0.95, 0.98, 0.99, 0.999)


@dataclass
class TimeHistogram:
    count: int = 0
    total: float = 0.0
    samples: deque[float] = field(default_factory=lambda: deque(maxlen=RESERVOIR_SIZE))

    def update(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.samples.append(value)

    def quantiles(self, qs: tuple[float, ...] = QUANTILES) -> list[tuple[float, float]]:
        """(q, value) for each q, as Yammer's snapshot computes them (0 when empty)."""
        ordered = sorted(self.samples)
        if not ordered:
            return [(q, 0.0) for q in qs]
        out = []
        for q in qs:
            pos = q * (len(ordered) + 1)
            if pos < 1:
                out.append((q, ordered[0]))
            elif pos >= len(ordered):
                out.append((q, ordered[-1]))
            else:
                lower = ordered[int(pos) - 1]
                upper = ordered[int(pos)]
                out.append((q, lower + (pos - int(pos)) * (upper - lower)))
        return out


@dataclass
class RequestMetrics:
    """Requests by (API name, version) and each API's time to answer, in ms, from
    the request's arrival at the handler to its response being ready (Kafka's
    RequestsPerSec and TotalTimeMs). Fetches are timed as FetchConsumer or
    FetchFollower, as Kafka does."""

    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    total_time_ms: dict[str, TimeHistogram] = field(default_factory=dict)

    def record(self, name: str, version: int, timed_as: str, ms: float) -> None:
        key = (name, version)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.total_time_ms.get(timed_as)
        if histogram is None:
            histogram = self.total_time_ms[timed_as] = TimeHistogram()
        histogram.update(ms)
