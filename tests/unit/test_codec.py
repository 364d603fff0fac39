"""Request decoding details Kafka relies on: unknown tagged fields are skipped, the
header's client id is a legacy string even in v2 headers, responses of any version
are built from one description."""

from __future__ import annotations

import io
import struct

from kio.serial import entity_writer

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import (
    build_response,
    decode_request,
    decode_response,
    encode_body,
    parse_request_header,
    request_class,
    response_class,
)
from moldau.protocol.errors import ErrorCode
from tests.integration.requests import metadata


def encoded(obj: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    body = encoded(metadata("orders", version=12))
    # Add an unknown tag (9) to the topic entry and one (5) to the request itself.
    with_tags = body.replace(b"orders\x00", b"orders\x01\x09\x03abc")[:-1] + b"\x01\x05\x01\x2a"
    head = struct.pack(">hhih", 3, 12, 42, 3) + b"cli" + b"\x01\x00\x02zz"  # header tag too
    frame = memoryview(head + with_tags)
    header, offset = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        42,
        "cli",
    )
    req = decode_request(header, frame, offset)
    assert [t.name for t in req.topics] == ["orders"]
    assert req.allow_auto_topic_creation


def test_one_response_description_serves_every_version() -> None:
    data = {
        "throttle_time": 7,
        "error_code": ErrorCode.none,
        "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
    }
    for version in range(5):
        r = build_response(ApiKey.API_VERSIONS, version, data)
        assert type(r) is response_class(ApiKey.API_VERSIONS, version)
        assert encode_body(r)
    assert request_class(ApiKey.API_VERSIONS, 99) is None


def test_a_transaction_start_time_of_minus_one_means_none_both_ways() -> None:
    """DescribeTransactions sends -1 as the start time of a transaction not running
    (Empty, or an unknown id), in a field that is not nullable."""
    state = {
        "error_code": ErrorCode.transactional_id_not_found,
        "transactional_id": "tx",
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }
    r = build_response(65, 0, {"throttle_time": 0, "transaction_states": [state]})
    body = encode_body(r)
    assert struct.pack(">q", -1) in body
    (decoded,) = decode_response(65, 0, memoryview(body)).transaction_states
    assert decoded.transaction_start_time is None
    state["transaction_start_time"] = 1_700_000_000_123
    r = build_response(65, 0, {"throttle_time": 0, "transaction_states": [state]})
    (decoded,) = decode_response(65, 0, memoryview(encode_body(r))).transaction_states
    assert decoded.transaction_start_time.timestamp() * 1000 == 1_700_000_000_123
