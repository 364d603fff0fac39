"""Schemas of request versions that Kafka 4.0 dropped and kio (generated from Kafka
4.0's JSON schemas) no longer carries, written from Kafka 3.9's JSON schemas in
kio's shape so that kio's readers and writers take them. Versions whose wire form
is that of a later one that kio has are served as that one (`ALIASES`).

OffsetCommit v0 (Kafka 0.8.1): a group, topics, partitions and offsets.
OffsetCommit v1 (0.8.2): adds the generation and member, and a commit timestamp per
partition (v1 only).
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.types import GroupId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i64

from moldau.protocol.apis import ApiKey


class _OffsetCommitV0:
    """What kio's generated classes declare on each entity of one API version."""

    __slots__ = ()
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(ApiKey.OFFSET_COMMIT)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader


class _OffsetCommitV1(_OffsetCommitV0):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestPartitionV0(_OffsetCommitV0):
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestTopicV0(_OffsetCommitV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitRequestPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV0(_OffsetCommitV0):
    __type__: ClassVar = EntityType.request
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    topics: tuple[OffsetCommitRequestTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestPartitionV1(_OffsetCommitV1):
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    # -1: the time the broker takes the commit.
    commit_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestTopicV1(_OffsetCommitV1):
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitRequestPartitionV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestV1(_OffsetCommitV1):
    __type__: ClassVar = EntityType.request
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    generation_id_or_member_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    member_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[OffsetCommitRequestTopicV1, ...]


# (api key, version) -> the request schema kio lacks.
REQUESTS: dict[tuple[int, int], type] = {
    (ApiKey.OFFSET_COMMIT, 0): OffsetCommitRequestV0,
    (ApiKey.OFFSET_COMMIT, 1): OffsetCommitRequestV1,
}

# (api key, version) -> the version kio has with the same wire form, for the request
# (when not in REQUESTS) and the response: OffsetCommit's response is the same in
# v0-v2 (a throttle time comes with v3), OffsetFetch's request and response in v0-v1
# (v0 read offsets from ZooKeeper in Kafka 0.8; Kafka 3.x and Moldau serve both from
# the group coordinator).
ALIASES: dict[tuple[int, int], int] = {
    (ApiKey.OFFSET_COMMIT, 0): 2,
    (ApiKey.OFFSET_COMMIT, 1): 2,
    (ApiKey.OFFSET_FETCH, 0): 1,
}
