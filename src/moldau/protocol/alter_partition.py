"""AlterPartition (56) v2 between a leader and the controller: the request and the
response as kio entities, from and to the plain items the controller and the
partitions deal in. Topics travel by id."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from uuid import UUID

from kio.schema.alter_partition.v2 import request as rq
from kio.schema.alter_partition.v2 import response as rs
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta, i64

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import decode_response
from moldau.protocol.control import AlterPartitionItem, AlterPartitionResult
from moldau.protocol.errors import ErrorCode

ALTER_PARTITION = ApiKey.ALTER_PARTITION
VERSION = 2


def build_request(
    broker_id: int,
    broker_epoch: int,
    items: Sequence[AlterPartitionItem],
    topic_ids: Mapping[str, UUID],
) -> rq.AlterPartitionRequest:
    by_topic: dict[str, list[AlterPartitionItem]] = {}
    for item in items:
        by_topic.setdefault(item.topic, []).append(item)
    return rq.AlterPartitionRequest(
        broker_id=BrokerId(broker_id),
        broker_epoch=i64(broker_epoch),
        topics=tuple(
            rq.TopicData(
                topic_id=topic_ids[topic],
                partitions=tuple(
                    rq.PartitionData(
                        partition_index=i32(i.partition),
                        leader_epoch=i32(i.leader_epoch),
                        new_isr=tuple(BrokerId(b) for b in i.new_isr),
                        leader_recovery_state=i8(0),
                        partition_epoch=i32(i.partition_epoch),
                    )
                    for i in group
                ),
            )
            for topic, group in by_topic.items()
        ),
    )


def request_items(
    request: rq.AlterPartitionRequest, topic_names: Mapping[UUID, str]
) -> tuple[list[AlterPartitionItem], list[AlterPartitionResult]]:
    """The items of a request whose topic ids are known, and UNKNOWN_TOPIC_ID results
    for the others (named by their id, as they go back by id)."""
    items, unknown = [], []
    for t in request.topics:
        name = topic_names.get(t.topic_id) if t.topic_id is not None else None
        for p in t.partitions:
            if name is None:
                unknown.append(
                    AlterPartitionResult(
                        str(t.topic_id), p.partition_index, ErrorCode.unknown_topic_id
                    )
                )
            else:
                items.append(
                    AlterPartitionItem(
                        name, p.partition_index, p.leader_epoch, tuple(p.new_isr), p.partition_epoch
                    )
                )
    return items, unknown


def build_response(
    error: ErrorCode, results: Sequence[AlterPartitionResult], topic_ids: Mapping[str, UUID]
) -> rs.AlterPartitionResponse:
    by_topic: dict[UUID, list[AlterPartitionResult]] = {}
    for r in results:
        topic_id = topic_ids.get(r.topic) or UUID(r.topic)
        by_topic.setdefault(topic_id, []).append(r)
    return rs.AlterPartitionResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        error_code=error,
        topics=tuple(
            rs.TopicData(
                topic_id=topic_id,
                partitions=tuple(
                    rs.PartitionData(
                        partition_index=i32(r.partition),
                        error_code=ErrorCode(r.error_code),
                        leader_id=BrokerId(r.leader_id),
                        leader_epoch=i32(r.leader_epoch),
                        isr=tuple(BrokerId(b) for b in r.isr),
                        leader_recovery_state=i8(0),
                        partition_epoch=i32(r.partition_epoch),
                    )
                    for r in group
                ),
            )
            for topic_id, group in by_topic.items()
        ),
    )


def decode_response_body(body: memoryview) -> rs.AlterPartitionResponse:
    response = decode_response(ALTER_PARTITION, VERSION, body)
    assert isinstance(response, rs.AlterPartitionResponse)
    return response


def response_results(
    response: rs.AlterPartitionResponse, topic_names: Mapping[UUID, str]
) -> tuple[ErrorCode, list[AlterPartitionResult]]:
    results = []
    for t in response.topics:
        name = topic_names.get(t.topic_id) if t.topic_id is not None else None
        if name is None:
            continue  # not asked about
        for p in t.partitions:
            results.append(
                AlterPartitionResult(
                    name,
                    p.partition_index,
                    p.error_code,
                    p.leader_id,
                    p.leader_epoch,
                    tuple(p.isr),
                    p.partition_epoch,
                )
            )
    return response.error_code, results
