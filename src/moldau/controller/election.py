"""Leader election strategies, as pure functions (Kafka's PartitionLeaderElectionAlgorithms).

Each returns the new leader's broker id, or None when no replica qualifies.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live_replicas: Collection[int],
    unclean_leader_election_enabled: bool,
) -> int | None:
    """First live ISR member in assignment order; if none and unclean election is
    enabled, the first live replica (data may be lost)."""
    for replica in assignment:
        if replica in live_replicas and replica in isr:
            return replica
    if unclean_leader_election_enabled:
        for replica in assignment:
            if replica in live_replicas:
                return replica
    return None


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """First replica of the target assignment that is live and in the ISR."""
    for replica in reassignment:
        if replica in live_replicas and replica in isr:
            return replica
    return None


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """The preferred replica (first of the assignment), if it is live and in the ISR."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred in live_replicas and preferred in isr:
        return preferred
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live_replicas: Collection[int],
    shutting_down_brokers: Collection[int],
) -> int | None:
    """First live ISR member in assignment order that is not shutting down."""
    for replica in assignment:
        if replica in live_replicas and replica in isr and replica not in shutting_down_brokers:
            return replica
    return None
