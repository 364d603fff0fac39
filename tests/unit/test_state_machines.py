"""The controller's state machines as data: every State x State edge, and the
leader election strategies as pure functions."""

from __future__ import annotations

import itertools

import pytest

from moldau.controller.election import (
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)
from moldau.controller.states import (
    PartitionState,
    ReplicaState,
    is_valid_partition_transition,
    is_valid_replica_transition,
)
from moldau.coordinator.group import GroupMetadata, GroupState, InvalidGroupTransition

P = PartitionState
R = ReplicaState

# Kafka's validPreviousStates, written out edge by edge.
VALID_PARTITION_EDGES = {
    (P.NON_EXISTENT, P.NEW),
    (P.NEW, P.ONLINE), (P.ONLINE, P.ONLINE), (P.OFFLINE, P.ONLINE),
    (P.NEW, P.OFFLINE), (P.ONLINE, P.OFFLINE), (P.OFFLINE, P.OFFLINE),
    (P.OFFLINE, P.NON_EXISTENT),
}  # fmt: skip
VALID_REPLICA_EDGES = {
    (R.NON_EXISTENT, R.NEW),
    (R.NEW, R.ONLINE), (R.ONLINE, R.ONLINE), (R.OFFLINE, R.ONLINE),
    (R.DELETION_INELIGIBLE, R.ONLINE),
    (R.NEW, R.OFFLINE), (R.ONLINE, R.OFFLINE), (R.OFFLINE, R.OFFLINE),
    (R.DELETION_INELIGIBLE, R.OFFLINE),
    (R.OFFLINE, R.DELETION_STARTED),
    (R.DELETION_STARTED, R.DELETION_SUCCESSFUL),
    (R.OFFLINE, R.DELETION_INELIGIBLE), (R.DELETION_STARTED, R.DELETION_INELIGIBLE),
    (R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(P, P)))
def test_every_partition_edge(current: PartitionState, target: PartitionState) -> None:
    assert is_valid_partition_transition(current, target) == (
        (current, target) in VALID_PARTITION_EDGES
    )


@pytest.mark.parametrize(("current", "target"), list(itertools.product(R, R)))
def test_every_replica_edge(current: ReplicaState, target: ReplicaState) -> None:
    assert is_valid_replica_transition(current, target) == (
        (current, target) in VALID_REPLICA_EDGES
    )


def test_offline_election_prefers_the_first_live_isr_member_in_assignment_order() -> None:
    assert (
        offline_partition_leader_election(
            [3, 1, 2], isr=[1, 2, 3], live_replicas=[1, 2, 3], unclean_leader_election_enabled=False
        )
        == 3
    )
    assert (
        offline_partition_leader_election(
            [3, 1, 2], isr=[2, 1], live_replicas=[1, 2], unclean_leader_election_enabled=False
        )
        == 1
    )
    assert (
        offline_partition_leader_election(
            [3, 1, 2], isr=[3], live_replicas=[1, 2], unclean_leader_election_enabled=False
        )
        is None
    )


def test_offline_election_falls_back_to_any_live_replica_only_when_unclean() -> None:
    assert (
        offline_partition_leader_election(
            [3, 1, 2], isr=[3], live_replicas=[2, 1], unclean_leader_election_enabled=True
        )
        == 1
    )
    assert (
        offline_partition_leader_election(
            [3, 1, 2], isr=[3], live_replicas=[], unclean_leader_election_enabled=True
        )
        is None
    )


def test_reassign_election_uses_the_target_assignment() -> None:
    assert reassign_partition_leader_election([4, 5, 6], isr=[1, 5, 6], live_replicas=[5, 6]) == 5
    assert reassign_partition_leader_election([4, 5], isr=[1], live_replicas=[4, 5]) is None


def test_preferred_election_only_elects_the_first_replica() -> None:
    assert (
        preferred_replica_partition_leader_election([2, 1], isr=[1, 2], live_replicas=[1, 2]) == 2
    )
    assert (
        preferred_replica_partition_leader_election([2, 1], isr=[1], live_replicas=[1, 2]) is None
    )
    assert (
        preferred_replica_partition_leader_election([2, 1], isr=[1, 2], live_replicas=[1]) is None
    )
    assert preferred_replica_partition_leader_election([], isr=[], live_replicas=[]) is None


def test_controlled_shutdown_election_skips_brokers_shutting_down() -> None:
    assert (
        controlled_shutdown_partition_leader_election(
            [1, 2, 3], [1, 2, 3], [1, 2, 3], shutting_down_brokers=[1]
        )
        == 2
    )
    assert (
        controlled_shutdown_partition_leader_election(
            [1, 2], [1], [1, 2], shutting_down_brokers=[1]
        )
        is None
    )


G = GroupState
VALID_GROUP_EDGES = {
    (G.STABLE, G.DEAD), (G.PREPARING_REBALANCE, G.DEAD), (G.COMPLETING_REBALANCE, G.DEAD),
    (G.EMPTY, G.DEAD), (G.DEAD, G.DEAD),
    (G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE),
    (G.COMPLETING_REBALANCE, G.STABLE),
    (G.STABLE, G.PREPARING_REBALANCE), (G.COMPLETING_REBALANCE, G.PREPARING_REBALANCE),
    (G.EMPTY, G.PREPARING_REBALANCE),
    (G.PREPARING_REBALANCE, G.EMPTY),
}  # fmt: skip


@pytest.mark.parametrize(("current", "target"), list(itertools.product(G, G)))
def test_every_group_edge(current: GroupState, target: GroupState) -> None:
    group = GroupMetadata("g", state=current)
    if (current, target) in VALID_GROUP_EDGES:
        group.transition_to(target, 5)
        assert group.state == target and group.current_state_timestamp_ms == 5
    else:
        with pytest.raises(InvalidGroupTransition):
            group.transition_to(target, 5)
        assert group.state == current
