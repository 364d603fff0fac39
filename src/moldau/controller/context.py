"""ControllerContext: the controller's in-memory view of the cluster (Kafka's
ControllerContext). Only the controller's event task touches it."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from moldau.controller.reassignment import ReplicaAssignment
from moldau.controller.states import PartitionState, ReplicaState
from moldau.metadata.znodes import BrokerRegistration, LeaderIsrAndControllerEpoch
from moldau.storage.partition_name import TopicPartition


@dataclass(frozen=True, slots=True)
class PartitionReplica:
    tp: TopicPartition
    replica: int


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = 0
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, UUID] = field(default_factory=dict)
    # partition -> assigned replicas (AR), preferred leader first
    assignments: dict[TopicPartition, list[int]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionReplica, ReplicaState] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    # broker -> its replicas whose log directory failed (KIP-112), as its
    # LeaderAndIsr responses said; cleared when the broker restarts
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    # Partitions being reassigned (their assignments hold the full RS), and those of
    # them that /admin/reassign_partitions asked for
    reassignments: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    zk_reassignments: set[TopicPartition] = field(default_factory=set)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    # -- brokers -------------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        """Registered brokers that are not in a controlled shutdown: those that may
        lead or join an ISR (Kafka's liveBrokerIds)."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        """Every registered broker: those that still hear from the controller."""
        return set(self.live_brokers)

    def is_replica_online(
        self, broker_id: int, tp: TopicPartition, include_shutting_down: bool = False
    ) -> bool:
        """Its broker is alive (and, unless asked, not shutting down) and its log
        directory is not offline."""
        if broker_id not in self.live_brokers:
            return False
        if not include_shutting_down and broker_id in self.shutting_down_broker_ids:
            return False
        return tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    # -- topics and partitions -----------------------------------------------------------

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.assignments if tp.topic == topic)

    def all_partitions(self) -> list[TopicPartition]:
        return sorted(self.assignments)

    def replicas_on_brokers(self, broker_ids: set[int]) -> list[PartitionReplica]:
        return [
            PartitionReplica(tp, r)
            for tp, replicas in sorted(self.assignments.items())
            for r in replicas
            if r in broker_ids
        ]

    def replicas_for_topic(self, topic: str) -> list[PartitionReplica]:
        return [
            PartitionReplica(tp, r) for tp in self.partitions_for_topic(topic)
            for r in self.assignments[tp]
        ]  # fmt: skip

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return sorted(
            tp
            for tp, s in self.leadership.items()
            if not self.is_replica_online(s.leader_and_isr.leader, tp)
            and not self.is_topic_queued_for_deletion(tp.topic)
        )

    def partitions_led_by(self, broker_ids: set[int]) -> list[TopicPartition]:
        return sorted(
            tp for tp, s in self.leadership.items() if s.leader_and_isr.leader in broker_ids
        )

    def remove_topic(self, topic: str) -> None:
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        for tp in self.partitions_for_topic(topic):
            del self.assignments[tp]
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.reassignments.pop(tp, None)
            self.zk_reassignments.discard(tp)
        for pr in [pr for pr in self.replica_states if pr.tp.topic == topic]:
            del self.replica_states[pr]

    def full_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.reassignments.get(tp) or ReplicaAssignment(tuple(self.assignments.get(tp, ())))

    def is_topic_being_reassigned(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self.reassignments)

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def replica_state(self, pr: PartitionReplica) -> ReplicaState:
        return self.replica_states.get(pr, ReplicaState.NON_EXISTENT)

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.partition_states.get(tp, PartitionState.NON_EXISTENT)
