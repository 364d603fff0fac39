"""Controller-to-broker requests: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6),
with the field shapes of Kafka 3.x's JSON schemas (kio lacks them: Kafka 4.0
removed them). In embedded mode they are delivered in-process as these objects.
Also the items of AlterPartition (56), the leader's ISR proposals to the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from moldau.protocol.errors import ErrorCode

# A control request's broker epoch when the controller does not know it (Kafka's
# AbstractControlRequest.UNKNOWN_BROKER_EPOCH): never stale.
UNKNOWN_BROKER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False


@dataclass(frozen=True, slots=True)
class LiveLeader:
    broker_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[LeaderAndIsrPartitionState, ...]
    topic_ids: dict[str, UUID]
    live_leaders: tuple[LiveLeader, ...]


@dataclass(frozen=True, slots=True)
class PartitionError:
    topic: str
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponse:
    error_code: int
    partition_errors: tuple[PartitionError, ...] = ()


@dataclass(frozen=True, slots=True)
class StopReplicaPartitionState:
    topic: str
    partition: int
    leader_epoch: int
    delete_partition: bool


@dataclass(frozen=True, slots=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[StopReplicaPartitionState, ...]


@dataclass(frozen=True, slots=True)
class StopReplicaResponse:
    error_code: int
    partition_errors: tuple[PartitionError, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateMetadataPartitionState:
    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UpdateMetadataEndpoint:
    port: int
    host: str
    listener: str
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class UpdateMetadataBroker:
    id: int
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[UpdateMetadataPartitionState, ...]
    live_brokers: tuple[UpdateMetadataBroker, ...]
    topic_ids: dict[str, UUID] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UpdateMetadataResponse:
    error_code: int


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """One partition's proposed ISR, as an AlterPartition request carries it."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The controller's answer for one partition: an error, or the state it wrote."""

    topic: str
    partition: int
    error_code: int
    leader_id: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


ControlRequest = LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest
ControlResponse = LeaderAndIsrResponse | StopReplicaResponse | UpdateMetadataResponse


def stale_broker_epoch_response(request: ControlRequest) -> ControlResponse:
    """The answer to a request meant for the broker's previous registration (Kafka's
    STALE_BROKER_EPOCH; a LeaderAndIsr's names each partition, as getErrorResponse)."""
    code = ErrorCode.stale_broker_epoch
    if isinstance(request, LeaderAndIsrRequest):
        errors = tuple(PartitionError(s.topic, s.partition, code) for s in request.partition_states)
        return LeaderAndIsrResponse(code, errors)
    if isinstance(request, StopReplicaRequest):
        return StopReplicaResponse(code)
    return UpdateMetadataResponse(code)
