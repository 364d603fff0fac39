"""The hand-written Produce decode and Fetch/Produce response encode agree
byte-for-byte with kio's generated codec."""

from __future__ import annotations

import datetime
import io
import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32Timedelta

from moldau.protocol.codec import request_class, response_class
from moldau.protocol.fetch import (
    FetchPartitionResult,
    FetchTopicResult,
    encode_fetch_response,
)
from moldau.protocol.produce import (
    ProducePartitionResponse,
    decode_produce_request,
    encode_produce_response,
)
from moldau.protocol.records import build_batch
from moldau.protocol.wire import DecodeError
from tests.unit.kio_3x import through_kio_3x


def kio_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def nested(cls: type[Any], name: str) -> type[Any]:
    """The class of a kio entity's array field `name`."""
    import typing

    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    inner = args[0]
    if typing.get_origin(inner) is not None:  # Optional[...]
        inner = typing.get_args(inner)[0]
    return inner  # type: ignore[no-any-return]


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-0123456789", min_size=1, max_size=20)
record_sets = st.one_of(
    st.none(),
    st.lists(st.binary(max_size=30), min_size=1, max_size=3).map(
        lambda vals: build_batch([(None, v) for v in vals])
    ),
)
produce_topics = st.lists(
    st.tuples(names, st.lists(st.tuples(st.integers(0, 1000), record_sets), max_size=3)),
    max_size=3,
)


@pytest.mark.parametrize("version", range(3, 12))
@settings(max_examples=40, deadline=None)
@given(
    txn=st.one_of(st.none(), names),
    acks=st.sampled_from([-1, 0, 1]),
    timeout=st.integers(0, 2**31 - 1),
    topics=produce_topics,
)
def test_produce_request_decode_matches_kio(
    version: int, txn: str | None, acks: int, timeout: int, topics: list[Any]
) -> None:
    req_cls = request_class(0, version)
    assert req_cls is not None
    topic_cls = nested(req_cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    request = req_cls(  # type: ignore[call-arg]
        transactional_id=txn,
        acks=acks,
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout)),
        topic_data=tuple(
            topic_cls(
                name=name,
                partition_data=tuple(part_cls(index=i, records=r) for i, r in parts),
            )
            for name, parts in topics
        ),
    )
    data = b"\xff\xff" + kio_bytes(request)  # decode from an offset, as from a frame
    decoded = decode_produce_request(memoryview(data), 2, version)
    assert decoded.transactional_id == txn
    assert decoded.acks == acks
    assert decoded.timeout_ms == timeout
    got = [
        (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partitions])
        for t in decoded.topics
    ]
    assert got == [(n, list(parts)) for n, parts in topics]


def test_produce_request_decode_refuses_truncation_and_huge_arrays() -> None:
    req_cls = request_class(0, 9)
    assert req_cls is not None
    topic_cls = nested(req_cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    data = kio_bytes(
        req_cls(  # type: ignore[call-arg]
            transactional_id=None,
            acks=1,
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=5)),
            topic_data=(
                topic_cls(name="t", partition_data=(part_cls(index=0, records=b"x" * 70),)),
            ),
        )
    )
    for cut in range(len(data) - 1):
        with pytest.raises(DecodeError):
            decode_produce_request(memoryview(data[:cut]), 0, 9)
    # A compact array claiming a billion topics in a few bytes.
    huge = b"\x00" + b"\x00\x01" + b"\x00\x00\x00\x05" + b"\x80\x94\xeb\xdc\x03" + b"\x00" * 8
    with pytest.raises(DecodeError):
        decode_produce_request(memoryview(huge), 0, 9)


produce_results = st.lists(
    st.tuples(
        names,
        st.lists(
            st.builds(
                ProducePartitionResponse,
                index=st.integers(0, 1000),
                error_code=st.sampled_from([0, 2, 3, 10, 17]),
                base_offset=st.integers(-1, 2**40),
                log_append_time_ms=st.sampled_from([-1, 1_700_000_000_000]),
                log_start_offset=st.integers(-1, 2**40),
                error_message=st.one_of(st.none(), names),
                record_errors=st.lists(
                    st.tuples(st.integers(0, 5), st.one_of(st.none(), names)), max_size=2
                ),
            ),
            max_size=3,
        ),
    ),
    max_size=3,
)


