"""The broker's counters and request-time quantiles, as the collector exports them."""

from __future__ import annotations

from moldau.replication.topic_stats import BrokerTopicStats, TopicMeter
from moldau.server.metrics import _quantile
from moldau.server.request_metrics import RESERVOIR_SIZE, TimeHistogram


def test_quantiles_are_yammers_and_keep_only_recent_samples() -> None:
    h = TimeHistogram()
    assert h.quantiles((0.5,)) == [(0.5, 0.0)]
    for v in range(1, 101):
        h.update(float(v))
    assert dict(h.quantiles((0.5, 0.99, 0.999))) == {0.5: 50.5, 0.99: 99.99, 0.999: 100.0}
    for _ in range(RESERVOIR_SIZE):
        h.update(1000.0)
    assert dict(h.quantiles((0.5,)))[0.5] == 1000.0
    assert h.count == 100 + RESERVOIR_SIZE


def test_quantile_labels_are_the_jmx_exporters() -> None:
    assert [_quantile(q) for q in (0.5, 0.75, 0.95, 0.98, 0.99, 0.999)] == [
        "0.50", "0.75", "0.95", "0.98", "0.99", "0.999",
    ]  # fmt: skip


def test_a_deleted_topic_leaves_the_totals() -> None:
    stats = BrokerTopicStats()
    stats.mark("a", TopicMeter.MESSAGES_IN, 5)
    stats.mark("b", TopicMeter.MESSAGES_IN, 2)
    stats.remove_topic("a")
    assert list(stats.topics) == ["b"]
    assert stats.all_topics[TopicMeter.MESSAGES_IN] == 7
