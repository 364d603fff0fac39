"""Events the controller's single task processes, in order. Store watches and
broker responses only enqueue these."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from moldau.protocol.control import (
    AlterPartitionItem,
    AlterPartitionResult,
    LeaderAndIsrResponse,
    StopReplicaResponse,
)
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition


@dataclass(frozen=True, slots=True)
class Startup:
    pass


@dataclass(frozen=True, slots=True)
class ControllerChange:
    """/controller was created, changed or deleted."""


@dataclass(frozen=True, slots=True)
class Expire:
    """The metadata store's session expired: resign before anything else (Kafka's
    Expire, put first in a cleared queue)."""


@dataclass(frozen=True, slots=True)
class RegisterBrokerAndReelect:
    """A new session replaced the expired one: register the broker again, then take
    part in the election (Kafka's RegisterBrokerAndReelect)."""


@dataclass(frozen=True, slots=True)
class BrokerChange:
    pass


@dataclass(frozen=True, slots=True)
class TopicChange:
    pass


@dataclass(frozen=True, slots=True)
class PartitionModifications:
    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    pass


@dataclass(frozen=True, slots=True)
class TopicUncleanLeaderElectionEnable:
    """The topic's unclean.leader.election.enable was switched on."""

    topic: str


@dataclass(frozen=True, slots=True)
class LogDirEventNotification:
    """A broker wrote /log_dir_event_notification: one of its log dirs failed."""


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponseReceived:
    broker_id: int
    response: LeaderAndIsrResponse


@dataclass(frozen=True, slots=True)
class AlterPartitionReceived:
    """A leader proposes new ISRs; `answer` gets the top-level error and each
    partition's result."""

    broker_id: int
    broker_epoch: int
    items: tuple[AlterPartitionItem, ...]
    answer: asyncio.Future[tuple[ErrorCode, tuple[AlterPartitionResult, ...]]]


@dataclass(frozen=True, slots=True)
class ElectLeadersRequested:
    """ElectLeaders (43): elect the preferred replica (PREFERRED) or, where a
    partition has no leader, any live replica (UNCLEAN); `partitions` None means
    every partition. `answer` gets each partition's error."""

    unclean: bool
    partitions: tuple[TopicPartition, ...] | None
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]]


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequested:
    """ControlledShutdown (7): a broker about to stop asks for its leaderships to
    move; `answer` gets the error and the partitions it still leads."""

    broker_id: int
    broker_epoch: int
    answer: asyncio.Future[tuple[ErrorCode, list[TopicPartition]]]


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection:
    """The leader imbalance check is due (auto.leader.rebalance.enable)."""


@dataclass(frozen=True, slots=True)
class TopicDeletionStopReplicaResponseReceived:
    broker_id: int
    response: StopReplicaResponse


@dataclass(frozen=True, slots=True)
class ApiPartitionReassignment:
    """AlterPartitionReassignments: a target replica list per partition, or None to
    cancel; `answer` gets each partition's error and message."""

    targets: dict[TopicPartition, tuple[int, ...] | None]
    allow_replication_factor_change: bool
    answer: asyncio.Future[dict[TopicPartition, tuple[ErrorCode, str | None]]]


@dataclass(frozen=True, slots=True)
class ZkPartitionReassignment:
    """/admin/reassign_partitions was created or changed."""


ControllerEvent = (
    Startup
    | Expire
    | RegisterBrokerAndReelect
    | ApiPartitionReassignment
    | ZkPartitionReassignment
    | ControllerChange
    | BrokerChange
    | TopicChange
    | PartitionModifications
    | TopicDeletion
    | TopicUncleanLeaderElectionEnable
    | TopicDeletionStopReplicaResponseReceived
    | LogDirEventNotification
    | LeaderAndIsrResponseReceived
    | AlterPartitionReceived
    | ElectLeadersRequested
    | AutoPreferredReplicaLeaderElection
    | ControlledShutdownRequested
)
