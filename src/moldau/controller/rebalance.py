"""Automatic preferred-leader rebalance (Kafka's checkAndTriggerAutoLeaderRebalance),
as a pure function of what the controller knows."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from moldau.storage.partition_name import TopicPartition


def partitions_to_rebalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
    live_brokers: Collection[int],
    excluded_topics: Collection[str],
    imbalance_percentage: int,
) -> list[TopicPartition]:
    """For each broker, the partitions whose preferred (first) replica it is but
    which another leads. Where that share exceeds `imbalance_percentage`, and the
    broker is live, those partitions are returned for a preferred election (which
    still checks that the preferred replica is in the ISR)."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas and tp.topic not in excluded_topics:
            by_preferred.setdefault(replicas[0], []).append(tp)
    out: list[TopicPartition] = []
    for broker, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp in tps if leaders.get(tp) not in (None, broker)]
        if len(elsewhere) * 100 > imbalance_percentage * len(tps) and broker in live_brokers:
            out.extend(elsewhere)
    return sorted(out)
