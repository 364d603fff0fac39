"""The automatic preferred-leader rebalance's choice (Kafka's
checkAndTriggerAutoLeaderRebalance), as a pure function."""

from __future__ import annotations

from moldau.controller.rebalance import partitions_to_rebalance
from moldau.storage.partition_name import TopicPartition as TP

ASSIGNMENTS = {TP("t", p): [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(30)}
PREFERRED = {tp: replicas[0] for tp, replicas in ASSIGNMENTS.items()}


def test_nothing_to_do_when_every_preferred_replica_leads() -> None:
    assert partitions_to_rebalance(ASSIGNMENTS, PREFERRED, {1, 2, 3}, (), 10) == []


def test_a_broker_over_the_imbalance_gets_its_partitions_back() -> None:
    # Broker 1 prefers partitions 0, 3, ..., 27 (10 of them); 2 are led by broker 2.
    leaders = {**PREFERRED, TP("t", 0): 2, TP("t", 3): 2}
    assert partitions_to_rebalance(ASSIGNMENTS, leaders, {1, 2, 3}, (), 10) == [
        TP("t", 0),
        TP("t", 3),
    ]
    # 20% is not over a 20% threshold; nor is a dead broker given anything.
    assert partitions_to_rebalance(ASSIGNMENTS, leaders, {1, 2, 3}, (), 20) == []
    assert partitions_to_rebalance(ASSIGNMENTS, leaders, {2, 3}, (), 10) == []


def test_leaderless_partitions_count_and_topics_being_deleted_are_left_alone() -> None:
    leaders = {**PREFERRED, TP("t", 0): 2, TP("t", 3): -1}
    assert partitions_to_rebalance(ASSIGNMENTS, leaders, {1, 2, 3}, (), 5) == [
        TP("t", 0),
        TP("t", 3),
    ]
    assert partitions_to_rebalance(ASSIGNMENTS, leaders, {1, 2, 3}, {"t"}, 5) == []
