"""Group coordinator: where a group's committed offsets live.

A group belongs to partition abs(hashCode(group id)) % offsets.topic.num.partitions
of __consumer_offsets (Java's String.hashCode); the leader of that partition is the
group's coordinator. Committed offsets are records in that partition, written with
acks=all through the ordinary log, and the in-memory view is rebuilt from the
partition whenever this broker becomes its leader.

This first part serves offsets for consumers that assign partitions themselves
(generation -1); membership (JoinGroup/SyncGroup/Heartbeat) comes on top of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from moldau.clock import Clock
from moldau.coordinator.records import (
    GroupMetadataKey,
    OffsetAndMetadata,
    OffsetKey,
    decode_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
)
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch, iter_records
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

CONSUMER_OFFSETS = "__consumer_offsets"
# How many batches of the offsets log are read before yielding to other work.
_LOAD_BATCHES_PER_STEP = 500


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


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        clock: Clock,
        num_partitions: int,
        max_metadata_size: int,
        commit_timeout_ms: int = 5000,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.clock = clock
        self.num_partitions = num_partitions
        self.max_metadata_size = max_metadata_size
        self.commit_timeout_ms = commit_timeout_ms
        # group -> partition -> committed offset
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        self._tasks = TaskOwner("group-coordinator")
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    async def close(self) -> None:
        await self._tasks.close()

    def partition_for(self, group_id: str) -> int:
        return partition_for_group(group_id, self.num_partitions)

    # -- ownership -----------------------------------------------------------------------

    def _on_leadership_change(self, tp: TopicPartition, is_leader: bool) -> None:
        if tp.topic != CONSUMER_OFFSETS:
            return
        if is_leader:
            self.owned.add(tp.partition)
            self.loading.add(tp.partition)
            self._tasks.spawn(self._load(tp.partition), f"load-{tp.partition}")
        else:
            self.owned.discard(tp.partition)
            self.loading.discard(tp.partition)
            for group in [g for g in self.offsets if self.partition_for(g) == tp.partition]:
                del self.offsets[group]

    async def _load(self, partition: int) -> None:
        """Rebuild the groups of one offsets partition from its log."""
        tp = TopicPartition(CONSUMER_OFFSETS, partition)
        p = self.replica_manager.get_partition(tp)
        if p is None or p.log is None:
            self.loading.discard(partition)
            return
        lg = p.log
        position = lg.log_start_offset
        end = p.high_watermark
        loaded: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        while position < end:
            batches = lg.read_batches(position, end)[:_LOAD_BATCHES_PER_STEP]
            if not batches:
                break
            for batch in batches:
                for record in iter_records(batch):
                    position = record.offset + 1
                    if record.key is None:
                        continue
                    key = decode_key(record.key)
                    if isinstance(key, OffsetKey):
                        offsets = loaded.setdefault(key.group, {})
                        ktp = TopicPartition(key.topic, key.partition)
                        if record.value is None:
                            offsets.pop(ktp, None)
                        else:
                            offsets[ktp] = decode_offset_value(record.value)
                    elif isinstance(key, GroupMetadataKey):
                        pass  # group membership records: read by the membership layer
            await asyncio.sleep(0)
        if partition in self.owned:
            for group, offsets in loaded.items():
                if offsets:
                    self.offsets[group] = offsets
            self.loading.discard(partition)
            if loaded:
                log.info("loaded %d groups from %s", len(loaded), tp)

    def _check_coordinator(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # -- commits -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        error = self._check_coordinator(group_id)
        if error == ErrorCode.none and generation_id >= 0:
            # A commit from a group member; this broker does not run group
            # membership yet, so it knows no members.
            error = ErrorCode.unknown_member_id
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes | None, bytes | None]] = []
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self.clock.milliseconds()
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            if len(metadata.encode()) > self.max_metadata_size:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            value = OffsetAndMetadata(entry.offset, entry.leader_epoch, metadata, now)
            accepted[tp] = value
            records.append(
                (
                    encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition)),
                    encode_offset_value(value),
                )
            )
        if not records:
            return results
        batch = build_batch(records, timestamp=now)
        offsets_tp = TopicPartition(CONSUMER_OFFSETS, self.partition_for(group_id))
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def done(responses: Mapping[TopicPartition, object]) -> None:
            response = responses[offsets_tp]
            code = ErrorCode(getattr(response, "error_code", 0))
            if not future.done():
                future.set_result(code)

        self.replica_manager.append_records(
            -1, self.commit_timeout_ms, {offsets_tp: memoryview(batch)}, done
        )
        code = await future
        code = _commit_error(code)
        if code == ErrorCode.none:
            self.offsets.setdefault(group_id, {}).update(accepted)
        for tp in accepted:
            results[tp] = code
        return results

    # -- fetches -------------------------------------------------------------------------

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of `partitions` (every partition of the group if None)."""
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return error, {}
        committed = self.offsets.get(group_id, {})
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}


def _commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of append errors to what a committing client should see."""
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
