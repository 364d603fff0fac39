"""ControlledShutdown (7) v3, a broker's request to the controller to move its
leaderships away before it stops, coded by hand (kio lacks it: Kafka 4.0 removed
it with ZooKeeper). v3 is flexible: compact strings and arrays, tagged fields.

    request:  broker_id int32, broker_epoch int64
    response: error_code int16, remaining_partitions [topic_name, partition_index]
"""

from __future__ import annotations

from moldau.protocol.wire import Reader, Writer

VERSION = 3


def encode_request(broker_id: int, broker_epoch: int) -> bytes:
    w = Writer()
    w.int32(broker_id)
    w.int64(broker_epoch)
    w.empty_tagged_fields()
    return bytes(w.buf)


def decode_request(r: Reader) -> tuple[int, int]:
    broker_id = r.int32()
    broker_epoch = r.int64()
    r.skip_tagged_fields()
    return broker_id, broker_epoch


def encode_response(error_code: int, remaining: list[tuple[str, int]]) -> bytes:
    w = Writer()
    w.int16(error_code)
    w.array_length(len(remaining), flexible=True)
    for topic, partition in remaining:
        w.string(topic, flexible=True)
        w.int32(partition)
        w.empty_tagged_fields()
    w.empty_tagged_fields()
    return bytes(w.buf)


def decode_response(r: Reader) -> tuple[int, list[tuple[str, int]]]:
    error_code = r.int16()
    remaining = []
    for _ in range(r.array_length(flexible=True, min_item_size=6)):
        topic = r.string(flexible=True)
        partition = r.int32()
        r.skip_tagged_fields()
        remaining.append((topic, partition))
    r.skip_tagged_fields()
    return error_code, remaining
