"""Hand-written Fetch response encoder (the hot path).

The response is a list of parts: bytes for the fields, and each partition's records
as whatever the storage layer handed over (bytes, a memoryview, or a file slice that
the network layer sends with sendfile). Nothing is copied to join them. Checked
byte-for-byte against kio in tests. Versions 0-12 by topic name, 13+ by topic id; v0-v3
carry no last stable offset and no aborted transactions, and v0 no throttle time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from moldau.protocol.wire import Writer, pack_i32, pack_i64


class FileSlice(Protocol):
    """A range of a file to send as is (see storage.FileRecords)."""

    @property
    def size(self) -> int: ...


Part = bytes | bytearray | memoryview | FileSlice


@dataclass(slots=True)
class FetchPartitionResult:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Part | None = None
    preferred_read_replica: int = -1
    # (epoch, end offset) for a follower that has diverged (tag 0, v12+).
    diverging_epoch: tuple[int, int] | None = None
    # (leader id, leader epoch) when this broker is not the leader (tag 1, v12+).
    current_leader: tuple[int, int] | None = None
    # (producer id, first offset) of each aborted transaction a read_committed
    # fetch must drop (v4+); None (null) for read_uncommitted.
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class FetchTopicResult:
    topic: str
    partitions: list[FetchPartitionResult] = field(default_factory=list)
    topic_id: UUID | None = None


def part_size(part: Part) -> int:
    if isinstance(part, bytes | bytearray | memoryview):
        return len(part)
    return part.size


def encode_fetch_response(
    version: int,
    topics: list[FetchTopicResult],
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[Part]:
    """The response body as parts (without the response header)."""
    flexible = version >= 12
    parts: list[Part] = []
    w = Writer()
    if version >= 1:
        w.int32(throttle_time_ms)
    if version >= 7:
        w.int16(error_code)
        w.int32(session_id)
    w.array_length(len(topics), flexible)
    for t in topics:
        if version >= 13:
            w.uuid(t.topic_id or UUID(int=0))
        else:
            w.string(t.topic, flexible)
        w.array_length(len(t.partitions), flexible)
        for p in t.partitions:
            w.int32(p.partition_index)
            w.int16(p.error_code)
            w.int64(p.high_watermark)
            if version >= 4:
                w.int64(p.last_stable_offset)
                if version >= 5:
                    w.int64(p.log_start_offset)
                aborted = p.aborted_transactions
                if aborted is None:
                    w.array_length(-1, flexible)
                else:
                    w.array_length(len(aborted), flexible)
                    for producer_id, first_offset in aborted:
                        w.int64(producer_id)
                        w.int64(first_offset)
                        if flexible:
                            w.empty_tagged_fields()
            if version >= 11:
                w.int32(p.preferred_read_replica)
            records = p.records
            if records is None:
                w.bytes_length(-1, flexible)
            else:
                size = part_size(records)
                w.bytes_length(size, flexible)
                if size:
                    parts.append(bytes(w.buf))
                    parts.append(records)
                    w = Writer()
            if flexible:
                _partition_tags(w, p)
        if flexible:
            w.empty_tagged_fields()
    if flexible:
        w.empty_tagged_fields()
    parts.append(bytes(w.buf))
    return parts


def _partition_tags(w: Writer, p: FetchPartitionResult) -> None:
    tags: list[tuple[int, bytes]] = []
    if p.diverging_epoch is not None:
        epoch, end_offset = p.diverging_epoch
        tags.append((0, pack_i32(epoch) + pack_i64(end_offset) + b"\x00"))
    if p.current_leader is not None:
        tags.append((1, pack_i32(p.current_leader[0]) + pack_i32(p.current_leader[1]) + b"\x00"))
    w.uvarint(len(tags))
    for tag, data in tags:
        w.uvarint(tag)
        w.uvarint(len(data))
        w.buf += data