@pytest.mark.parametrize("version", range(3, 12))
@settings(max_examples=40, deadline=None)
@given(topics=produce_results, throttle=st.integers(0, 1000))
def test_produce_response_encode_matches_kio(
    version: int, topics: list[Any], throttle: int
) -> None:
    resp_cls = response_class(0, version)
    assert resp_cls is not None
    topic_cls = nested(resp_cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    fields_of_part = {f for f in part_cls.__dataclass_fields__}
    if version < 8:
        topics = [(n, [_no_v8(p) for p in ps]) for n, ps in topics]

    def kio_part(p: ProducePartitionResponse) -> Any:
        kw: dict[str, Any] = dict(
            index=p.index,
            error_code=ErrorCode(p.error_code),
            base_offset=p.base_offset,
            log_append_time=None
            if p.log_append_time_ms == -1
            else datetime.datetime.fromtimestamp(p.log_append_time_ms / 1000, datetime.UTC),
        )
        if "log_start_offset" in fields_of_part:
            kw["log_start_offset"] = p.log_start_offset
        if "record_errors" in fields_of_part:
            err_cls = nested(part_cls, "record_errors")
            kw["record_errors"] = tuple(
                err_cls(batch_index=i, batch_index_error_message=m) for i, m in p.record_errors
            )
            kw["error_message"] = p.error_message
        return part_cls(**kw)

    expected = kio_bytes(
        resp_cls(  # type: ignore[call-arg]
            responses=tuple(
                topic_cls(name=n, partition_responses=tuple(kio_part(p) for p in ps))
                for n, ps in topics
            ),
            throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle)),
        )
    )
    assert encode_produce_response(version, topics, throttle) == expected


def _no_v8(p: ProducePartitionResponse) -> ProducePartitionResponse:
    return ProducePartitionResponse(
        p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
    )


fetch_partitions = st.builds(
    FetchPartitionResult,
    partition_index=st.integers(0, 1000),
    error_code=st.sampled_from([0, 1, 3, 6]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    records=st.one_of(st.none(), st.binary(max_size=40)),
    preferred_read_replica=st.integers(-1, 5),
    diverging_epoch=st.one_of(st.none(), st.tuples(st.integers(0, 10), st.integers(0, 2**40))),
    current_leader=st.one_of(st.none(), st.tuples(st.integers(0, 10), st.integers(0, 10))),
    aborted_transactions=st.one_of(
        st.none(),
        st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=3),
    ),
)


@pytest.mark.parametrize("version", range(4, 17))
@settings(max_examples=40, deadline=None)
@given(
    topics=st.lists(
        st.builds(
            FetchTopicResult,
            topic=names,
            partitions=st.lists(fetch_partitions, max_size=3),
            topic_id=st.uuids(),
        ),
        max_size=3,
    ),
    error=st.sampled_from([0, 70]),
    session_id=st.integers(0, 2**31 - 1),
    throttle=st.integers(0, 1000),
)
def test_fetch_response_encode_matches_kio(
    version: int, topics: list[FetchTopicResult], error: int, session_id: int, throttle: int
) -> None:
    resp_cls = response_class(1, version)
    assert resp_cls is not None
    topic_cls = nested(resp_cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    pfields = set(part_cls.__dataclass_fields__)
    for t in topics:
        for p in t.partitions:
            if version < 11:
                p.preferred_read_replica = -1
            if version < 12:
                p.diverging_epoch = p.current_leader = None

    def kio_part(p: FetchPartitionResult) -> Any:
        kw: dict[str, Any] = dict(
            partition_index=p.partition_index,
            error_code=ErrorCode(p.error_code),
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            aborted_transactions=None
            if p.aborted_transactions is None
            else tuple(
                nested(part_cls, "aborted_transactions")(producer_id=pid, first_offset=first)
                for pid, first in p.aborted_transactions
            ),
            records=None if p.records is None else bytes(p.records),  # type: ignore[arg-type]
        )
        if "log_start_offset" in pfields:
            kw["log_start_offset"] = p.log_start_offset
        if "preferred_read_replica" in pfields:
            kw["preferred_read_replica"] = p.preferred_read_replica
        if p.diverging_epoch is not None:
            kw["diverging_epoch"] = nested_cls(part_cls, "diverging_epoch")(
                epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]
            )
        if p.current_leader is not None:
            kw["current_leader"] = nested_cls(part_cls, "current_leader")(
                leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
            )
        return part_cls(**kw)

    top: dict[str, Any] = dict(
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle)),
        responses=tuple(
            topic_cls(
                **({"topic_id": t.topic_id} if version >= 13 else {"topic": t.topic}),
                partitions=tuple(kio_part(p) for p in t.partitions),
            )
            for t in topics
        ),
    )
    if version >= 7:
        top["error_code"] = ErrorCode(error)
        top["session_id"] = session_id
    expected = kio_bytes(resp_cls(**top))
    parts = encode_fetch_response(version, topics, error, session_id, throttle)
    assert b"".join(bytes(p) for p in parts) == expected  # type: ignore[arg-type]


