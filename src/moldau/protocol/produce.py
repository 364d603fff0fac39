"""Hand-written Produce codec (the hot path).

The request decoder returns each partition's records as a memoryview into the
request frame: no record byte is copied. The response encoder writes the few
fields a produce response has. Both are checked byte-for-byte against kio in tests.
Versions 0-11 (topics by name); v0-v2 carry no transactional id and their records
in the message formats of magic 0-1 (protocol/legacy_records.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from moldau.protocol.wire import Reader, Writer


@dataclass(slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopicData:
    name: str
    partitions: list[ProducePartitionData]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopicData]


def decode_produce_request(frame: memoryview, offset: int, version: int) -> ProduceRequest:
    """Raises wire.DecodeError on malformed bytes."""
    flexible = version >= 9
    r = Reader(frame, offset)
    transactional_id = r.nullable_string(flexible) if version >= 3 else None
    acks = r.int16()
    timeout_ms = r.int32()
    topics: list[ProduceTopicData] = []
    for _ in range(r.array_length(flexible, min_item_size=2)):
        name = r.string(flexible)
        partitions: list[ProducePartitionData] = []
        for _ in range(r.array_length(flexible, min_item_size=5)):
            index = r.int32()
            records = r.nullable_bytes(flexible)
            if flexible:
                r.skip_tagged_fields()
            partitions.append(ProducePartitionData(index, records))
        if flexible:
            r.skip_tagged_fields()
        topics.append(ProduceTopicData(name, partitions))
    if flexible:
        r.skip_tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


@dataclass(slots=True)
class ProducePartitionResponse:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    # (batch index, message) of the records that caused the batch to be dropped.
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


def encode_produce_response(
    version: int,
    topics: list[tuple[str, list[ProducePartitionResponse]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """The response body (without the response header)."""
    flexible = version >= 9
    w = Writer()
    w.array_length(len(topics), flexible)
    for name, partitions in topics:
        w.string(name, flexible)
        w.array_length(len(partitions), flexible)
        for p in partitions:
            w.int32(p.index)
            w.int16(p.error_code)
            w.int64(p.base_offset)
            if version >= 2:
                w.int64(p.log_append_time_ms)
            if version >= 5:
                w.int64(p.log_start_offset)
            if version >= 8:
                w.array_length(len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    w.int32(batch_index)
                    w.nullable_string(message, flexible)
                    if flexible:
                        w.empty_tagged_fields()
                w.nullable_string(p.error_message, flexible)
            if flexible:
                w.empty_tagged_fields()
        if flexible:
            w.empty_tagged_fields()
    if version >= 1:
        w.int32(throttle_time_ms)
    if flexible:
        w.empty_tagged_fields()
    return bytes(w.buf)
