"""ReplicaManager: the partitions this broker holds, and the produce and fetch paths
through them (Kafka's ReplicaManager)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from uuid import UUID

from moldau.clock import Clock
from moldau.protocol.control import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)
from moldau.protocol.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from moldau.protocol.produce import ProducePartitionResponse
from moldau.protocol.records import HEADER_SIZE, BatchHeader
from moldau.protocol.uuids import ZERO_UUID
from moldau.replication.delayed import (
    INVALID_LOW_WATERMARK,
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    DeleteRecordsPartitionStatus,
    ProducePartitionStatus,
)
from moldau.replication.fetcher import (
    FetchClient,
    FetcherConfig,
    FollowerSetup,
    ReplicaFetcherManager,
)
from moldau.replication.isr import IsrChangeMeters
from moldau.replication.partition import (
    AlterPartitionSender,
    FetchIsolation,
    LogReadInfo,
    Partition,
)
from moldau.replication.purgatory import DelayedOperationPurgatory, Timer
from moldau.replication.quota import ReplicationQuota
from moldau.replication.topic_stats import BrokerTopicStats, TopicMeter
from moldau.storage.checkpoint import OffsetCheckpointFile, Snapshot, SnapshotWriter
from moldau.storage.log import EMPTY, FetchDataInfo
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import AppendOrigin, VerificationGuard

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"
# Fetch requests from consumers carry this replica id.
CONSUMER_REPLICA_ID = -1
# Produce errors Kafka answers without the log start offset (its appendToLocalLog);
# every other refusal carries it.
_NO_LOG_START_ON_ERROR = frozenset({
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.not_leader_or_follower,
    ErrorCode.message_too_large,
    ErrorCode.record_list_too_large,
    ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error,
})  # fmt: skip


# log dir -> partition -> high watermark (replication-offset-checkpoint)
HighWatermarks = dict[Path, dict[TopicPartition, int]]


@dataclass(frozen=True, slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    # False for Fetch v0-v2, whose byte limits are hard (Kafka's hardMaxBytesLimit):
    # a first batch larger than the limit is cut, not sent whole.
    min_one_message: bool = True

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(frozen=True, slots=True)
class TxnMarkerAppend:
    """One marker of a WriteTxnMarkers request, for one partition."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclass(slots=True)
class FetchPartitionRead:
    """One partition of a fetch: what was asked, and what was read."""

    tp: TopicPartition
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int
    log_start_offset: int = -1  # a follower's, as its fetch says
    last_fetched_epoch: int = -1  # the epoch of the fetcher's last batch (v12+)
    error: ErrorCode = ErrorCode.none
    info: LogReadInfo | None = None


