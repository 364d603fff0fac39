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


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


def encode_group_key(group: str) -> bytes:
    w = Writer()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group, False)
    return bytes(w.buf)


def encode_group_value(value: GroupMetadataValue) -> bytes:
    """GroupMetadataValue version 3."""
    w = Writer()
    w.int16(3)
    w.string(value.protocol_type, False)
    w.int32(value.generation)
    w.nullable_string(value.protocol, False)
    w.nullable_string(value.leader, False)
    w.int64(value.current_state_timestamp_ms)
    w.int32(len(value.members))
    for m in value.members:
        w.string(m.member_id, False)
        w.nullable_string(m.group_instance_id, False)
        w.string(m.client_id, False)
        w.string(m.client_host, False)
        w.int32(m.rebalance_timeout_ms)
        w.int32(m.session_timeout_ms)
        w.int32(len(m.subscription))
        w.buf += m.subscription
        w.int32(len(m.assignment))
        w.buf += m.assignment
    return bytes(w.buf)


def decode_group_value(data: bytes) -> GroupMetadataValue:
    """Versions 0-3 (4 is flexible and not written by this broker)."""
    r = Reader(data)
    version = r.int16()
    flexible = version >= 4
    protocol_type = r.string(flexible)
    generation = r.int32()
    protocol = r.nullable_string(flexible)
    leader = r.nullable_string(flexible)
    timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length(flexible)):
        member_id = r.string(flexible)
        instance = r.nullable_string(flexible) if version >= 3 else None
        client_id = r.string(flexible)
        client_host = r.string(flexible)
        rebalance = r.int32() if version >= 1 else 0
        session = r.int32()
        subscription = bytes(r.nullable_bytes(flexible) or b"")
        assignment = bytes(r.nullable_bytes(flexible) or b"")
        if flexible:
            r.skip_tagged_fields()
        members.append(
            MemberRecord(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance,
                session,
                subscription,
                assignment,
            )
        )
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, timestamp, tuple(members)
    )
