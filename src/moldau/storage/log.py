"""A partition's log: an ordered list of segments, appended to at the end.

The append path looks only at the batch header: it validates it (see
`validate_batch`), assigns offsets by patching baseOffset and partitionLeaderEpoch,
applies LogAppendTime when configured (patching maxTimestamp and the CRC), and
writes the batch as parts with writev. Records are read only where a check needs
them (`_check_records`: a compacted topic's keys, timestamps the header cannot vouch
for) or the topic recompresses.

Threading contract: everything runs on the broker's event-loop thread, except
`flush`, which may run on a worker thread. A truncation on the event loop never
waits for such a flush: the segments it cuts off are renamed `.deleted` and their
files closed later, by `delete_expired_files` once no flush runs (as Kafka deletes
them asynchronously), so a concurrent fsync never meets a closed descriptor; and the
recovery point, which both move, is kept under a lock held only for bookkeeping,
never across I/O (Kafka's log lock, for this much).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import crc32c

from moldau.clock import Clock
from moldau.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from moldau.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    NO_TIMESTAMP,
    OFFSET_ATTRIBUTES,
    OFFSET_MAGIC,
    BatchHeader,
    ControlRecordType,
    RecordsDecompressionError,
    TimestampType,
    build_end_txn_marker,
    iter_records,
    read_end_txn_marker,
    recompress,
    record_stamps_and_keys,
    validate_batch,
    validate_replicated_batch,
)
from moldau.protocol.wire import Buffer, DecodeError
from moldau.storage.leader_epoch import CHECKPOINT_NAME, LeaderEpochCache
from moldau.storage.log_config import LogConfig
from moldau.storage.log_dir_failure import LogDirFailureChannel
from moldau.storage.log_recovery import complete_swaps, replay_producer_state
from moldau.storage.partition_metadata import PARTITION_METADATA, read_topic_id, write_topic_id
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
    snapshot_offsets,
)
from moldau.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileRecords,
    LogSegment,
    SegmentMark,
    segment_file_name,
)
from moldau.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

log = logging.getLogger(__name__)


class LogClosedError(UnknownTopicOrPartitionError):
    """The log was deleted, closed, or its directory failed: work on it stops. An
    I/O error it causes (a file renamed away, a descriptor closed) says nothing about
    the disk."""


_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_ATTRS = struct.Struct(">h")
_TS = struct.Struct(">q")
_MAX_RELATIVE_OFFSET = 2**31 - 1
_LONG_MAX = 2**63 - 1
# How many batch-end positions to remember, so that reads at the tail (the usual
# consumer and follower) find their start without scanning.
_BOUNDARY_CACHE = 4096

EMPTY = b""


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    records_count: int
    size: int
    # A retried batch of an idempotent producer: acknowledged, not appended again.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset: int
    records: FileRecords | bytes
    # The first batch is larger than the bytes allowed and was cut.
    first_entry_incomplete: bool = False

    @property
    def size(self) -> int:
        r = self.records
        return len(r) if isinstance(r, bytes) else r.size


def should_roll(
    segment: LogSegment,
    config: LogConfig,
    batch_size: int,
    batch_max_timestamp: int,
    largest_offset: int,
    now_ms: int,
) -> bool:
    """Kafka's roll predicate: size, age (by record timestamps when it has them),
    a full index, or an offset that no longer fits the index's int32."""
    if segment.size > config.segment_bytes - batch_size:
        return True
    if segment.size > 0:
        first_ts = segment.rolling_based_timestamp
        if first_ts is None:
            first_ts = _first_batch_timestamp(segment)
            segment.rolling_based_timestamp = first_ts
        waited = batch_max_timestamp - first_ts if first_ts >= 0 else now_ms - segment.created_ms
        if waited > config.segment_ms - config.segment_jitter_ms:
            return True
    return segment.is_full() or largest_offset - segment.base_offset > _MAX_RELATIVE_OFFSET


def _first_batch_timestamp(segment: LogSegment) -> int:
    data = segment.read_bytes(0, HEADER_SIZE)
    return BatchHeader.parse(data).max_timestamp if len(data) == HEADER_SIZE else -1


