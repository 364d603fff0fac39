"""The log side of the group coordinator (Kafka's GroupMetadataManager): which
partition of __consumer_offsets holds a group, reading a partition's groups and
offsets back, writing group metadata, offsets and tombstones to it, and which
offsets have expired (offsets.retention.minutes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from moldau.clock import Clock
from moldau.coordinator.group import GroupMetadata, GroupState, TxnOffset
from moldau.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
)
from moldau.protocol.errors import ErrorCode
from moldau.protocol.produce import ProducePartitionResponse
from moldau.protocol.records import (
    BatchHeader,
    ControlRecordType,
    build_batch,
    iter_records,
    read_end_txn_marker,
)
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import AppendOrigin

CONSUMER_OFFSETS = "__consumer_offsets"
# How many batches of the offsets log are read before yielding to other work.
_LOAD_BATCHES_PER_STEP = 500

# group id -> its committed offsets; group id -> its metadata (None: deleted)
GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]
GroupValues = dict[str, GroupMetadataValue | None]


@dataclass
class LoadedGroups:
    """What a load read from one offsets partition."""

    offsets: GroupOffsets = field(default_factory=dict)
    # group -> partition -> log offset of the record of its committed offset
    positions: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)
    metadata: GroupValues = field(default_factory=dict)
    # group -> producer id -> offsets of a transaction whose end is not in the log yet
    pending_txn: dict[str, dict[int, dict[TopicPartition, TxnOffset]]] = field(default_factory=dict)

    def apply_txn_commit(self, group_id: str, entries: Mapping[TopicPartition, TxnOffset]) -> None:
        """A transaction's commit marker: its offsets replace those written before it."""
        offsets = self.offsets.setdefault(group_id, {})
        positions = self.positions.setdefault(group_id, {})
        for tp, entry in entries.items():
            if positions.get(tp, -1) < entry.position:
                offsets[tp] = entry.value
                positions[tp] = entry.position

    def group_ids(self) -> set[str]:
        return set(self.offsets) | set(self.metadata) | set(self.pending_txn)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: |n|, with Integer.MIN_VALUE mapped to 0."""
    return 0 if n == -(2**31) else abs(n)


def partition_for_group(group_id: str, num_partitions: int) -> int:
    return kafka_abs(java_string_hash(group_id)) % num_partitions


class GroupMetadataManager:
    def __init__(
        self,
        replica_manager: ReplicaManager,
        clock: Clock,
        num_partitions: int,
        commit_timeout_ms: int,
    ) -> None:
        self.replica_manager = replica_manager
        self.clock = clock
        self.num_partitions = num_partitions
        self.commit_timeout_ms = commit_timeout_ms

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.num_partitions)

    async def read_groups(self, partition: int) -> LoadedGroups:
        """What one offsets partition holds, up to its log end (Kafka's
        FetchIsolation.LOG_END): the last word on each group's offsets and metadata.
        Not up to the high watermark: a new leader's lags its log end until its
        followers fetch again, yet what lies between was acknowledged by the old
        leader (acks=all reached this replica), and a leader never cuts its own log.
        Offsets committed in a transaction count once its commit marker is read, and
        stay pending if its end is not in the log yet. Yields to other work every
        _LOAD_BATCHES_PER_STEP batches."""
        loaded = LoadedGroups()
        # producer id -> group -> partition -> its offset (of a transaction not ended)
        open_txns: dict[int, dict[str, dict[TopicPartition, TxnOffset]]] = {}
        p = self.replica_manager.get_partition(TopicPartition(CONSUMER_OFFSETS, partition))
        if p is None or p.log is None:
            return loaded
        lg = p.log
        position = lg.log_start_offset
        while position < lg.log_end_offset:
            batches = lg.read_batches(position, lg.log_end_offset, _LOAD_BATCHES_PER_STEP)
            if not batches:
                break
            for batch in batches:
                # The batch's offsets, not its last record's: the cleaner may have
                # removed the records at its end, and the next read must not start
                # inside it again (Kafka's currOffset = batch.nextOffset).
                header = BatchHeader.parse(batch)
                position = header.last_offset + 1
                if header.is_control:
                    # A transaction's end: its offsets become the groups' on commit.
                    ended = open_txns.pop(header.producer_id, {})
                    kind, _ = read_end_txn_marker(batch)
                    if kind == ControlRecordType.COMMIT:
                        for group_id, entries in ended.items():
                            loaded.apply_txn_commit(group_id, entries)
                    continue
                for record in iter_records(batch):
                    if record.key is None:
                        continue
                    key = decode_key(record.key)
                    if isinstance(key, OffsetKey):
                        ktp = TopicPartition(key.topic, key.partition)
                        if header.is_transactional:
                            if record.value is not None:
                                value = decode_offset_value(record.value)
                                by_group = open_txns.setdefault(header.producer_id, {})
                                by_group.setdefault(key.group, {})[ktp] = TxnOffset(
                                    value, record.offset
                                )
                            continue
                        group_offsets = loaded.offsets.setdefault(key.group, {})
                        if record.value is None:
                            group_offsets.pop(ktp, None)
                        else:
                            group_offsets[ktp] = decode_offset_value(record.value)
                            loaded.positions.setdefault(key.group, {})[ktp] = record.offset
                    elif isinstance(key, GroupMetadataKey):
                        loaded.metadata[key.group] = (
                            None if record.value is None else decode_group_value(record.value)
                        )
            await asyncio.sleep(0)
        for producer_id, by_group in open_txns.items():
            for group_id, entries in by_group.items():
                loaded.pending_txn.setdefault(group_id, {})[producer_id] = entries
        return loaded

    async def store_group(
        self,
        group: GroupMetadata,
        assignments: Mapping[str, bytes],
        on_written: Callable[[ErrorCode], None] | None = None,
    ) -> ErrorCode:
        protocol = group.protocol_name
        value = GroupMetadataValue(
            group.protocol_type or "",
            group.generation_id,
            protocol,
            group.leader_id,
            group.current_state_timestamp_ms,
            tuple(
                MemberRecord(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.rebalance_timeout_ms, m.session_timeout_ms,
                    m.metadata_for(protocol) if protocol else b"",
                    assignments.get(m.member_id, b""),
                )
                for m in group.members.values()
            ),
        )  # fmt: skip
        return await self.append(
            group.group_id,
            [(encode_group_key(group.group_id), encode_group_value(value))],
            on_written,
        )

    async def append(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        on_written: Callable[[ErrorCode], None] | None = None,
    ) -> ErrorCode:
        """Append to the group's offsets partition. `on_written` applies the result to
        the coordinator's state when the append completes, as Kafka's cache callback
        does: it runs even if the request that asked has gone (its client hung up and
        its task was cancelled), so the log and the state never disagree."""
        code, _ = await self.append_at(
            group_id, records, None if on_written is None else lambda c, _: on_written(c)
        )
        return code

    async def append_at(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        on_written: Callable[[ErrorCode, int], None] | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> tuple[ErrorCode, int]:
        """`append`, which also tells where the records went (their first offset,
        -1 if not written); with a producer id, as records of its transaction."""
        transactional = producer_id >= 0
        batch = build_batch(
            records,
            timestamp=self.clock.milliseconds(),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            # As Kafka writes them: sequence 0 every time (a coordinator's append has
            # its epoch checked, not its sequence).
            base_sequence=0 if transactional else -1,
            transactional=transactional,
        )
        tp = TopicPartition(CONSUMER_OFFSETS, self.partition_for(group_id))
        future: asyncio.Future[tuple[ErrorCode, int]] = asyncio.get_running_loop().create_future()

        def done(responses: Mapping[TopicPartition, ProducePartitionResponse]) -> None:
            response = responses[tp]
            code = commit_error(ErrorCode(response.error_code))
            position = response.base_offset if code == ErrorCode.none else -1
            if on_written is not None:
                on_written(code, position)
            if not future.done():
                future.set_result((code, position))

        self.replica_manager.append_records(
            -1,
            self.commit_timeout_ms,
            {tp: memoryview(batch)},
            done,
            origin=AppendOrigin.COORDINATOR,
        )
        return await future


def offset_tombstones(
    group_id: str, partitions: Iterable[TopicPartition]
) -> list[tuple[bytes, bytes | None]]:
    """Records that delete the group's committed offsets of these partitions."""
    return [
        (encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition)), None) for tp in partitions
    ]