# DescribeLogDirs' offset lag of a log no partition holds here (Kafka's
# INVALID_OFFSET_LAG).
INVALID_OFFSET_LAG = -1


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    partition: int
    size: int  # bytes in its segments
    offset_lag: int


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory as DescribeLogDirs tells it: its absolute path, and either
    an error or its partitions by topic and its volume's space."""

    path: Path
    error: ErrorCode
    topics: dict[str, list[LogDirPartition]]
    total_bytes: int = -1
    usable_bytes: int = -1


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        clock: Clock,
        timer: Timer,
        log_config: Callable[[str], LogConfig],
        replica_lag_time_max_ms: int = 30_000,
        alter_partition: AlterPartitionSender | None = None,
        fetch_client: FetchClient | None = None,
        fetcher_config: FetcherConfig | None = None,
        topic_stats: BrokerTopicStats | None = None,
        quota_window: tuple[int, int] = (11, 1000),  # samples, ms each
        is_broker_alive: Callable[[int], bool] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.is_broker_alive = is_broker_alive
        self.topic_stats = topic_stats if topic_stats is not None else BrokerTopicStats()
        self.isr_meters = IsrChangeMeters()
        # Replication throttles (KIP-73): what this broker sends as a leader, and
        # fetches as a follower, for replicas that are not in sync.
        self.leader_quota = ReplicationQuota(clock, *quota_window)
        self.follower_quota = ReplicationQuota(clock, *quota_window)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alter_partition = alter_partition
        self.log_manager = log_manager
        self.clock = clock
        self.log_config = log_config
        self.partitions: dict[TopicPartition, Partition] = {}
        # Followers fetch from their leaders (none without a client: a lone broker).
        self.fetchers: ReplicaFetcherManager | None = None
        if fetch_client is not None:
            config = fetcher_config or FetcherConfig()
            self.fetchers = ReplicaFetcherManager(
                FollowerSetup(
                    broker_id,
                    fetch_client,
                    self.partitions.get,
                    config,
                    clock,
                    log_manager,
                    self.topic_stats,
                    self.follower_quota,
                )
            )
        self.controller_epoch = 0
        # Checkpoints are written from worker threads, and once more at shutdown.
        self._hw_checkpoints_writer = SnapshotWriter()
        self.produce_purgatory: DelayedOperationPurgatory[TopicPartition, DelayedProduce] = (
            DelayedOperationPurgatory("Produce", timer)
        )
        self.fetch_purgatory: DelayedOperationPurgatory[TopicPartition, DelayedFetch] = (
            DelayedOperationPurgatory("Fetch", timer)
        )
        self.delete_records_purgatory: DelayedOperationPurgatory[
            TopicPartition, DelayedDeleteRecords
        ] = DelayedOperationPurgatory("DeleteRecords", timer)
        self._hw_checkpoints: dict[TopicPartition, int] = {}
        # Partitions whose log directory failed (Kafka's HostedPartition.Offline):
        # they answer KAFKA_STORAGE_ERROR until the broker restarts.
        self.offline_partitions: set[TopicPartition] = set()
        # Called with each partition this broker starts or stops leading.
        self.on_leadership_change: list[Callable[[TopicPartition, bool], None]] = []

    def startup(self) -> None:
        for d in self.log_manager.live_log_dirs:
            try:
                with self.log_manager.io(d, "reading the high watermark checkpoint"):
                    self._hw_checkpoints.update(OffsetCheckpointFile(d / HW_CHECKPOINT).read())
            except ValueError as e:
                log.warning("ignoring %s: %s", d / HW_CHECKPOINT, e)
            except KafkaStorageError:
                self.handle_log_dir_failure(d)

    def shutdown(self, checkpoint: bool = True) -> None:
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.delete_records_purgatory.shutdown()
        if checkpoint:
            self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        self.write_high_watermarks(self.high_watermarks_by_dir())

    def high_watermarks_by_dir(self) -> Snapshot[HighWatermarks]:
        """What replication-offset-checkpoint says in each online log directory."""
        by_dir: HighWatermarks = {d: {} for d in self.log_manager.live_log_dirs}
        for tp, p in self.partitions.items():
            if p.log is not None and p.log.log_dir in by_dir:
                by_dir[p.log.log_dir][tp] = p.high_watermark
        return self._hw_checkpoints_writer.take(by_dir)

    def write_high_watermarks(self, snapshot: Snapshot[HighWatermarks]) -> None:
        """Write the checkpoints (from any thread: they fsync); a directory whose
        write fails goes offline, its previous checkpoint intact."""
        self._hw_checkpoints_writer.write(snapshot, self._write_high_watermarks)

    def _write_high_watermarks(self, by_dir: HighWatermarks) -> None:
        for d, hws in by_dir.items():
            self.log_manager.io_or_offline(
                d,
                "writing the high watermark checkpoint",
                partial(OffsetCheckpointFile(d / HW_CHECKPOINT).write, hws),
            )

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """Take the partitions of an offline log directory offline (Kafka's
        handleLogDirFailure); returns them. Waiting requests on them answer now."""
        gone = self.log_manager.handle_log_dir_failure(log_dir)
        led = []
        # Every partition goes offline before any waiting request is looked at again:
        # one of those may also be waiting on another partition of this directory.
        for tp in gone:
            self.offline_partitions.add(tp)
            partition = self.partitions.pop(tp, None)
            self._hw_checkpoints.pop(tp, None)
            if partition is not None:
                if partition.is_leader:
                    led.append(tp)
                partition.mark_offline()
            self._stop_fetching(tp)
        for tp in led:
            self._leadership_changed(tp, False)
        for tp in gone:
            self._complete_delayed(tp)
        return gone

    def _follow(self, tp: TopicPartition, leader: int, leader_epoch: int) -> None:
        """Fetch `tp` from `leader` in `leader_epoch` (a new fetch state: the old
        leader's fetcher lets go of it)."""
        if self.fetchers is None:
            return
        if leader < 0 or leader == self.broker_id:
            self.fetchers.remove_partition(tp)
        else:
            self.fetchers.add_partition(tp, leader, leader_epoch)

    def _stop_fetching(self, tp: TopicPartition) -> None:
        if self.fetchers is not None:
            self.fetchers.remove_partition(tp)

    async def close_fetchers(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.close()

    def _leadership_changed(self, tp: TopicPartition, is_leader: bool) -> None:
        for listener in self.on_leadership_change:
            listener(tp, is_leader)

    def _complete_delayed(self, tp: TopicPartition) -> None:
        """Something changed that waiting produces, fetches and record deletions of
        `tp` must see."""
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)

    def _on_high_watermark_moved(self, partition: Partition) -> None:
        self._complete_delayed(partition.tp)

    def shrink_isrs(self) -> None:
        """Drop followers that stopped catching up from the ISRs this broker leads
        (Kafka's isr-expiration task, every replica.lag.time.max.ms / 2)."""
        for partition in list(self.partitions.values()):
            if partition.is_leader:
                partition.maybe_shrink_isr()

    def missing_partition_error(self, tp: TopicPartition) -> ErrorCode:
        """Why this broker has no partition `tp`."""
        if tp in self.offline_partitions:
            return ErrorCode.kafka_storage_error
        return ErrorCode.unknown_topic_or_partition

    # -- partitions ----------------------------------------------------------------------

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None or p.log is None:
            if tp in self.offline_partitions:
                raise KafkaStorageError(f"partition {tp} is in an offline log directory")
            raise UnknownTopicOrPartitionError(f"this broker has no partition {tp}")
        return p

    def leader_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.get_partition_or_error(tp)
        if not p.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {tp}")
        return p

    def high_watermark(self, tp: TopicPartition) -> int:
        p = self.partitions.get(tp)
        return p.high_watermark if p is not None else 0

    def last_stable_offset(self, tp: TopicPartition) -> int:
        p = self.partitions.get(tp)
        return p.last_stable_offset if p is not None else 0

    # -- control requests ----------------------------------------------------------------

    def become_leader_or_follower(self, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        if request.controller_epoch < self.controller_epoch:
            log.warning(
                "ignoring LeaderAndIsr of controller epoch %d < %d",
                request.controller_epoch, self.controller_epoch,
            )  # fmt: skip
            return LeaderAndIsrResponse(ErrorCode.stale_controller_epoch)
        self.controller_epoch = request.controller_epoch
        errors = []
        for state in request.partition_states:
            tp = TopicPartition(state.topic, state.partition)
            if self.broker_id not in state.replicas:
                errors.append(
                    PartitionError(tp.topic, tp.partition, ErrorCode.unknown_topic_or_partition)
                )
                continue
            if tp in self.offline_partitions:
                log.warning("%s is in an offline log directory: not becoming its replica", tp)
                errors.append(PartitionError(tp.topic, tp.partition, ErrorCode.kafka_storage_error))
                continue
            topic_id = request.topic_ids.get(tp.topic)
            if topic_id == ZERO_UUID:
                topic_id = None  # a topic made before topic ids: nothing to compare
            partition = self.partitions.get(tp)
            if partition is not None and _of_another_topic(partition, topic_id):
                # The partition of a deleted topic of the same name, whose StopReplica
                # never came: forget it (its log is set aside as a stray below), or
                # its leader epochs would make the new topic's look stale.
                log.warning("%s: held for topic id %s, now %s", tp, partition.topic_id, topic_id)
                self._forget_partition(tp, partition)
                partition = None
            if partition is None:
                partition = Partition(
                    tp, self.broker_id, self.log_manager, self.log_config, self.clock,
                    self.replica_lag_time_max_ms, self.alter_partition, self.isr_meters,
                    self.is_broker_alive,
                )  # fmt: skip
                partition.on_high_watermark_moved = self._on_high_watermark_moved
                self.partitions[tp] = partition
            elif state.leader_epoch < partition.leader_epoch:
                errors.append(
                    PartitionError(tp.topic, tp.partition, ErrorCode.stale_controller_epoch)
                )
                continue
            was_leader = partition.is_leader
            try:
                if state.leader == self.broker_id:
                    partition.make_leader(state, topic_id, self._hw_checkpoints.get(tp))
                    self._stop_fetching(tp)
                else:
                    partition.make_follower(state, topic_id, self._hw_checkpoints.get(tp))
                    self._follow(tp, state.leader, state.leader_epoch)
            except KafkaStorageError as e:
                # No log directory could take it (or its log's failed): Kafka marks
                # the partition offline and tells the controller.
                log.error("%s: %s", tp, e)
                self.partitions.pop(tp, None)
                self.offline_partitions.add(tp)
                if was_leader:
                    self._leadership_changed(tp, False)
                self._stop_fetching(tp)
                # Produces waiting for acks=all answer now, not at their timeout.
                self._complete_delayed(tp)
                errors.append(PartitionError(tp.topic, tp.partition, ErrorCode.kafka_storage_error))
                continue
            errors.append(PartitionError(tp.topic, tp.partition, ErrorCode.none))
            if was_leader != partition.is_leader:
                self._leadership_changed(tp, partition.is_leader)
            # Waiting requests must learn of the change.
            self._complete_delayed(tp)
        self.log_manager.sync_created_logs()
        # The high watermarks are checkpointed by the broker's periodic task, as in
        # Kafka: writing all of them here made every LeaderAndIsr cost as much as
        # the broker has partitions (and an fsync on the event loop).
        return LeaderAndIsrResponse(ErrorCode.none, tuple(errors))

    def _forget_partition(self, tp: TopicPartition, partition: Partition) -> None:
        self.partitions.pop(tp, None)
        self._hw_checkpoints.pop(tp, None)
        if partition.is_leader:
            self._leadership_changed(tp, False)
        partition.stop()
        self._stop_fetching(tp)

    def stop_replicas(self, request: StopReplicaRequest) -> StopReplicaResponse:
        if request.controller_epoch < self.controller_epoch:
            return StopReplicaResponse(ErrorCode.stale_controller_epoch)
        self.controller_epoch = request.controller_epoch
        errors = []
        for state in request.partition_states:
            tp = TopicPartition(state.topic, state.partition)
            if tp in self.offline_partitions:
                errors.append(PartitionError(tp.topic, tp.partition, ErrorCode.kafka_storage_error))
                continue
            partition = self.partitions.get(tp)
            if state.delete_partition:
                if partition is not None:
                    self._forget_partition(tp, partition)
                self._hw_checkpoints.pop(tp, None)
                try:
                    self.log_manager.delete_log(tp)
                except KafkaStorageError:
                    # Its directory failed on the way: the deletion is not done.
                    self.offline_partitions.add(tp)
                    self._complete_delayed(tp)
                    errors.append(
                        PartitionError(tp.topic, tp.partition, ErrorCode.kafka_storage_error)
                    )
                    continue
            elif partition is not None:
                if partition.is_leader:
                    self._leadership_changed(tp, False)
                partition.stop()
                self._stop_fetching(tp)
            self._complete_delayed(tp)
            errors.append(PartitionError(tp.topic, tp.partition, ErrorCode.none))
        # A deleted topic's series go (Kafka's removeMetrics once none of it is left).
        deleted = {s.topic for s in request.partition_states if s.delete_partition}
        if deleted:
            for topic in deleted - {tp.topic for tp in self.partitions}:
                self.topic_stats.remove_topic(topic)
        return StopReplicaResponse(ErrorCode.none, tuple(errors))

    # -- log dirs ------------------------------------------------------------------------

    def describe_log_dirs(self, partitions: set[TopicPartition] | None) -> list[LogDirDescription]:
        """Every configured log directory with the logs it holds of `partitions`
        (None: all), as Kafka's describeLogDirs: an offline directory answers
        KAFKA_STORAGE_ERROR and nothing else; topics with none of `partitions` are
        left out."""
        by_dir: dict[Path, dict[str, list[LogDirPartition]]] = {}
        for tp, lg in self.log_manager.logs.items():
            if partitions is not None and tp not in partitions:
                continue
            entry = LogDirPartition(tp.partition, lg.size_in_bytes(), self._offset_lag(tp))
            by_dir.setdefault(lg.log_dir, {}).setdefault(tp.topic, []).append(entry)
        out = []
        for d in self.log_manager.log_dirs:
            if self.log_manager.failure_channel.is_offline(d):
                out.append(LogDirDescription(d, ErrorCode.kafka_storage_error, {}))
                continue
            try:
                usage = shutil.disk_usage(d)
            except OSError as e:
                # Kafka answers what its file store lookup threw (an IOException:
                # UNKNOWN_SERVER_ERROR) and leaves the directory online.
                log.error("cannot describe log dir %s: %s", d, e)
                out.append(LogDirDescription(d, ErrorCode.unknown_server_error, {}))
                continue
            topics = by_dir.get(d, {})
            for entries in topics.values():
                entries.sort(key=lambda e: e.partition)
            # `free` is what an unprivileged writer may use (Java's getUsableSpace).
            out.append(LogDirDescription(d, ErrorCode.none, topics, usage.total, usage.free))
        return out

    def _offset_lag(self, tp: TopicPartition) -> int:
        """How far the log's end is behind its HW (Kafka's getLogEndOffsetLag): 0 on
        a leader, and on a follower too, whose HW never passes its log end; -1 for
        a log no partition holds yet (before its first LeaderAndIsr)."""
        p = self.partitions.get(tp)
        if p is None or p.log is None:
            return INVALID_OFFSET_LAG
        return max(p.high_watermark - p.log.log_end_offset, 0)

    # -- produce -------------------------------------------------------------------------

    def append_records(
        self,
        required_acks: int,
        timeout_ms: int,
        entries: dict[TopicPartition, memoryview | None],
        respond: Callable[[dict[TopicPartition, ProducePartitionResponse]], None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guards: dict[TopicPartition, VerificationGuard] | None = None,
    ) -> None:
        """Append to the leaders' logs; `respond` is called with every partition's
        result, now (acks 0/1, or an error) or once the ISR has the records (acks=all).
        `origin` COORDINATOR: the broker's own coordinators write (their sequences are
        not checked). `verification_guards`: with KIP-890 verification on, each
        partition's guard (see `start_transaction_verification`); a transactional
        batch without its verified guard, and no transaction open, is INVALID_TXN_STATE."""
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        status: dict[TopicPartition, ProducePartitionStatus] = {}
        stats = self.topic_stats
        for tp, batch in entries.items():
            response = ProducePartitionResponse(tp.partition)
            results[tp] = response
            stats.mark(tp.topic, TopicMeter.TOTAL_PRODUCE_REQUESTS)
            try:
                if batch is None:
                    raise UnknownTopicOrPartitionError("no records")
                partition = self.get_partition_or_error(tp)
                guard = None
                if verification_guards is not None:
                    guard = verification_guards.get(tp, VerificationGuard.SENTINEL)
                info = partition.append_records_to_leader(batch, required_acks, origin, guard)
            except KafkaError as e:
                response.error_code = e.code
                response.error_message = e.message or None
                response.record_errors = e.record_errors
                if e.code not in _NO_LOG_START_ON_ERROR:
                    # As Kafka: a refused batch still tells the log start offset.
                    held = self.partitions.get(tp)
                    log_ = held.log if held is not None else None
                    if log_ is not None:
                        response.log_start_offset = log_.log_start_offset
                stats.mark(tp.topic, TopicMeter.FAILED_PRODUCE_REQUESTS)
                continue
            if not info.duplicate:
                stats.mark(tp.topic, TopicMeter.BYTES_IN, len(batch))
                stats.mark(tp.topic, TopicMeter.MESSAGES_IN, info.records_count)
            response.base_offset = info.first_offset
            response.log_append_time_ms = info.log_append_time
            response.log_start_offset = info.log_start_offset
            status[tp] = ProducePartitionStatus(info.last_offset + 1, response)
            # New data may satisfy waiting fetches (followers' or, with a moved HW,
            # consumers').
            self.fetch_purgatory.check_and_complete(tp)
        if required_acks != -1 or not status:
            respond(results)
            return
        for tp, response in results.items():
            if tp not in status:
                status[tp] = ProducePartitionStatus(0, response, acks_pending=False)
        op = DelayedProduce(timeout_ms, status, self, respond)
        self.produce_purgatory.try_complete_else_watch(op, list(status))

    def start_transaction_verification(
        self, entries: dict[TopicPartition, memoryview | None]
    ) -> dict[TopicPartition, VerificationGuard]:
        """KIP-890 part 1, before a produce: for each partition led here whose batch is
        transactional, SENTINEL if the producer's transaction is open there, else the
        guard to verify with the coordinator (AddPartitionsToTxn, verify only) and pass
        to `append_records` (Kafka's appendRecordsWithTransactionVerification). Other
        partitions are left out: their append reports their error."""
        guards: dict[TopicPartition, VerificationGuard] = {}
        for tp, batch in entries.items():
            if batch is None or len(batch) < HEADER_SIZE:
                continue
            header = BatchHeader.parse(batch)
            if not header.is_transactional or header.producer_id < 0:
                continue
            partition = self.partitions.get(tp)
            if partition is None or partition.log is None or not partition.is_leader:
                continue
            guards[tp] = partition.maybe_start_transaction_verification(
                header.producer_id, header.base_sequence, header.producer_epoch
            )
        return guards

    def append_end_txn_markers(
        self,
        timeout_ms: int,
        markers: dict[TopicPartition, TxnMarkerAppend],
        respond: Callable[[dict[TopicPartition, ErrorCode]], None],
    ) -> None:
        """Write each transaction marker to its partition's log as leader, then wait
        as acks=all does for the ISR to have it (Kafka's appendRecords with origin
        COORDINATOR and requiredAcks -1); `respond` gets each partition's error."""
        results: dict[TopicPartition, ProducePartitionResponse] = {}
        status: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, marker in markers.items():
            response = ProducePartitionResponse(tp.partition)
            results[tp] = response
            try:
                partition = self.get_partition_or_error(tp)
                info = partition.append_end_txn_marker(
                    marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                    marker.commit,
                )  # fmt: skip
            except KafkaError as e:
                response.error_code = e.code
                continue
            response.base_offset = info.first_offset
            status[tp] = ProducePartitionStatus(info.last_offset + 1, response)
            # Waiting fetches: a follower's has new data, and the LSO may have moved.
            self.fetch_purgatory.check_and_complete(tp)

        def errors(responses: dict[TopicPartition, ProducePartitionResponse]) -> None:
            respond({tp: ErrorCode(r.error_code) for tp, r in responses.items()})

        if not status:
            errors(results)
            return
        for tp, response in results.items():
            if tp not in status:
                status[tp] = ProducePartitionStatus(0, response, acks_pending=False)
        op = DelayedProduce(timeout_ms, status, self, errors)
        self.produce_purgatory.try_complete_else_watch(op, list(status))

    # -- delete records ------------------------------------------------------------------

    def delete_records(
        self,
        timeout_ms: int,
        offsets: dict[TopicPartition, int],
        respond: Callable[[dict[TopicPartition, DeleteRecordsPartitionStatus]], None],
    ) -> None:
        """Move the leaders' log start offsets up (Kafka's deleteRecords); `respond`
        is called with each partition's low watermark or error, at once if no replica
        need catch up, else once every live replica's log start offset has reached
        the offset asked, or after `timeout_ms` (REQUEST_TIMED_OUT). The caller has
        checked that the metadata names every partition: one this broker does not
        hold is NOT_LEADER_OR_FOLLOWER (the client's metadata is stale)."""
        status: dict[TopicPartition, DeleteRecordsPartitionStatus] = {}
        must_wait = False
        for tp, offset in offsets.items():
            try:
                partition = self.partitions.get(tp)
                if partition is None or partition.log is None:
                    if tp in self.offline_partitions:
                        raise KafkaStorageError(f"partition {tp} is in an offline log directory")
                    raise NotLeaderOrFollowerError(f"broker {self.broker_id} holds no {tp}")
                required, low = partition.delete_records_on_leader(offset)
            except KafkaError as e:
                status[tp] = DeleteRecordsPartitionStatus(-1, INVALID_LOW_WATERMARK, e.code)
                continue
            status[tp] = DeleteRecordsPartitionStatus(required, low)
            must_wait = must_wait or low < required
        if not must_wait:
            respond(status)
            return
        op = DelayedDeleteRecords(timeout_ms, status, self, respond)
        self.delete_records_purgatory.try_complete_else_watch(op, list(status))

    # -- fetch ---------------------------------------------------------------------------

    def fetch_messages(
        self,
        params: FetchParams,
        partitions: list[FetchPartitionRead],
        respond: Callable[[list[FetchPartitionRead]], None],
    ) -> None:
        stats = self.topic_stats
        if not params.is_from_follower:
            for p in partitions:
                stats.mark(p.tp.topic, TopicMeter.TOTAL_FETCH_REQUESTS)
        reads = self.read_from_local_log(params, partitions)
        readable = sum(r.info.data.size for r in reads if r.info is not None)

        def counted(reads: list[FetchPartitionRead]) -> None:
            follower = params.is_from_follower
            out = TopicMeter.REPLICATION_BYTES_OUT if follower else TopicMeter.BYTES_OUT
            for r in reads:
                if r.error != ErrorCode.none:
                    if not follower:
                        stats.mark(r.tp.topic, TopicMeter.FAILED_FETCH_REQUESTS)
                elif r.info is not None and r.info.data.size:
                    stats.mark(r.tp.topic, out, r.info.data.size)
                    if follower and self.leader_quota.is_throttled(r.tp.topic, r.tp.partition):
                        self.leader_quota.record(r.info.data.size)
            respond(reads)

        # Errors, and followers that must first cut their logs, are answered at once.
        errored = any(
            r.error != ErrorCode.none or (r.info is not None and r.info.diverging_epoch)
            for r in reads
        )
        if params.max_wait_ms <= 0 or not reads or readable >= params.min_bytes or errored:
            counted(reads)
            return
        op = DelayedFetch(params, partitions, self, counted)
        self.fetch_purgatory.try_complete_else_watch(op, [p.tp for p in partitions])

    def read_from_local_log(
        self, params: FetchParams, partitions: list[FetchPartitionRead]
    ) -> list[FetchPartitionRead]:
        limit = params.max_bytes
        min_one = params.min_one_message
        out = []
        for p in partitions:
            read = FetchPartitionRead(p.tp, p.fetch_offset, p.current_leader_epoch, p.max_bytes)
            try:
                partition = self.get_partition_or_error(p.tp)
                info = partition.read_records(
                    p.fetch_offset,
                    p.current_leader_epoch,
                    min(p.max_bytes, limit),
                    params.isolation,
                    fetch_only_from_leader=True,
                    min_one_message=min_one,
                    last_fetched_epoch=p.last_fetched_epoch,
                )
                if params.is_from_follower and self._leader_throttles(partition, params):
                    info = dataclasses.replace(info, data=FetchDataInfo(p.fetch_offset, EMPTY))
                # A diverged follower's offset says nothing of what it has.
                if params.is_from_follower and info.diverging_epoch is None:
                    moved = partition.update_follower_fetch_state(
                        params.replica_id, p.fetch_offset, p.log_start_offset,
                        self.clock.monotonic_ms(),
                    )  # fmt: skip
                    if moved:
                        self._complete_delayed(p.tp)
                    else:
                        # Its log start offset may have reached what a DeleteRecords
                        # waits for (a dictionary lookup when none waits).
                        self.delete_records_purgatory.check_and_complete(p.tp)
                read.info = info
                size = info.data.size
                limit = max(0, limit - size)
                if size > 0:
                    min_one = False
            except KafkaError as e:
                read.error = e.code
                partition_or_none = self.partitions.get(p.tp)
                if partition_or_none is not None and partition_or_none.log is not None:
                    lg = partition_or_none.log
                    read.info = LogReadInfo(
                        FetchDataInfo(p.fetch_offset, EMPTY),
                        partition_or_none.high_watermark,
                        lg.log_start_offset,
                        lg.log_end_offset,
                        partition_or_none.last_stable_offset,
                    )
            out.append(read)
        return out

    def _leader_throttles(self, partition: Partition, params: FetchParams) -> bool:
        """Kafka's shouldLeaderThrottle: a throttled partition's data is held back
        from a follower out of the ISR while the leader's quota is exceeded."""
        tp = partition.tp
        return (
            self.leader_quota.is_throttled(tp.topic, tp.partition)
            and params.replica_id not in partition.isr
            and self.leader_quota.is_quota_exceeded()
        )

    def bytes_available(self, params: FetchParams, p: FetchPartitionRead) -> int:
        """Bytes a delayed fetch could now return for `p`; -1 if the partition's
        situation changed so that the fetch must answer now."""
        partition = self.partitions.get(p.tp)
        if partition is None or partition.log is None or not partition.is_leader:
            return -1
        if 0 <= p.current_leader_epoch != partition.leader_epoch:
            return -1
        lg = partition.log
        if params.isolation == FetchIsolation.LOG_END:
            end = lg.log_end_offset
        elif params.isolation == FetchIsolation.TXN_COMMITTED:
            end = partition.last_stable_offset
        else:
            end = partition.high_watermark
        if p.fetch_offset < lg.log_start_offset or p.fetch_offset > lg.log_end_offset:
            return -1
        if end <= p.fetch_offset:
            return 0
        if params.is_from_follower and self._leader_throttles(partition, params):
            return 0  # what it may not send does not complete the wait
        try:
            return lg.read(p.fetch_offset, p.max_bytes, end, True).size
        except KafkaError:
            return -1  # its directory failed, or it was deleted: answer now


def _of_another_topic(partition: Partition, topic_id: UUID | None) -> bool:
    """Is `partition` (as this broker holds it) of another topic than `topic_id`?"""
    held = partition.log.topic_id if partition.log is not None else None
    held = held or partition.topic_id
    return topic_id is not None and held is not None and held != topic_id
