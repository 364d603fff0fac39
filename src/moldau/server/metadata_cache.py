"""MetadataCache: what this broker knows of the cluster, as the controller's
UpdateMetadata requests describe it. Metadata responses are answered from it."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from moldau.metadata.znodes import LeaderAndIsr
from moldau.protocol.control import (
    LeaderAndIsrPartitionState,
    UpdateMetadataBroker,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from moldau.protocol.errors import StaleControllerEpochError
from moldau.storage.partition_name import TopicPartition


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.controller_id: int | None = None
        self.controller_epoch = -1
        self.brokers: dict[int, UpdateMetadataBroker] = {}
        self.partitions: dict[str, dict[int, UpdateMetadataPartitionState]] = {}
        self.topic_ids: dict[str, UUID] = {}
        # Bumped on every change; callers key caches of encoded responses on it.
        self.version = 0
        self.listeners: list[Callable[[], None]] = []

    def update(self, request: UpdateMetadataRequest) -> set[str]:
        """Apply an UpdateMetadata; returns the topics it removed. One from an older
        controller epoch than the last is refused (StaleControllerEpochError, as
        Kafka's ControllerMovedException) and changes nothing."""
        if request.controller_epoch < self.controller_epoch:
            raise StaleControllerEpochError(
                f"controller epoch {request.controller_epoch} < {self.controller_epoch}"
            )
        self.controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id
        self.brokers = {b.id: b for b in request.live_brokers}
        removed: set[str] = set()
        for state in request.partition_states:
            if state.leader == LeaderAndIsr.LEADER_DURING_DELETE:
                parts = self.partitions.get(state.topic)
                if parts is not None:
                    parts.pop(state.partition, None)
                    if not parts:
                        del self.partitions[state.topic]
                        self.topic_ids.pop(state.topic, None)
                        removed.add(state.topic)
            else:
                self.partitions.setdefault(state.topic, {})[state.partition] = state
        for topic, topic_id in request.topic_ids.items():
            if topic in self.partitions:
                self.topic_ids[topic] = topic_id
        self.version += 1
        for listener in self.listeners:
            listener()
        return removed

    def apply_leadership(self, states: list[LeaderAndIsrPartitionState]) -> None:
        """What a LeaderAndIsr this broker has acted on says of partitions it knows,
        where newer than what it knows: its Metadata answers then name the leader it
        acts on. (Kafka's ZooKeeper-mode broker waits for the UpdateMetadata that
        follows: a client told NOT_LEADER_OR_FOLLOWER that asks this broker at once is
        sent back to it, and librdkafka then waited 0.7-1.9 s for a re-query.)"""
        changed = False
        for state in states:
            known = self.partitions.get(state.topic, {}).get(state.partition)
            if known is None or state.leader_epoch <= known.leader_epoch:
                continue
            if state.leader >= 0 and state.leader not in self.brokers:
                continue
            self.partitions[state.topic][state.partition] = UpdateMetadataPartitionState(
                state.topic, state.partition, state.controller_epoch, state.leader,
                state.leader_epoch, state.isr, state.partition_epoch, state.replicas,
                known.offline_replicas,
            )  # fmt: skip
            changed = True
        if changed:
            self.version += 1
            for listener in self.listeners:
                listener()

    def contains_topic(self, topic: str) -> bool:
        return topic in self.partitions

    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def partition_state(self, tp: TopicPartition) -> UpdateMetadataPartitionState | None:
        return self.partitions.get(tp.topic, {}).get(tp.partition)

    def partition_count(self, topic: str) -> int:
        return len(self.partitions.get(topic, {}))

    def alive_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def has_leaders(self, topic: str, expected_partitions: int) -> bool:
        """All of `expected_partitions` are known and have a live leader."""
        parts = self.partitions.get(topic, {})
        if len(parts) < expected_partitions:
            return False
        return all(s.leader >= 0 and s.leader in self.brokers for s in parts.values())

    def endpoint(self, broker_id: int, listener: str | None) -> tuple[str, int] | None:
        """Where `broker_id` listens on `listener` (None: its first listener)."""
        b = self.brokers.get(broker_id)
        if b is None:
            return None
        for ep in b.endpoints:
            if listener is None or ep.listener == listener:
                return ep.host, ep.port
        return None
