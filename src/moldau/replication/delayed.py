"""The delayed operations of the data path: DelayedProduce (acks=all waits for the
ISR), DelayedFetch (a fetch waits for min_bytes or max_wait_ms) and
DelayedDeleteRecords (a DeleteRecords waits for the replicas' log start offsets)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moldau.protocol.errors import ErrorCode
from moldau.protocol.produce import ProducePartitionResponse
from moldau.replication.purgatory import DelayedOperation
from moldau.storage.partition_name import TopicPartition

if TYPE_CHECKING:
    from moldau.replication.replica_manager import FetchParams, FetchPartitionRead, ReplicaManager


@dataclass(slots=True)
class ProducePartitionStatus:
    required_offset: int  # the last appended offset + 1
    response: ProducePartitionResponse
    acks_pending: bool = True


class DelayedProduce(DelayedOperation):
    """Completes when every partition's ISR has the appended records (or an error
    is known). Each pending partition starts as REQUEST_TIMED_OUT, cleared as it
    is acknowledged, so an expiry answers exactly what is still missing."""

    def __init__(
        self,
        delay_ms: int,
        status: dict[TopicPartition, ProducePartitionStatus],
        replica_manager: ReplicaManager,
        respond: Callable[[dict[TopicPartition, ProducePartitionResponse]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.status = status
        self.replica_manager = replica_manager
        self.respond = respond
        for s in status.values():
            if s.acks_pending:
                s.response.error_code = ErrorCode.request_timed_out

    def try_complete(self) -> bool:
        for tp, s in self.status.items():
            if not s.acks_pending:
                continue
            partition = self.replica_manager.get_partition(tp)
            if partition is None:
                s.acks_pending = False
                s.response.error_code = self.replica_manager.missing_partition_error(tp)
                continue
            done, error = partition.check_enough_replicas_reached(s.required_offset)
            if error != ErrorCode.none:
                s.acks_pending = False
                s.response.error_code = error
            elif done:
                s.acks_pending = False
                s.response.error_code = ErrorCode.none
        if all(not s.acks_pending for s in self.status.values()):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond({tp: s.response for tp, s in self.status.items()})


class DelayedFetch(DelayedOperation):
    """Completes when at least min_bytes can be returned, when a partition changes
    leadership or range, or when max_wait_ms passes; then reads again and answers."""

    def __init__(
        self,
        params: FetchParams,
        partitions: list[FetchPartitionRead],
        replica_manager: ReplicaManager,
        respond: Callable[[list[FetchPartitionRead]], None],
    ) -> None:
        super().__init__(params.max_wait_ms)
        self.params = params
        self.partitions = partitions
        self.replica_manager = replica_manager
        self.respond = respond

    def try_complete(self) -> bool:
        accumulated = 0
        for p in self.partitions:
            available = self.replica_manager.bytes_available(self.params, p)
            if available < 0:  # something changed that the client must hear about
                return self.force_complete()
            accumulated += available
        if accumulated >= self.params.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond(self.replica_manager.read_from_local_log(self.params, self.partitions))


# DeleteRecords' low watermark when there is none to tell (Kafka's INVALID_LOW_WATERMARK).
INVALID_LOW_WATERMARK = -1


@dataclass(slots=True)
class DeleteRecordsPartitionStatus:
    """One partition of a DeleteRecords: the offset asked (-1 resolved to the HW)
    and what its answer says so far."""

    required_offset: int
    low_watermark: int
    error: ErrorCode = ErrorCode.none
    acks_pending: bool = False


class DelayedDeleteRecords(DelayedOperation):
    """Completes when every partition's low watermark (the lowest log start offset
    over its live replicas) reaches the offset asked, or an error is known (Kafka's
    DelayedDeleteRecords). Each pending partition starts as REQUEST_TIMED_OUT, so an
    expiry answers that, with the low watermark of the leader's own deletion."""

    def __init__(
        self,
        delay_ms: int,
        status: dict[TopicPartition, DeleteRecordsPartitionStatus],
        replica_manager: ReplicaManager,
        respond: Callable[[dict[TopicPartition, DeleteRecordsPartitionStatus]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.status = status
        self.replica_manager = replica_manager
        self.respond = respond
        for s in status.values():
            if s.error == ErrorCode.none:
                s.acks_pending = True
                s.error = ErrorCode.request_timed_out

    def try_complete(self) -> bool:
        for tp, s in self.status.items():
            if not s.acks_pending:
                continue
            partition = self.replica_manager.get_partition(tp)
            if partition is None or partition.log is None:
                s.acks_pending = False
                s.error = self.replica_manager.missing_partition_error(tp)
                s.low_watermark = INVALID_LOW_WATERMARK
            elif not partition.is_leader:
                s.acks_pending = False
                s.error = ErrorCode.not_leader_or_follower
                s.low_watermark = INVALID_LOW_WATERMARK
            else:
                low = partition.low_watermark_if_leader()
                if low >= s.required_offset:
                    s.acks_pending = False
                    s.error = ErrorCode.none
                    s.low_watermark = low
        if all(not s.acks_pending for s in self.status.values()):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.respond(self.status)
