"""Record formats of __consumer_offsets, as Kafka's GroupMetadataManager writes them,
so that Kafka's tools can read ours.

Offset commit key (version 1): group, topic, partition.
Offset commit value (version 3): offset, leader epoch, metadata, commit timestamp.
A null value (tombstone) removes the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from moldau.protocol.wire import Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


def encode_offset_key(key: OffsetKey) -> bytes:
    w = Writer()
    w.int16(OFFSET_KEY_VERSION)
    w.string(key.group, False)
    w.string(key.topic, False)
    w.int32(key.partition)
    return bytes(w.buf)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    w = Writer()
    w.int16(3)
    w.int64(value.offset)
    w.int32(value.leader_epoch)
    w.string(value.metadata, False)
    w.int64(value.commit_timestamp_ms)
    return bytes(w.buf)


def decode_key(data: bytes) -> OffsetKey | GroupMetadataKey | None:
    """None for key versions this broker does not use (e.g. transactions)."""
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(False), r.string(False), r.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string(False))
    return None


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    r = Reader(data)
    version = r.int16()
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string(version >= 4)
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)