def nested_cls(cls: type[Any], name: str) -> type[Any]:
    import typing

    return typing.get_type_hints(cls)[name]  # type: ignore[no-any-return]


def test_fetch_response_passes_record_parts_through_uncopied() -> None:
    records = memoryview(b"r" * 100)
    parts = encode_fetch_response(
        11, [FetchTopicResult("t", [FetchPartitionResult(0, records=records)], uuid.uuid4())]
    )
    assert any(p is records for p in parts)


def test_produce_v0_v2_and_fetch_v0_v3_are_kafka_3x_bytes() -> None:
    """The versions kio 0.6.5 lacks, against kio 0.5.0 (Kafka 3.x's schemas): it reads
    what Moldau writes as the same fields and writes back the same bytes."""
    batch = build_batch([(b"k", b"v")])
    v3_cls = request_class(0, 3)
    assert v3_cls is not None
    topic_cls = nested(v3_cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    v3 = kio_bytes(
        v3_cls(  # type: ignore[call-arg]
            transactional_id=None,
            acks=-1,
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=1500)),
            topic_data=(
                topic_cls(
                    name="t",
                    partition_data=(
                        part_cls(index=0, records=batch),
                        part_cls(index=1, records=None),
                    ),
                ),
            ),
        )
    )
    request = v3[2:]  # v0-v2 are v3 without its transactional id (here null: int16 -1)
    produced = [
        ProducePartitionResponse(0, 0, 42, 1_700_000_000_000),
        ProducePartitionResponse(1, 3, -1),
    ]
    fetched = [
        FetchTopicResult(
            "t",
            [
                FetchPartitionResult(
                    0, 0, high_watermark=10, last_stable_offset=10, records=b"abc"
                ),
                FetchPartitionResult(1, 3, records=b""),
            ],
        )
    ]
    ours: dict[str, tuple[list[Any], str, bytes]] = {}
    for v in range(3):
        ours[f"produce request v{v}"] = ([0, v, "request"], "", request)
        body = encode_produce_response(v, [("t", produced)], throttle_time_ms=7)
        ours[f"produce response v{v}"] = ([0, v, "response"], "", body)
    for v in range(4):
        parts = encode_fetch_response(v, fetched, throttle_time_ms=7)
        ours[f"fetch response v{v}"] = ([1, v, "response"], "", b"".join(map(bytes, parts)))  # type: ignore[arg-type]
    theirs = through_kio_3x(ours)  # type: ignore[arg-type]
    assert {k: b for k, (b, _) in theirs.items()} == {k: b for k, (_, _, b) in ours.items()}
    read = {k: json.loads(f) for k, (_, f) in theirs.items()}
    for v in range(3):
        assert read[f"produce request v{v}"]["acks"] == -1
        decoded = decode_produce_request(memoryview(request), 0, v)
        assert (decoded.transactional_id, decoded.acks, decoded.timeout_ms) == (None, -1, 1500)
        assert [
            (p.index, p.records and bytes(p.records)) for p in decoded.topics[0].partitions
        ] == [
            (0, batch),
            (1, None),
        ]
        [t] = read[f"produce response v{v}"]["responses"]
        assert [p["base_offset"] for p in t["partition_responses"]] == [42, -1]
    assert read["produce response v2"]["responses"][0]["partition_responses"][0][
        "log_append_time"
    ].startswith("2023-11-14")
    for v in range(4):
        [t] = read[f"fetch response v{v}"]["responses"]
        assert [(p["high_watermark"], p["records"]) for p in t["partitions"]] == [
            (10, str(b"abc")),
            (-1, str(b"")),
        ]
