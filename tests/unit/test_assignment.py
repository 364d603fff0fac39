"""Replica assignment as Kafka computes it (AdminUtils.assignReplicasToBrokers),
with Kafka's own worked examples, and its invariants as properties."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moldau.controller.assignment import (
    AdminOperationError,
    BrokerMetadata,
    assign_replicas_to_brokers,
    rack_alternated_broker_list,
    validate_replica_assignment,
)
from moldau.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)


def brokers(n: int) -> list[BrokerMetadata]:
    return [BrokerMetadata(i) for i in range(n)]


def test_kafkas_rack_unaware_example() -> None:
    # Kafka's AdminUtilsTest: 5 brokers, 10 partitions, RF 3, fixed start index 0.
    assert assign_replicas_to_brokers(brokers(5), 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip


def test_kafkas_rack_aware_example() -> None:
    # Kafka's AdminRackAwareTest: brokers alternate across racks, then replicas follow.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_broker_list({b: r for b, r in racks.items() if b != 5}) == [
        0,
        3,
        1,
        4,
        2,
    ]
    metadata = [BrokerMetadata(b, r) for b, r in racks.items()]
    assignment = assign_replicas_to_brokers(
        metadata, 7, 3, fixed_start_index=0, start_partition_id=0
    )
    assert assignment == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2],
        4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2],
    }  # fmt: skip


def test_added_partitions_are_numbered_on_and_lead_round_robin() -> None:
    # CreatePartitions: the new partitions' leaders continue from where the topic's
    # partition 0 started (fixedStartIndex), counting from startPartitionId.
    added = assign_replicas_to_brokers(brokers(5), 4, 3, fixed_start_index=2, start_partition_id=6)
    assert sorted(added) == [6, 7, 8, 9]
    assert [added[p][0] for p in range(6, 10)] == [3, 4, 0, 1]


def test_errors_are_kafkas() -> None:
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers(brokers(3), 0, 1)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers(3), 1, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 3"):
        assign_replicas_to_brokers(brokers(3), 1, 4)
    with pytest.raises(AdminOperationError, match="Not all brokers have rack information"):
        assign_replicas_to_brokers([BrokerMetadata(0, "a"), BrokerMetadata(1)], 1, 1)


def test_manual_assignments_are_validated() -> None:
    validate_replica_assignment({0: [1, 2], 1: [2, 1]}, {1, 2})
    with pytest.raises(InvalidReplicaAssignmentError, match="same number of replicas"):
        validate_replica_assignment({0: [1, 2], 1: [2]})
    with pytest.raises(InvalidReplicaAssignmentError, match="Duplicate"):
        validate_replica_assignment({0: [1, 1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="consecutive"):
        validate_replica_assignment({0: [1], 2: [1]})
    with pytest.raises(InvalidReplicaAssignmentError, match="Unknown broker"):
        validate_replica_assignment({0: [1, 7]}, {1, 2})


@given(
    n_brokers=st.integers(1, 12),
    n_partitions=st.integers(1, 60),
    rf=st.integers(1, 12),
    seed=st.integers(0, 2**32),
    n_racks=st.integers(0, 4),
)
def test_invariants(n_brokers: int, n_partitions: int, rf: int, seed: int, n_racks: int) -> None:
    rf = min(rf, n_brokers)
    metadata = [
        BrokerMetadata(i * 3 + 1, f"r{i % n_racks}" if n_racks else None) for i in range(n_brokers)
    ]
    assignment = assign_replicas_to_brokers(metadata, n_partitions, rf, rng=random.Random(seed))
    assert sorted(assignment) == list(range(n_partitions))
    ids = {b.id for b in metadata}
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= ids
    # Leaders spread evenly over the brokers.
    leaders = Counter(r[0] for r in assignment.values())
    if n_partitions >= n_brokers:
        assert max(leaders.values()) - min(leaders.values()) <= 1
    # With racks and enough of them, a partition's replicas are on distinct racks.
    if n_racks and rf <= min(n_racks, n_brokers):
        rack = {b.id: b.rack for b in metadata}
        distinct = len(set(rack.values()))
        if rf <= distinct:
            for replicas in assignment.values():
                assert len({rack[b] for b in replicas}) == rf