def expired_offsets(group: GroupMetadata, now_ms: int, retention_ms: int) -> list[TopicPartition]:
    """The group's offsets expired as Kafka expires them: all of an empty consumer
    group's once it has been empty that long, a standalone consumer's by commit
    time, and a stable consumer group's for topics it no longer subscribes to. A
    partition with a commit pending is never expired (its tombstone would follow
    the commit in the log)."""
    offsets = {tp: o for tp, o in group.offsets.items() if tp not in group.pending_offset_commits}
    if group.protocol_type is not None and group.state == GroupState.EMPTY:
        base = group.current_state_timestamp_ms
        return [
            tp for tp, o in offsets.items()
            if now_ms - (base if base >= 0 else o.commit_timestamp_ms) >= retention_ms
        ]  # fmt: skip
    if group.protocol_type is None:
        return [tp for tp, o in offsets.items() if now_ms - o.commit_timestamp_ms >= retention_ms]
    if group.state == GroupState.STABLE:
        subscribed = group.subscribed_topics()
        if subscribed is not None:
            return [
                tp for tp, o in offsets.items()
                if tp.topic not in subscribed and now_ms - o.commit_timestamp_ms >= retention_ms
            ]  # fmt: skip
    return []


def commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of append errors to what a group client should see."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.invalid_fetch_size,
    ):
        return ErrorCode.invalid_commit_offset_size
    return code
