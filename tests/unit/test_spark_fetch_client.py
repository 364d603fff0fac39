"""Reading an answer's frame (moldau.spark.fetch_client.decode_answer, which the
Spark source and sink and the tests' raw WireClient share): the response header's
tagged fields, and a frame cut short in them."""

from __future__ import annotations

import pytest

from moldau.protocol.apis import ApiKey
from moldau.protocol.codec import build_entity, encode_body, response_class
from moldau.protocol.wire import DecodeError
from moldau.spark.fetch_client import decode_answer

CORRELATION = b"\x00\x00\x00\x07"


def metadata_body() -> bytes:
    cls = response_class(ApiKey.METADATA, 12)
    assert cls is not None
    brokers = [{"node_id": 1, "host": "h", "port": 9092}]
    return encode_body(build_entity(cls, {"brokers": brokers, "controller_id": 1}))


def test_an_answer_is_read_after_the_tagged_fields_of_its_header() -> None:
    # One unknown tagged field (tag 5, two bytes), which a reader skips as Kafka's do.
    header = CORRELATION + b"\x01\x05\x02ab"
    answer = decode_answer(ApiKey.METADATA, 12, header + metadata_body())
    assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "h", 9092)]
    assert answer.controller_id == 1


def test_an_answer_cut_short_in_its_header_is_a_decode_error() -> None:
    # A tagged-field count whose varint never ends.
    with pytest.raises(DecodeError):
        decode_answer(ApiKey.METADATA, 12, CORRELATION + b"\x80")
