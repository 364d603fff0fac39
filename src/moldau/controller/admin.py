"""Topic administration as Kafka's AdminZkClient does it: validate a request, compute
the replica assignment, write the topic's znodes. The controller then acts on them.
Used by the broker that handles CreateTopics, CreatePartitions, DeleteTopics,
configs, and auto-creation."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moldau.config.topic import validate_topic_overrides
from moldau.controller.assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
    validate_replica_assignment,
)
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import BadVersionError, NodeExistsError
from moldau.metadata.znodes import TopicAssignment
from moldau.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicException,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate."""
    if not name:
        raise InvalidTopicException("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicException('Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicException(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL.match(name):
        raise InvalidTopicException(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str | None] | None = None


class TopicAdmin:
    def __init__(self, client: MetadataClient) -> None:
        self.client = client

    async def create_topic(
        self,
        topic: NewTopic,
        brokers: Sequence[BrokerMetadata],
        default_partitions: int,
        default_replication_factor: int,
        validate_only: bool = False,
    ) -> TopicAssignment:
        """Validate and (unless validate_only) create; returns the assignment."""
        validate_topic_name(topic.name)
        if await self.client.topic_exists(topic.name):
            if await self.client.is_marked_for_deletion(topic.name):
                raise TopicAlreadyExistsError(f"Topic '{topic.name}' is marked for deletion.")
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
        if has_collision_chars(topic.name):
            unified = unify_collision_chars(topic.name)
            for existing in await self.client.get_all_topics():
                if existing != topic.name and unify_collision_chars(existing) == unified:
                    raise InvalidTopicException(
                        f"Topic '{topic.name}' collides with existing topic: {existing}"
                    )
        configs = {k: v for k, v in (topic.configs or {}).items() if v is not None}
        validate_topic_overrides(configs, topic.name)
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                raise InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time."
                )
            partitions = {int(p): [int(b) for b in r] for p, r in topic.assignments.items()}
            # As KRaft-era Kafka: every replica must be a live broker (a partition on an
            # unknown broker could never get a leader).
            validate_replica_assignment(partitions, {b.id for b in brokers})
        else:
            n = default_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = (
                default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            if n <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if rf <= 0:
                raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
            partitions = assign_replicas_to_brokers(brokers, n, rf)
        assignment = TopicAssignment(uuid.uuid4(), partitions)
        if not validate_only:
            try:
                await self.client.create_topic(topic.name, assignment, configs)
            except NodeExistsError:
                raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.") from None
        return assignment

    async def create_partitions(
        self,
        topic: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        brokers: Sequence[BrokerMetadata],
        validate_only: bool = False,
    ) -> dict[int, list[int]]:
        """Add partitions to reach `count`; returns the new partitions' assignment."""
        found = await self.client.get_topic_assignment(topic)
        if found is None:
            raise UnknownTopicOrPartitionError(f"The topic '{topic}' does not exist.")
        if await self.client.is_marked_for_deletion(topic):
            raise InvalidTopicException(f"The topic '{topic}' is queued for deletion.")
        existing, version = found
        current = len(existing.partitions)
        if count < current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the "
                f"requested {count}."
            )
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        first = existing.partitions[0]
        if assignments is not None:
            if len(assignments) != count - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {count - current} but "
                    f"{len(assignments)} assignments provided."
                )
            added = {current + i: [int(b) for b in r] for i, r in enumerate(assignments)}
            validate_replica_assignment({**existing.partitions, **added})
            unknown = sorted({b for r in added.values() for b in r} - {b.id for b in brokers})
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
                )
        else:
            ids = sorted(b.id for b in brokers)
            start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
            added = assign_replicas_to_brokers(
                brokers, count - current, len(first), fixed_start_index=start,
                start_partition_id=current,
            )  # fmt: skip
        if not validate_only:
            updated = TopicAssignment(existing.topic_id, {**existing.partitions, **added})
            try:
                await self.client.set_topic_assignment(topic, updated, version)
            except BadVersionError:
                raise InvalidRequestError(
                    f"The partitions of '{topic}' changed concurrently; try again"
                ) from None
        return added

    async def delete_topic(self, topic: str) -> None:
        if not await self.client.topic_exists(topic):
            raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
        await self.client.mark_topic_for_deletion(topic)
