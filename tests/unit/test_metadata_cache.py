"""The broker's MetadataCache names the leaders the broker itself acts on: a
LeaderAndIsr it has applied moves a partition's leader in its Metadata answers at
once, before the UpdateMetadata that follows (a client told NOT_LEADER_OR_FOLLOWER
asks that very broker next)."""

from __future__ import annotations

from moldau.protocol.control import (
    LeaderAndIsrPartitionState,
    UpdateMetadataBroker,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from moldau.server.metadata_cache import MetadataCache
from moldau.storage.partition_name import TopicPartition

TP = TopicPartition("t", 0)


def cache_with_leader_2() -> MetadataCache:
    cache = MetadataCache(2)
    cache.update(
        UpdateMetadataRequest(
            controller_id=1, controller_epoch=1, broker_epoch=0,
            partition_states=(UpdateMetadataPartitionState("t", 0, 1, 2, 0, (2, 1, 3), 0,
                                                           (2, 1, 3)),),
            live_brokers=tuple(UpdateMetadataBroker(b, ()) for b in (1, 2, 3)),
        )
    )  # fmt: skip
    return cache


def leader_and_isr(leader: int, epoch: int, topic: str = "t") -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(topic, 0, 1, leader, epoch, (1, 3), epoch, (2, 1, 3))


def test_a_newer_leadership_is_named_at_once() -> None:
    cache = cache_with_leader_2()
    seen = []
    cache.listeners.append(lambda: seen.append(cache.version))
    cache.apply_leadership([leader_and_isr(1, 1)])
    state = cache.partition_state(TP)
    assert state is not None
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 3))
    assert seen == [cache.version]  # cached Metadata answers are rebuilt


def test_older_unknown_or_leaderless_states_change_nothing() -> None:
    cache = cache_with_leader_2()
    version = cache.version
    cache.apply_leadership([leader_and_isr(3, 0)])  # not newer
    cache.apply_leadership([leader_and_isr(1, 1, topic="other")])  # a topic not yet known
    cache.apply_leadership([leader_and_isr(9, 1)])  # a broker not known to be alive
    state = cache.partition_state(TP)
    assert state is not None and (state.leader, state.leader_epoch) == (2, 0)
    assert cache.version == version
    assert not cache.contains_topic("other")
