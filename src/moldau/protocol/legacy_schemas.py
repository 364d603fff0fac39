"""Schemas of versions that Kafka 4.0 dropped and kio (generated from Kafka 4.0's JSON
schemas) no longer carries, written from Kafka 3.9's JSON schemas in kio's shape so
that kio's readers and writers take them. Versions whose wire form is that of a
later one that kio has are served as that one (`ALIASES`).

- OffsetCommit v0 (Kafka 0.8.1): a group, topics, partitions and offsets; v1 (0.8.2)
  adds the generation and member, and a commit timestamp per partition (v1 only).
- Fetch v0-v3: no isolation level; v3 adds the response's max_bytes. (Produce v0-v2
  and the Fetch responses are encoded by hand: protocol/produce.py, fetch.py.)
- ListOffsets v0: a list of offsets per partition ("old style"), up to
  max_num_offsets of them, where v1 answers one offset and its timestamp.
- CreateTopics v0: no validate_only; responses v0 (no error message) and v1 (no
  throttle time).
- DeleteTopics v0: responses without a throttle time.
- DescribeConfigs v0: no include_synonyms; each config says is_default where later
  versions give its source and synonyms.
- OffsetForLeaderEpoch v0-v1: no current leader epoch; responses v0 (no leader epoch)
  and v1 (no throttle time).
- DescribeLogDirs v0: v1's wire form (an alias).
"""

# No `from __future__ import annotations`: kio reads the field types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from moldau.protocol.apis import ApiKey


class _Entity:
    """What kio's generated classes declare on each entity of one API version."""

    __slots__ = ()
    __type__: ClassVar = EntityType.nested
    __flexible__: ClassVar[bool] = False
    __version__: ClassVar[i16]
    __api_key__: ClassVar[i16]
    __header_schema__: ClassVar[type]


class _Request(_Entity):
    __slots__ = ()
    __header_schema__: ClassVar[type] = RequestHeader


class _Response(_Entity):
    __slots__ = ()
    __header_schema__: ClassVar[type] = ResponseHeader


# -- OffsetCommit (8) ----------------------------------------------------------------


class _OffsetCommitV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.OFFSET_COMMIT)


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


# -- Fetch (1) -----------------------------------------------------------------------


class _FetchRequestV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.FETCH)


class _FetchRequestV3(_FetchRequestV0):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(3)


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartitionV0(_FetchRequestV0):
    partition: i32 = field(metadata={"kafka_type": "int32"})
    fetch_offset: i64 = field(metadata={"kafka_type": "int64"})
    partition_max_bytes: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopicV0(_FetchRequestV0):
    """Also v3's (v0-v3 differ only in the request's max_bytes)."""

    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[FetchPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestV0(_FetchRequestV0):
    """Also v1's and v2's request (they changed only the response)."""

    __type__: ClassVar = EntityType.request
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    topics: tuple[FetchTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequestV3(_FetchRequestV3):
    __type__: ClassVar = EntityType.request
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"}, default=BrokerId(-1))
    max_wait: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    min_bytes: i32 = field(metadata={"kafka_type": "int32"})
    max_bytes: i32 = field(metadata={"kafka_type": "int32"}, default=i32(2147483647))
    topics: tuple[FetchTopicV0, ...]


# -- ListOffsets (2) -----------------------------------------------------------------


class _ListOffsetsRequestV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.LIST_OFFSETS)


class _ListOffsetsResponseV0(_Response):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.LIST_OFFSETS)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0(_ListOffsetsRequestV0):
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0(_ListOffsetsRequestV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV0(_ListOffsetsRequestV0):
    __type__: ClassVar = EntityType.request
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0(_ListOffsetsResponseV0):
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0(_ListOffsetsResponseV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV0(_ListOffsetsResponseV0):
    __type__: ClassVar = EntityType.response
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# -- CreateTopics (19) ---------------------------------------------------------------


class _CreateTopicsRequestV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_TOPICS)


class _CreateTopicsResponseV0(_Response):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.CREATE_TOPICS)


