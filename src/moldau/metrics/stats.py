"""What a broker counts as it works: Kafka's BrokerTopicStats (per topic and for all
topics), its RequestMetrics (requests by API and version, time to answer) and the
ISR change meters. Plain integers bumped on the request path, per request and
partition, never per record; the Prometheus collector reads them at scrape time."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum


class TopicMeter(IntEnum):
    """Kafka's BrokerTopicMetrics meters."""

    MESSAGES_IN = 0
    BYTES_IN = 1
    BYTES_OUT = 2
    REPLICATION_BYTES_IN = 3
    REPLICATION_BYTES_OUT = 4
    TOTAL_PRODUCE_REQUESTS = 5
    FAILED_PRODUCE_REQUESTS = 6
    TOTAL_FETCH_REQUESTS = 7
    FAILED_FETCH_REQUESTS = 8


# Kafka's MBean names (name=<X>PerSec): what the JMX exporter turns into
# kafka_server_brokertopicmetrics_<x>_total.
TOPIC_METER_NAMES: dict[TopicMeter, str] = {
    TopicMeter.MESSAGES_IN: "MessagesIn",
    TopicMeter.BYTES_IN: "BytesIn",
    TopicMeter.BYTES_OUT: "BytesOut",
    TopicMeter.REPLICATION_BYTES_IN: "ReplicationBytesIn",
    TopicMeter.REPLICATION_BYTES_OUT: "ReplicationBytesOut",
    TopicMeter.TOTAL_PRODUCE_REQUESTS: "TotalProduceRequests",
    TopicMeter.FAILED_PRODUCE_REQUESTS: "FailedProduceRequests",
    TopicMeter.TOTAL_FETCH_REQUESTS: "TotalFetchRequests",
    TopicMeter.FAILED_FETCH_REQUESTS: "FailedFetchRequests",
}


def _zeros() -> list[int]:
    return [0] * len(TopicMeter)


@dataclass
class BrokerTopicStats:
    """Counts per topic, and over all topics (Kafka's allTopicsStats). Replication
    meters have no per-topic form in Kafka, but counting them per topic costs
    nothing and the collector leaves them out."""

    topics: dict[str, list[int]] = field(default_factory=dict)
    all_topics: list[int] = field(default_factory=_zeros)

    def mark(self, topic: str, meter: TopicMeter, n: int = 1) -> None:
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = _zeros()
        counts[meter] += n
        self.all_topics[meter] += n

    def remove_topic(self, topic: str) -> None:
        """A deleted topic's series go away (Kafka's removeMetrics); the totals stay."""
        self.topics.pop(topic, None)


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


@dataclass
class IsrChangeMeters:
    """Kafka's IsrShrinksPerSec, IsrExpandsPerSec and FailedIsrUpdatesPerSec: ISR
    changes the controller confirmed, and proposals it refused."""

    shrinks: int = 0
    expands: int = 0
    failed: int = 0
