"""Replica assignment, as Kafka computes it (AdminUtils.assignReplicasToBrokers):
rack-unaware and rack-aware, with fixedStartIndex and startPartitionId (used when
partitions are added to a topic). Pure functions; randomness is injected."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moldau.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaError,
)


class AdminOperationError(KafkaError):
    """Kafka's AdminOperationException: reported as INVALID_REPLICA_ASSIGNMENT."""

    code = InvalidReplicaAssignmentError.code


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """partition -> replica broker ids (the first is the preferred leader)."""
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    rng = rng or random.Random()
    ordered = sorted(brokers, key=lambda b: b.id)
    if all(b.rack is None for b in ordered):
        return _rack_unaware(
            n_partitions, replication_factor, [b.id for b in ordered],
            fixed_start_index, start_partition_id, rng,
        )  # fmt: skip
    if any(b.rack is None for b in ordered):
        raise AdminOperationError(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    return _rack_aware(
        n_partitions, replication_factor, {b.id: str(b.rack) for b in ordered},
        fixed_start_index, start_partition_id, rng,
    )  # fmt: skip


def replica_index(first_replica_index: int, second_replica_shift: int, index: int, n: int) -> int:
    """Where the (index+2)-th replica goes: shifted from the first by 1..n-1."""
    shift = 1 + (second_replica_shift + index) % (n - 1)
    return (first_replica_index + shift) % n


def _rack_unaware(
    n_partitions: int,
    rf: int,
    broker_ids: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(broker_ids)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    out: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [broker_ids[first]]
        replicas += [broker_ids[replica_index(first, shift, j, n)] for j in range(rf - 1)]
        out[partition] = replicas
        partition += 1
    return out


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered by taking one from each rack (racks sorted) in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(broker_racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    racks = sorted(by_rack)
    iterators = {r: iter(by_rack[r]) for r in racks}
    out: list[int] = []
    i = 0
    while len(out) < len(broker_racks):
        nxt = next(iterators[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def _rack_aware(
    n_partitions: int,
    rf: int,
    broker_racks: dict[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n_racks = len(set(broker_racks.values()))
    arranged = rack_alternated_broker_list(broker_racks)
    n = len(arranged)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition_id)
    out: dict[int, list[int]] = {}
    for _ in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[replica_index(first, shift * n_racks, k, n)]
                rack = broker_racks[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has
                # none, or a broker that has one while some broker has none.
                if (rack not in racks_used or len(racks_used) == n_racks) and (
                    broker not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
        partition += 1
    return out


def validate_replica_assignment(
    assignment: Mapping[int, Sequence[int]], live_broker_ids: set[int] | None = None
) -> None:
    """A manual assignment (CreateTopics, --replica-assignment) as Kafka checks it:
    one replication factor, no duplicate replica in a partition, partitions 0..n-1.
    With `live_broker_ids` (CreatePartitions), every broker must be live."""
    if len({len(r) for r in assignment.values()}) != 1:
        raise InvalidReplicaAssignmentError(
            "All partitions should have the same number of replicas"
        )
    for replicas in assignment.values():
        if len(replicas) != len(set(replicas)):
            raise InvalidReplicaAssignmentError(
                f"Duplicate replica assignment found: {dict(assignment)}"
            )
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(
            "partitions should be a consecutive 0-based integer sequence"
        )
    if live_broker_ids is not None:
        unknown = sorted({b for r in assignment.values() for b in r} - live_broker_ids)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
            )