class _CreateTopicsResponseV1(_CreateTopicsResponseV0):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableReplicaAssignmentV0(_CreateTopicsRequestV0):
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    broker_ids: tuple[BrokerId, ...] = field(metadata={"kafka_type": "int32"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicConfigV0(_CreateTopicsRequestV0):
    name: str = field(metadata={"kafka_type": "string"})
    value: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicV0(_CreateTopicsRequestV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    num_partitions: i32 = field(metadata={"kafka_type": "int32"})
    replication_factor: i16 = field(metadata={"kafka_type": "int16"})
    assignments: tuple[CreatableReplicaAssignmentV0, ...]
    configs: tuple[CreatableTopicConfigV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsRequestV0(_CreateTopicsRequestV0):
    __type__: ClassVar = EntityType.request
    topics: tuple[CreatableTopicV0, ...]
    timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicResultV0(_CreateTopicsResponseV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponseV0(_CreateTopicsResponseV0):
    __type__: ClassVar = EntityType.response
    topics: tuple[CreatableTopicResultV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicResultV1(_CreateTopicsResponseV1):
    name: TopicName = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponseV1(_CreateTopicsResponseV1):
    __type__: ClassVar = EntityType.response
    topics: tuple[CreatableTopicResultV1, ...]


# -- DeleteTopics (20) ---------------------------------------------------------------


class _DeleteTopicsResponseV0(_Response):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.DELETE_TOPICS)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableTopicResultV0(_DeleteTopicsResponseV0):
    name: TopicName = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsResponseV0(_DeleteTopicsResponseV0):
    __type__: ClassVar = EntityType.response
    responses: tuple[DeletableTopicResultV0, ...]


# -- DescribeConfigs (32) ------------------------------------------------------------


class _DescribeConfigsRequestV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_CONFIGS)


class _DescribeConfigsResponseV0(_Response):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.DESCRIBE_CONFIGS)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceV0(_DescribeConfigsRequestV0):
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    # None: every config of the resource.
    configuration_keys: tuple[str, ...] | None = field(
        metadata={"kafka_type": "string"}, default=()
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequestV0(_DescribeConfigsRequestV0):
    __type__: ClassVar = EntityType.request
    resources: tuple[DescribeConfigsResourceV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResultV0(_DescribeConfigsResponseV0):
    name: str = field(metadata={"kafka_type": "string"})
    value: str | None = field(metadata={"kafka_type": "string"})
    read_only: bool = field(metadata={"kafka_type": "bool"})
    is_default: bool = field(metadata={"kafka_type": "bool"})
    is_sensitive: bool = field(metadata={"kafka_type": "bool"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResultV0(_DescribeConfigsResponseV0):
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configs: tuple[DescribeConfigsResourceResultV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponseV0(_DescribeConfigsResponseV0):
    __type__: ClassVar = EntityType.response
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DescribeConfigsResultV0, ...]


# -- OffsetForLeaderEpoch (23) -------------------------------------------------------


class _OffsetForLeaderEpochRequestV0(_Request):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.OFFSET_FOR_LEADER_EPOCH)


class _OffsetForLeaderEpochResponseV0(_Response):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(0)
    __api_key__: ClassVar[i16] = i16(ApiKey.OFFSET_FOR_LEADER_EPOCH)


class _OffsetForLeaderEpochResponseV1(_OffsetForLeaderEpochResponseV0):
    __slots__ = ()
    __version__: ClassVar[i16] = i16(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderPartitionV0(_OffsetForLeaderEpochRequestV0):
    partition: i32 = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"})


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderTopicV0(_OffsetForLeaderEpochRequestV0):
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetForLeaderPartitionV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderEpochRequestV0(_OffsetForLeaderEpochRequestV0):
    """Also v1's request (v1 changed only the response)."""

    __type__: ClassVar = EntityType.request
    topics: tuple[OffsetForLeaderTopicV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffsetV0(_OffsetForLeaderEpochResponseV0):
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    partition: i32 = field(metadata={"kafka_type": "int32"})
    end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderTopicResultV0(_OffsetForLeaderEpochResponseV0):
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[EpochEndOffsetV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderEpochResponseV0(_OffsetForLeaderEpochResponseV0):
    __type__: ClassVar = EntityType.response
    topics: tuple[OffsetForLeaderTopicResultV0, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffsetV1(_OffsetForLeaderEpochResponseV1):
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    partition: i32 = field(metadata={"kafka_type": "int32"})
    leader_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderTopicResultV1(_OffsetForLeaderEpochResponseV1):
    topic: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[EpochEndOffsetV1, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderEpochResponseV1(_OffsetForLeaderEpochResponseV1):
    __type__: ClassVar = EntityType.response
    topics: tuple[OffsetForLeaderTopicResultV1, ...]


# (api key, version) -> the request schema kio lacks.
REQUESTS: dict[tuple[int, int], type] = {
    (ApiKey.FETCH, 0): FetchRequestV0,
    (ApiKey.FETCH, 1): FetchRequestV0,
    (ApiKey.FETCH, 2): FetchRequestV0,
    (ApiKey.FETCH, 3): FetchRequestV3,
    (ApiKey.OFFSET_COMMIT, 0): OffsetCommitRequestV0,
    (ApiKey.OFFSET_COMMIT, 1): OffsetCommitRequestV1,
    (ApiKey.LIST_OFFSETS, 0): ListOffsetsRequestV0,
    (ApiKey.CREATE_TOPICS, 0): CreateTopicsRequestV0,
    (ApiKey.DESCRIBE_CONFIGS, 0): DescribeConfigsRequestV0,
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): OffsetForLeaderEpochRequestV0,
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): OffsetForLeaderEpochRequestV0,
}

# (api key, version) -> the response schema kio lacks.
RESPONSES: dict[tuple[int, int], type] = {
    (ApiKey.LIST_OFFSETS, 0): ListOffsetsResponseV0,
    (ApiKey.CREATE_TOPICS, 0): CreateTopicsResponseV0,
    (ApiKey.CREATE_TOPICS, 1): CreateTopicsResponseV1,
    (ApiKey.DELETE_TOPICS, 0): DeleteTopicsResponseV0,
    (ApiKey.DESCRIBE_CONFIGS, 0): DescribeConfigsResponseV0,
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): OffsetForLeaderEpochResponseV0,
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): OffsetForLeaderEpochResponseV1,
}

# (api key, version) -> the version kio has with the same wire form, for the request
# and the response when not in REQUESTS or RESPONSES: OffsetCommit's response is the
# same in v0-v2 (a throttle time comes with v3), OffsetFetch's request and response
# in v0-v1 (v0 read offsets from ZooKeeper in Kafka 0.8; Kafka 3.x and Moldau serve
# both from the group coordinator), CreateTopics' request in v1-v2 and DeleteTopics'
# in v0-v1.
ALIASES: dict[tuple[int, int], int] = {
    (ApiKey.OFFSET_COMMIT, 0): 2,
    (ApiKey.OFFSET_COMMIT, 1): 2,
    (ApiKey.OFFSET_FETCH, 0): 1,
    (ApiKey.CREATE_TOPICS, 1): 2,
    (ApiKey.DELETE_TOPICS, 0): 1,
    (ApiKey.DESCRIBE_LOG_DIRS, 0): 1,
}
