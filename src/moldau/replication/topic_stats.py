"""What a broker counts per topic as it works (Kafka's BrokerTopicStats): plain
integers bumped per request and partition, never per record, read by the
Prometheus collector (server/metrics.py) at scrape time."""

from __future__ import annotations

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