class Log:
    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        files: set[str],
        on_roll: Callable[[Log, int], None] | None = None,
        failure_channel: LogDirFailureChannel | None = None,
        recovered: frozenset[int] = frozenset(),
    ) -> None:
        """`files`: the names in `directory`, as `open` has just listed them;
        `recovered`: base offsets of the segments `open` recovered (their
        transaction indexes are rebuilt)."""
        self.dir = directory
        # The log directory this partition lives in: an I/O error takes all of it offline.
        self.log_dir = directory.parent
        self.failure_channel = failure_channel or LogDirFailureChannel()
        # Set by `retire`: no more I/O through this log (its files stay open until
        # `close_handlers`, so reads already handed out keep working).
        self.closed = False
        # A flush on a worker thread and closing the files never overlap.
        self._flush_lock = threading.Lock()
        # The recovery point and `_flush_ceiling`: a flush's worker thread and a
        # truncation on the event loop both move them. Never held across I/O.
        self._lock = threading.Lock()
        # While a flush runs: its target, lowered to the log end each truncation
        # leaves meanwhile. Records appended after a truncation may have missed the
        # fsync, so the flush may only claim what lies below every such cut.
        self._flush_ceiling: int | None = None
        self.tp = tp
        # The id of the topic this log belongs to (partition.metadata); None until
        # the first LeaderAndIsr names it. A new id is written with the next
        # checkpoint (or close), off the request path: one more file per new log
        # cost half again the time of creating it.
        self.topic_id: UUID | None = (
            read_topic_id(directory) if PARTITION_METADATA in files else None
        )
        self.topic_id_written = self.topic_id is not None
        self.config = config
        self.clock = clock
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.on_roll = on_roll
        self.leader_epoch_cache = LeaderEpochCache(directory, exists=CHECKPOINT_NAME in files)
        self._leo = segments[-1].next_offset()
        self._boundaries: OrderedDict[int, tuple[LogSegment, int]] = OrderedDict()
        self._unflushed_messages = 0
        self.last_flush_ms = clock.milliseconds()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self.leader_epoch_cache.truncate_from_end(self._leo)
        self.producer_state = ProducerStateManager(directory)
        self._rebuild_producer_state(snapshot_offsets(files), recovered)

    def _rebuild_producer_state(
        self, snapshots: list[int] | None = None, recovered: frozenset[int] = frozenset()
    ) -> None:
        """From the newest snapshot at or below the log end (`snapshots`: their
        offsets, if known), plus the batch headers after it. With `recovered`
        segments, from one at or below the first of them, whose transaction indexes
        are rewritten on the way (Kafka's recoverSegment)."""
        ps = self.producer_state
        ps.load_latest_snapshot(min(recovered, default=self._leo), snapshots, self._leo)
        start = max(ps.map_end_offset, self.log_start_offset)
        ps.map_end_offset = start
        replay_producer_state(ps, self.segments[self._segment_for(start) :], start, recovered)
        ps.map_end_offset = self._leo

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        on_roll: Callable[[Log, int], None] | None = None,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> Log:
        """Open (or create) the log in `directory`, recovering what an unclean
        shutdown may have left: torn or corrupt batches after the recovery point are
        cut, and their indexes rebuilt."""
        # One listing of the directory serves every check below: at start-up this
        # runs once per partition, and a stat or an open per file adds up.
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            directory.mkdir(parents=True)
            names = []
        swapped = complete_swaps(directory, names)
        if swapped:
            names = os.listdir(directory)
        bases: list[int] = []
        kept: set[str] = set()
        for name in names:
            if name.endswith((DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX, SWAP_SUFFIX)):
                os.unlink(directory / name)
                continue
            kept.add(name)
            if name.endswith(LOG_SUFFIX):
                bases.append(int(name[: -len(LOG_SUFFIX)]))
        for name in list(kept):
            # An index without its log is left over from a deletion: remove it.
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                if name.endswith(suffix) and name[: -len(suffix)] + LOG_SUFFIX not in kept:
                    os.unlink(directory / name)
                    kept.discard(name)
        now = clock.milliseconds()

        def segment(base: int) -> LogSegment:
            return LogSegment(
                directory,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                created_ms=now,
                existing=kept,
            )

        segments = [segment(b) for b in sorted(bases)]
        # A segment large enough to have index entries and without an index file
        # lost it: rebuilt, as Kafka does. (A smaller one never wrote its file.)
        unindexed = {
            seg.base_offset
            for seg in segments
            if seg.size > config.index_interval_bytes
            and segment_file_name(seg.base_offset, INDEX_SUFFIX) not in kept
        }
        recovered: list[LogSegment] = []
        for i, seg in enumerate(segments):
            needs_recovery = (
                seg.base_offset in swapped
                or seg.base_offset in unindexed
                or (
                    not had_clean_shutdown
                    and (i + 1 == len(segments) or segments[i + 1].base_offset > recovery_point)
                )
            )
            # The indexes of a segment that is not recovered are trusted, unread (as
            # Kafka since KAFKA-7283): after a clean shutdown they were flushed with
            # their log, and after a crash every segment past the recovery point is
            # recovered, its indexes rebuilt.
            if needs_recovery:
                recovered.append(seg)
            if needs_recovery and seg.recover():
                # Everything after a cut is unreachable: drop the later segments.
                for later in segments[i + 1 :]:
                    later.delete_files()
                del segments[i + 1 :]
                break
        if not segments:
            segments = [segment(log_start_offset)]
        opened = cls(
            directory,
            tp,
            config,
            clock,
            segments,
            max(log_start_offset, segments[0].base_offset),
            recovery_point,
            kept,
            on_roll,
            failure_channel,
            frozenset(seg.base_offset for seg in recovered if seg in segments),
        )
        # The epochs of the batches re-read: what the unsynced checkpoint may lack.
        for seg in recovered:
            if seg in opened.segments:
                for header in seg.headers_from(0):
                    opened.leader_epoch_cache.assign(
                        header.partition_leader_epoch, header.base_offset
                    )
        # They stay in memory until the next flush or close writes them, as a new
        # epoch's do: a crash before then re-reads their batches.
        # min(checkpoint, log end), as Kafka's LogLoader, after a recovery too: the
        # recovered records may be in the page cache only (the process died, not the
        # machine), and a recovery point moved past them, then checkpointed, would
        # skip them at the next start if an OS crash lost them meanwhile.
        opened.recovery_point = min(max(recovery_point, 0), opened.log_end_offset)
        return opened

    def assign_topic_id(self, topic_id: UUID) -> None:
        """Name the topic this log belongs to (once: it never changes); the file is
        written by `write_topic_id`."""
        self.topic_id = topic_id
        self.topic_id_written = False

    def write_topic_id(self) -> None:
        """Write partition.metadata if the topic id is not on disk yet (from any
        thread). A crash before it lets the next LeaderAndIsr name the id again."""
        topic_id = self.topic_id
        if topic_id is None or self.topic_id_written or self.closed:
            return
        with self._io("topic id of"):
            write_topic_id(self.dir, topic_id)
        self.topic_id_written = True

    def write_leader_epochs(self) -> None:
        """Write the leader-epoch checkpoint if it changed (from a worker thread:
        it fsyncs). Not once the log is closed: its directory may be going."""
        with self._flush_lock:
            if self.closed:
                return
            with self._io("leader epoch checkpoint of"):
                self.leader_epoch_cache.flush()

    @contextlib.contextmanager
    def _io(self, action: str) -> Iterator[None]:
        """Storage I/O of this log: refused while its directory is offline, and an
        OSError takes the directory offline and becomes KafkaStorageError."""
        self._check_open()
        try:
            yield
        except OSError as e:
            raise self._storage_error(f"{action} {self.tp}", e) from e

    def _check_open(self) -> None:
        if self.closed:
            raise LogClosedError(f"the log of {self.tp} is closed")
        self.failure_channel.check(self.log_dir)

    def _storage_error(self, action: str, error: OSError) -> Exception:
        if self.closed:  # retired while this ran: not the disk's doing
            return LogClosedError(f"the log of {self.tp} was closed during {action}")
        return self.failure_channel.fail(self.log_dir, action, error)

    def retire(self) -> None:
        """Stop all I/O through this log (it is being deleted, or its directory
        failed); the files stay open until `close_handlers`."""
        self.closed = True

    # -- offsets -------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_for(self, offset: int) -> int:
        """Index in `segments` of the segment that would hold `offset`."""
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def segment_base_for(self, offset: int) -> int:
        """Base offset of the segment that holds (or would hold) `offset`."""
        return self.segments[self._segment_for(offset)].base_offset

    def _remember_boundary(self, offset: int, segment: LogSegment, position: int) -> None:
        self._boundaries[offset] = (segment, position)
        if len(self._boundaries) > _BOUNDARY_CACHE:
            self._boundaries.popitem(last=False)

    # -- append --------------------------------------------------------------------------

    def append_as_leader(
        self,
        batch: memoryview,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate one batch from a producer (or, `origin` COORDINATOR, one the
        broker's coordinators write: sequences unchecked), assign its offsets and
        append it. `verification_guard`: see ProducerStateManager.check."""
        size = len(batch)
        if size > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes {self.config.max_message_bytes}"
            )
        if size > self.config.segment_bytes:
            raise RecordListTooLargeError(f"batch of {size} bytes exceeds segment.bytes")
        header = validate_batch(batch)
        now = self.clock.milliseconds()
        codec = self.config.compression
        recompressed = codec is not None and codec != header.compression
        try:
            self._check_records(batch, header, now)
            if codec is not None and recompressed:
                # Kafka recompresses to the topic's codec: the one append path that
                # decodes records, and only when a topic asks for it.
                try:
                    batch = memoryview(recompress(batch, codec, self.config.compression_level))
                except DecodeError as e:
                    raise InvalidRecordError(f"records of the batch cannot be read: {e}") from e
        except RecordsDecompressionError as e:
            # Kafka's LogValidator fails there with a bare KafkaException, which its
            # ReplicaManager answers UNKNOWN_SERVER_ERROR: a producer gives the batch
            # up at once, where CORRUPT_MESSAGE (retriable) had it retried until its
            # delivery timeout.
            raise UnknownServerError(str(e)) from e
        if recompressed:
            size = len(batch)
            header = BatchHeader.parse(batch)
            if size > self.config.max_message_bytes:
                raise MessageTooLargeError(
                    f"recompressed batch of {size} bytes exceeds max.message.bytes"
                )
        if header.producer_id >= 0:
            duplicate = self.producer_state.check(header, origin, verification_guard)
            if duplicate is not None:
                # Answered as the first append was: its offsets and, on a
                # LogAppendTime topic, the broker's time it was written with.
                log_append_time = (
                    duplicate.timestamp
                    if self.config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
                    else -1
                )
                return LogAppendInfo(
                    duplicate.first_offset, duplicate.last_offset, duplicate.timestamp,
                    duplicate.last_offset, log_append_time, self.log_start_offset,
                    header.records_count, size, duplicate=True,
                )  # fmt: skip
        return self._append_at_end(batch, header, leader_epoch, now)

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """KIP-890: SENTINEL if the producer's transaction is already open here (no
        verification needed), else the guard its verified write must carry (Kafka's
        maybeStartTransactionVerification)."""
        ps = self.producer_state
        if ps.has_ongoing_transaction(producer_id, epoch):
            return VerificationGuard.SENTINEL
        return ps.maybe_create_verification_guard(
            producer_id, sequence, epoch, self.clock.milliseconds()
        )

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
    ) -> LogAppendInfo:
        """Write the marker that commits or aborts the producer's transaction here
        (Kafka's appendAsLeader with origin COORDINATOR). A marker of an older
        producer epoch is INVALID_PRODUCER_EPOCH, one from an older coordinator
        TRANSACTION_COORDINATOR_FENCED."""
        self._check_open()
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = self.clock.milliseconds()
        batch = memoryview(
            build_end_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
        )
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        return self._append_at_end(
            batch, BatchHeader.parse(batch), leader_epoch, now, (kind, coordinator_epoch)
        )

    def _append_at_end(
        self,
        batch: memoryview,
        header: BatchHeader,
        leader_epoch: int,
        now: int,
        marker: tuple[ControlRecordType, int] | None = None,
    ) -> LogAppendInfo:
        """A leader's append of a validated batch: its offsets assigned at the log end."""
        size = len(batch)
        first = self._leo
        last = first + header.last_offset_delta
        prefix = _PREFIX.pack(first, header.batch_length, leader_epoch, header.magic)
        if self.config.message_timestamp_type == TimestampType.LOG_APPEND_TIME:
            parts = _with_log_append_time(prefix, batch, header.attributes, now)
            max_ts = now
            append_time = now
        else:
            parts = [prefix, batch[OFFSET_MAGIC + 1 :]]
            max_ts = header.max_timestamp
            append_time = -1
        self._append(parts, size, header, first, last, max_ts, leader_epoch, now, marker)
        return LogAppendInfo(
            first, last, max_ts, last, append_time, self.log_start_offset,
            header.records_count, size,
        )  # fmt: skip

    def append_as_follower(self, batch: memoryview) -> LogAppendInfo:
        """Append a batch copied from the leader, offsets and epoch as they are."""
        header = validate_replicated_batch(batch)
        if header.base_offset < self._leo:
            raise CorruptMessageError(
                f"batch at {header.base_offset} is below the log end offset {self._leo}"
            )
        now = self.clock.milliseconds()
        size = len(batch)
        # A marker ends its transaction here as on the leader: a follower that
        # becomes leader serves the same last stable offset and aborted list.
        marker = (
            read_end_txn_marker(batch) if header.is_control and header.producer_id >= 0 else None
        )
        self._append(
            [batch], size, header, header.base_offset, header.last_offset,
            header.max_timestamp, header.partition_leader_epoch, now, marker,
        )  # fmt: skip
        return LogAppendInfo(
            header.base_offset, header.last_offset, header.max_timestamp, header.last_offset,
            -1, self.log_start_offset, header.records_count, size,
        )  # fmt: skip

    def _append(
        self,
        parts: Sequence[Buffer],
        size: int,
        header: BatchHeader,
        first: int,
        last: int,
        max_ts: int,
        epoch: int,
        now: int,
        marker: tuple[ControlRecordType, int] | None = None,
    ) -> None:
        """Write one batch at the log end, all or nothing: if a write fails (the log,
        an index, the epoch checkpoint, an fsync), the log is left as it was, in
        memory and on disk, and its directory goes offline. `marker`: (type,
        coordinator epoch) of a transaction marker."""
        self._check_open()
        flush = self._unflushed_messages + header.records_count >= self.config.flush_messages
        try:
            segment = self._maybe_roll(size, max_ts, last, now)
            mark = segment.mark()
            try:
                position = segment.append(last, max_ts, last, parts, size)
                if flush:
                    self._fsync_segments(last + 1)
                self.leader_epoch_cache.assign(epoch, first)
            except OSError:
                self._undo_append(segment, mark, first)
                raise
        except OSError as e:
            raise self._storage_error(f"append to {self.tp}", e) from e
        self._leo = last + 1
        self._remember_boundary(self._leo, segment, position + size)
        completed = self.producer_state.update(header, first, last, max_ts, marker)
        if completed is not None:
            self._complete_txn(segment, completed)
        self._unflushed_messages += header.records_count
        if flush:
            self._flushed(last + 1)

    def _complete_txn(self, segment: LogSegment, completed: CompletedTxn) -> None:
        """A marker in `segment` ended `completed`: an abort goes to the segment's
        transaction index (Kafka's updateTxnIndex), with the LSO it leaves."""
        ps = self.producer_state
        try:
            if completed.is_aborted:
                lso = ps.last_stable_offset(completed)
                segment.update_txn_index(
                    AbortedTxn(completed.producer_id, completed.first_offset,
                               completed.last_offset, lso)
                )  # fmt: skip
        except OSError as e:
            # The marker is written: the index is rebuilt when the log is recovered.
            raise self._storage_error(f"transaction index of {self.tp}", e) from e
        finally:
            ps.complete_txn(completed)

    def _undo_append(self, segment: LogSegment, mark: SegmentMark, first: int) -> None:
        try:
            segment.rollback(mark, first)
        except OSError as e:
            # The directory goes offline for the first error; recovery on the next
            # start cuts whatever could not be cut now.
            log.warning("%s: could not cut a failed append: %s", self.tp, e)

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader epoch starts at `start_offset` (checkpointed with the next
        flush)."""
        self._check_open()
        self.leader_epoch_cache.assign(epoch, start_offset)

    def _check_records(self, batch: memoryview, header: BatchHeader, now: int) -> None:
        """Kafka's checks of each record of a producer's batch (LogValidator): a
        compacted topic's records need a key; a CreateTime topic's timestamps lie
        within message.timestamp.before/after.max.ms of the broker's clock; a producer
        never sets LogAppendTime. A refused batch names each bad record (KIP-467).

        The header answers most batches: records are read only on a compacted topic,
        when the header's timestamps are out of range, or when before.max.ms is set
        and the batch has several records (its first record's timestamp, the base,
        need not be its oldest)."""
        config = self.config
        if not config.compact and not header.attributes & ATTR_TIMESTAMP_TYPE:
            # The usual batch, answered here: only its timestamps may be refused, only
            # on a CreateTime topic with a window (Kafka's long arithmetic never refuses
            # one without), and only if the header says so or cannot vouch for them.
            before = config.message_timestamp_before_max_ms
            after = config.message_timestamp_after_max_ms
            if (
                config.message_timestamp_type != TimestampType.CREATE_TIME
                or (before == _LONG_MAX and after == _LONG_MAX)
                or not (
                    (before < _LONG_MAX and header.records_count > 1)
                    or now - min(header.base_timestamp, header.max_timestamp) > before
                    or header.max_timestamp - now > after
                )
            ):
                return
        self._check_each_record(batch, header, now)

    def _check_each_record(self, batch: memoryview, header: BatchHeader, now: int) -> None:
        config = self.config
        create_time = config.message_timestamp_type == TimestampType.CREATE_TIME
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        log_append_batch = bool(header.attributes & ATTR_TIMESTAMP_TYPE)

        def timestamp_error(ts: int) -> str | None:
            if create_time and ts != NO_TIMESTAMP:
                if now - ts > before:
                    return (
                        f"timestamp {ts} is more than message.timestamp.before.max.ms={before}"
                        f" before the broker's time {now} ({self.tp})"
                    )
                if ts - now > after:
                    return (
                        f"timestamp {ts} is more than message.timestamp.after.max.ms={after}"
                        f" after the broker's time {now} ({self.tp})"
                    )
            elif log_append_batch:
                return f"a producer may not set LogAppendTime on its records ({self.tp})"
            return None

        if log_append_batch:
            # Every record of such a batch has the batch's max timestamp.
            shared = timestamp_error(header.max_timestamp)
            timestamps_suspect = False
        else:
            shared = None
            timestamps_suspect = create_time and (
                (before < _LONG_MAX and header.records_count > 1)
                or now - min(header.base_timestamp, header.max_timestamp) > before
                or header.max_timestamp - now > after
            )
        errors: list[tuple[int, str | None]] = []
        # Kafka answers INVALID_TIMESTAMP if any record's timestamp is refused.
        timestamp_refused = False
        if config.compact or timestamps_suspect:
            for index, (ts, key_length) in enumerate(record_stamps_and_keys(batch)):
                if config.compact and key_length < 0:
                    errors.append((index, f"a record without a key in compacted {self.tp}"))
                    continue
                why = shared or timestamp_error(ts)
                if why is not None:
                    errors.append((index, why))
                    timestamp_refused = True
        elif shared is not None:
            errors = [(index, shared) for index in range(header.records_count)]
            timestamp_refused = True
        if not errors:
            return
        shown = "; ".join(f"record {i}: {why}" for i, why in errors[:3])
        if timestamp_refused:
            raise InvalidTimestampError(
                f"{len(errors)} record(s) of the batch refused for their timestamp ({shown})",
                errors,
            )
        raise InvalidRecordError(f"{len(errors)} record(s) of the batch refused ({shown})", errors)

    def _maybe_roll(self, size: int, max_ts: int, last_offset: int, now: int) -> LogSegment:
        segment = self.segments[-1]
        if should_roll(segment, self.config, size, max_ts, last_offset, now):
            return self._roll()
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        with self._io("roll of"):
            return self._roll()

    def _roll(self) -> LogSegment:
        old = self.segments[-1]
        if old.size == 0:
            return old
        old.on_become_inactive()
        new = LogSegment(
            self.dir,
            self._leo,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=self.clock.milliseconds(),
        )
        try:
            self.producer_state.take_snapshot()
        except OSError:
            # Not part of the log yet; an empty leftover file would be harmless.
            new.close_handlers()
            with contextlib.suppress(OSError):
                new.delete_files()
            raise
        self.segments.append(new)
        if self.on_roll is not None:
            self.on_roll(self, new.base_offset)
        return new

    # -- read ----------------------------------------------------------------------------

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int, min_one_message: bool
    ) -> FetchDataInfo:
        """Batches from the one holding `start_offset`, ending before `max_offset`
        (the high watermark for consumers), at most `max_bytes` unless
        `min_one_message` and the first batch is larger. Only whole batches, unless
        not even the first fits (then it is cut short, as Kafka does: the client
        learns that the partition has a batch too large for its fetch size)."""
        if start_offset < self.log_start_offset or start_offset > self._leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self.log_start_offset}, {self._leo}]"
                f" of {self.tp}"
            )
        if start_offset >= max_offset:
            return FetchDataInfo(start_offset, EMPTY)
        with self._io("read of"):
            return self._read(start_offset, max_bytes, max_offset, min_one_message)

    def _read(
        self, start_offset: int, max_bytes: int, max_offset: int, min_one_message: bool
    ) -> FetchDataInfo:
        max_end = self._position_of(max_offset)
        i = self._segment_for(start_offset)
        while i < len(self.segments):
            segment = self.segments[i]
            cached = self._boundaries.get(start_offset)
            if cached is not None and cached[0] is segment and cached[1] < segment.size:
                position = cached[1]
                first = segment.translate_offset(start_offset, position)
            else:
                first = segment.translate_offset(start_offset)
            if first is not None:
                limit = segment.size
                if max_end is not None and max_end[0] is segment:
                    limit = max_end[1]
                if first.position >= limit:
                    return FetchDataInfo(start_offset, EMPTY)
                allowed = max(max_bytes, first.size) if min_one_message else max_bytes
                if allowed <= 0:
                    return FetchDataInfo(start_offset, EMPTY)
                size = min(limit - first.position, allowed)
                if size < limit - first.position:
                    # Cut by the byte limit: end with the last whole batch (Kafka
                    # sends the bytes up to the limit, and clients throw the partial
                    # batch away: up to half of a response to a lone consumer).
                    whole = segment.whole_batches_end(first.position, first.position + size)
                    if whole > first.position:
                        size = whole - first.position
                return FetchDataInfo(
                    start_offset, segment.slice(first.position, size), allowed < first.size
                )
            if max_end is not None and max_end[0] is segment:
                break
            i += 1
        return FetchDataInfo(start_offset, EMPTY)

    def _position_of(self, offset: int) -> tuple[LogSegment, int] | None:
        """(segment, position) where the batch starting at `offset` begins; None if
        `offset` is the log end."""
        if offset >= self._leo:
            return None
        cached = self._boundaries.get(offset)
        if cached is not None:
            return cached
        segment = self.segments[self._segment_for(offset)]
        batch = segment.translate_offset(offset)
        if batch is None:
            return segment, segment.size
        if batch.base_offset < offset:
            # `offset` falls inside a batch: that batch is not yet readable.
            return segment, batch.position
        return segment, batch.position

    def read_batches(
        self, start_offset: int, max_offset: int, max_batches: int | None = None
    ) -> list[bytes]:
        """Whole batches in [start_offset, max_offset), at most `max_batches`, as bytes
        (for features that need record contents; not for the fetch path)."""
        with self._io("read of"):
            out: list[bytes] = []
            for segment in self.segments[self._segment_for(start_offset) :]:
                if segment.base_offset >= max_offset:
                    break
                _, position = segment.offset_index.lookup(start_offset)
                for batch in segment.batches_from(position):
                    if batch.last_offset < start_offset:
                        continue
                    if batch.base_offset >= max_offset or len(out) == max_batches:
                        return out
                    out.append(segment.read_bytes(batch.position, batch.size))
            return out

    # -- transactions --------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided, or decided
        but whose marker is not below the high watermark; never below the log start
        (Kafka's firstUnstableOffset). None if there is none."""
        first = self.producer_state.first_unstable_offset()
        return None if first is None else max(first, self.log_start_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions with a marker at or after `start_offset` and data
        below `upper_bound`, from the transaction indexes of the segment holding
        `start_offset` and those after it, until one says no later one can start
        below `upper_bound` (Kafka's collectAbortedTransactions)."""
        with self._io("transaction index read of"):
            out: list[AbortedTxn] = []
            for segment in self.segments[self._segment_for(start_offset) :]:
                found, complete = segment.collect_aborted_txns(start_offset, upper_bound)
                out.extend(found)
                if complete:
                    break
            return out

    # -- timestamps ----------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `timestamp`."""
        with self._io("timestamp lookup in"):
            for segment in self.segments:
                if segment.size and segment.max_timestamp_so_far >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka 0.8's offsets "before" a time): each segment's first
        offset paired with its file's last-modified time, then the log end offset paired
        with now if the active segment holds data; up to `max_num_offsets` of them,
        latest first, from the last whose time is at or before `timestamp` (-1: the end,
        -2: the start)."""
        with self._io("offset lookup in"):
            points = [
                (max(s.base_offset, self.log_start_offset), s.last_modified_ms())
                for s in self.segments
            ]
            if self.segments[-1].size > 0:
                points.append((self.log_end_offset, self.clock.milliseconds()))
        if timestamp == -1:
            start = len(points) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_num_offsets, start + 1))
        return sorted((points[start - i][0] for i in range(count)), reverse=True)

    def max_timestamp_and_offset(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp."""
        with self._io("timestamp lookup in"):
            best: LogSegment | None = None
            for segment in self.segments:
                if segment.size and (
                    best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
                ):
                    best = segment
            if best is None or best.max_timestamp_so_far < 0:
                return None
            target = best.max_timestamp_so_far
            batch = best.translate_offset(best.offset_of_max_timestamp)
            if batch is not None:
                for record in iter_records(best.read_bytes(batch.position, batch.size)):
                    if record.timestamp == target:
                        return target, record.offset
            return target, best.offset_of_max_timestamp

    # -- retention -----------------------------------------------------------------------

    def delete_old_segments(self, high_watermark: int) -> int:
        """Apply retention (log start offset, retention.bytes, retention.ms) to
        segments wholly below the high watermark. Returns the number deleted."""
        with self._io("retention of"):
            deleted = self._delete_segments_while(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                high_watermark,
            )
            if not self.config.delete:
                return deleted
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes() - self.config.retention_bytes

                def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - seg.size < 0:
                        return False
                    excess -= seg.size
                    return True

                deleted += self._delete_segments_while(over_size, high_watermark)
            if self.config.retention_ms >= 0:
                now = self.clock.milliseconds()
                deleted += self._delete_segments_while(
                    lambda seg, nxt: now - seg.largest_timestamp() > self.config.retention_ms,
                    high_watermark,
                )
            return deleted

    def _delete_segments_while(
        self,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        high_watermark: int,
    ) -> int:
        doomed: list[LogSegment] = []
        for i, seg in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if seg.size == 0 and nxt is None:
                break
            if upper > high_watermark or not predicate(seg, nxt):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            # Never leave a log without an active segment.
            self.roll()
        for seg in doomed:
            self.segments.remove(seg)
            self._forget(seg)
            seg.mark_deleted()
            self._pending_deletes.append(
                (self.clock.milliseconds() + self.config.file_delete_delay_ms, seg)
            )
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.delete_snapshots_before(self.log_start_offset)
        return len(doomed)

    def _forget(self, segment: LogSegment) -> None:
        for off in [o for o, (s, _) in self._boundaries.items() if s is segment]:
            del self._boundaries[off]

    def delete_expired_files(self, now_ms: int) -> None:
        """Remove the files of deleted segments once file.delete.delay.ms has passed,
        and no flush is under way (it may be fsyncing them: they wait for the next
        call, rather than the event loop for the flush)."""
        if not self._flush_lock.acquire(blocking=False):
            return
        try:
            with self._io("file deletion of"):
                keep = []
                for due, seg in self._pending_deletes:
                    if due <= now_ms:
                        seg.delete_files()
                    else:
                        keep.append((due, seg))
                self._pending_deletes = keep
        finally:
            self._flush_lock.release()

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        with self._io("log start offset of"):
            if offset > self.log_start_offset:
                self.log_start_offset = min(offset, self._leo)
                self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # -- compaction ----------------------------------------------------------------------

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty `.cleaned` segment the log cleaner writes a replacement into."""
        with self._io("cleaning of"):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                (self.dir / f"{base_offset:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
            return LogSegment(
                self.dir,
                base_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_bytes=self.config.segment_index_bytes,
                created_ms=self.clock.milliseconds(),
                file_suffix=CLEANED_SUFFIX,
            )

    def replace_segments(self, olds: list[LogSegment], new: LogSegment) -> bool:
        """Put a cleaned segment in place of the adjacent segments `olds`, crash-safely:
        the new files go .cleaned -> .swap, the old ones to .deleted, then .swap ->
        final (a restart completes a swap it finds, deleting what lies in its offset
        range). False if `olds` are no longer all part of the log, side by side."""
        with self._io("segment swap of"):
            at = next((i for i, s in enumerate(self.segments) if s is olds[0]), 0)
            window = self.segments[at : at + len(olds)]
            if (
                len(window) != len(olds)
                or any(s is not o for s, o in zip(window, olds, strict=True))
                or olds[-1] is self.segments[-1]
            ):
                new.delete_files()
                return False
            new.on_become_inactive()
            new.flush()
            # Keep the originals' age: retention and the cleaner's delete horizon use it.
            mtime_ns = olds[-1].last_modified_ms() * 1_000_000
            os.utime(new.log_path, ns=(mtime_ns, mtime_ns))
            new.change_file_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
            for old in olds:
                old.mark_deleted()
            new.change_file_suffix(SWAP_SUFFIX, "")
            self.segments[at : at + len(olds)] = [new]
            due = self.clock.milliseconds() + self.config.file_delete_delay_ms
            for old in olds:
                self._forget(old)
                self._pending_deletes.append((due, old))
            return True

    # -- truncation (replication) --------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after `offset` (at a batch boundary). True if
        anything was cut (the log end moved back), as Kafka's truncateTo."""
        with self._io("truncation of"):
            if offset >= self._leo:
                # Nothing to cut, but an epoch this broker started as leader and never
                # wrote to may be there: it must go, or a fetch from the new leader
                # would name it for ever (Kafka's truncateTo does the same).
                self.leader_epoch_cache.truncate_from_end(self._leo)
                return False
            if offset < self.segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self._boundaries.clear()
            cut = []
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                cut.append(self.segments.pop())
            self._delete_later(cut)
            self.segments[-1].truncate_to(offset)
            self._leo = self.segments[-1].next_offset()
            # The log start may have moved past the cut within the first segment (a
            # leader's, copied): it never stays above the log end (Kafka's truncateTo).
            self.log_start_offset = min(self.log_start_offset, self._leo)
            self._truncated()
            self.leader_epoch_cache.truncate_from_end(self._leo)
            self._rebuild_producer_state()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._io("truncation of"):
            self._boundaries.clear()
            # Renamed first: the new segment may take the base offset of an old one.
            self._delete_later(self.segments)
            self.segments = [
                LogSegment(
                    self.dir,
                    offset,
                    index_interval_bytes=self.config.index_interval_bytes,
                    max_index_bytes=self.config.segment_index_bytes,
                    created_ms=self.clock.milliseconds(),
                )
            ]
            self._leo = offset
            self.log_start_offset = offset
            self._truncated()
            self.leader_epoch_cache.clear()  # a history the leader does not share
            self.producer_state.delete_all_snapshots()
            self._rebuild_producer_state()

    def _delete_later(self, segments: list[LogSegment]) -> None:
        """Segments cut off by a truncation: renamed `.deleted` at once (a restart
        never loads them), their files closed and removed by `delete_expired_files`
        (Kafka's asynchronous delete): a flush on a worker thread may be fsyncing them."""
        due = self.clock.milliseconds() + self.config.file_delete_delay_ms
        for seg in segments:
            seg.mark_deleted()
            self._pending_deletes.append((due, seg))

    def _truncated(self) -> None:
        """The log end moved back: the recovery point may not stay above it (Kafka's
        updateLogEndOffset), nor may a flush under way claim more than is left."""
        with self._lock:
            self.recovery_point = min(self.recovery_point, self._leo)
            if self._flush_ceiling is not None:
                self._flush_ceiling = min(self._flush_ceiling, self._leo)

    # -- durability ----------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync the segments holding offsets below `up_to` (default: everything) and
        move the recovery point there, or to where a truncation meanwhile cut the
        log, if lower. Safe to call from a worker thread."""
        with self._flush_lock:
            if self.closed:
                return  # deleted or offline meanwhile: nothing to make durable
            with self._lock:
                target = self._leo if up_to is None else min(up_to, self._leo)
                if target <= self.recovery_point and up_to is not None:
                    return
                self._flush_ceiling = target
            try:
                with self._io("flush of"):
                    self._fsync_segments(target)
            finally:
                with self._lock:
                    flushed, self._flush_ceiling = self._flush_ceiling, None
            self._flushed(flushed)

    def _fsync_segments(self, target: int) -> None:
        for seg in list(self.segments):
            if not seg.closed and seg.base_offset < target:
                seg.flush()
        self.leader_epoch_cache.flush()

    def synced(self) -> None:
        """Everything written is on disk (the file system was synced): the recovery
        point moves to the log end."""
        self._flushed(self._leo)

    def _flushed(self, target: int) -> None:
        with self._lock:
            self.recovery_point = max(self.recovery_point, target)
        self._unflushed_messages = 0
        self.last_flush_ms = self.clock.milliseconds()

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for seg in self.segments:
            seg.index_interval_bytes = config.index_interval_bytes

    def close(self, sync: bool = True) -> None:
        """A clean close: the producer state snapshot and the time indexes' last
        entries are written, then the files closed. Without `sync` nothing is forced
        to disk: the caller syncs the whole file system, then calls `synced`."""
        with self._flush_lock, self._io("close of"):
            for _, seg in self._pending_deletes:
                seg.delete_files()
            self._pending_deletes = []
            self.write_topic_id()
            self.producer_state.take_snapshot(sync)
            self.leader_epoch_cache.flush(sync)
            for seg in self.segments:
                seg.close()
            self.closed = True

    def close_handlers(self) -> None:
        """Close the files without writing anything (a deleted log, one of an offline
        directory)."""
        with self._flush_lock:
            self.closed = True
            for _, seg in self._pending_deletes:
                seg.close_handlers()
            for seg in self.segments:
                seg.close_handlers()


def _with_log_append_time(
    prefix: bytes, batch: memoryview, attributes: int, now: int
) -> list[bytes | memoryview]:
    """The batch's parts with LogAppendTime set: the timestamp-type bit, maxTimestamp
    = now, and a CRC recomputed over the new header and the untouched records."""
    header = bytearray(batch[OFFSET_ATTRIBUTES:HEADER_SIZE])
    _ATTRS.pack_into(header, 0, attributes | ATTR_TIMESTAMP_TYPE)
    _TS.pack_into(header, 35 - OFFSET_ATTRIBUTES, now)
    body = batch[HEADER_SIZE:]
    crc = crc32c.crc32c(body, crc32c.crc32c(header))
    return [prefix, _CRC.pack(crc), bytes(header), body]


def remove_log_dir(directory: Path) -> None:
    """Delete a (renamed) partition directory and everything in it."""
    if not directory.exists():
        return
    for path in directory.iterdir():
        path.unlink()
    os.rmdir(directory)
