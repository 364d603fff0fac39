"""Fuzzing request decoding: random bytes and mutated real requests go through
framing, header parsing and body decoding. Only the protocol's own errors may
come out, and memory stays within a small multiple of the input."""

from __future__ import annotations

import io
import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from moldau.protocol import controlled_shutdown
from moldau.protocol.apis import SUPPORTED_VERSIONS, ApiKey
from moldau.protocol.codec import (
    _KNOWN_VERSIONS,
    decode_request,
    default_entity,
    is_flexible,
    parse_request_header,
    request_class,
)
from moldau.protocol.control_wire import CONTROL_VERSIONS, encode_request
from moldau.protocol.control_wire import decode_request as decode_control_request
from moldau.protocol.frames import FrameDecoder, FrameError
from moldau.protocol.produce import decode_produce_request
from moldau.protocol.records import build_batch
from moldau.protocol.wire import DecodeError, Reader, uvarint_bytes
from tests.unit.test_control_wire import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

MAX_FRAME = 1024 * 1024


def frame_of(api_key: int, version: int, body: bytes) -> bytes:
    head = struct.pack(">hhih", api_key, version, 7, 4) + b"fuzz"
    if is_flexible(api_key, version):
        head += b"\x00"
    return head + body


def real_requests() -> list[bytes]:
    """One default-valued request per supported API and version, plus produce
    requests carrying a real batch."""
    out = []
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        if key in CONTROL_VERSIONS or key in (ApiKey.CONTROLLED_SHUTDOWN, ApiKey.PRODUCE):
            continue  # decoded by our own codecs: their requests follow
        for version in range(lo, hi + 1):
            cls = request_class(key, version)
            assert cls is not None
            buf = io.BytesIO()
            entity_writer(cls)(buf, default_entity(cls))
            out.append(frame_of(key, version, buf.getvalue()))
    for control in (LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA):
        out.append(frame_of(*encode_request(control)))
    out.append(
        frame_of(ApiKey.CONTROLLED_SHUTDOWN, controlled_shutdown.VERSION,
                 controlled_shutdown.encode_request(2, 17))
    )  # fmt: skip
    batch = build_batch([(b"k", b"v" * 50), (None, b"")])
    for version in range(SUPPORTED_VERSIONS[ApiKey.PRODUCE][1] + 1):
        body = _produce_body(version, batch)
        out.append(frame_of(ApiKey.PRODUCE, version, body))
    return out


def _produce_body(version: int, batch: bytes) -> bytes:
    flexible = version >= 9

    def arr(n: int) -> bytes:
        return bytes([n + 1]) if flexible else struct.pack(">i", n)

    def s(text: str) -> bytes:
        raw = text.encode()
        return (bytes([len(raw) + 1]) if flexible else struct.pack(">h", len(raw))) + raw

    tags = b"\x00" if flexible else b""
    records = (bytes([len(batch) + 1]) if flexible and len(batch) < 127 else b"") or (
        uvarint_bytes(len(batch) + 1) if flexible else struct.pack(">i", len(batch))
    )
    txn = b"\x00" if flexible else struct.pack(">h", -1) if version >= 3 else b""
    return (
        txn + struct.pack(">hi", 1, 1000) + arr(1) + s("topic") + arr(1)
        + struct.pack(">i", 0) + records + batch + tags + tags + tags
    )  # fmt: skip


REAL = real_requests()
# Load every schema now: a first import is a one-time cost, not one a frame causes.
for _key, _versions in _KNOWN_VERSIONS.items():
    for _v in _versions:
        request_class(_key, _v)


def decode_everything(frame: bytes) -> None:
    """What the broker does with a frame before a handler sees it."""
    view = memoryview(frame)
    try:
        header, offset = parse_request_header(view)
    except DecodeError:
        return
    if header.api_key not in SUPPORTED_VERSIONS:
        return
    lo, hi = SUPPORTED_VERSIONS[ApiKey(header.api_key)]
    if not lo <= header.api_version <= hi:
        return
    try:
        if header.api_key == ApiKey.PRODUCE:
            decode_produce_request(view, offset, header.api_version)
        elif header.api_key in CONTROL_VERSIONS:
            decode_control_request(header.api_key, header.api_version, Reader(view, offset))
        elif header.api_key == ApiKey.CONTROLLED_SHUTDOWN:
            controlled_shutdown.decode_request(Reader(view, offset))
        else:
            decode_request(header, view, offset)
    except DecodeError:
        return


def bounded(frame: bytes) -> None:
    tracemalloc.start()
    try:
        decode_everything(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Decoded objects cost more than their bytes, but never more than a fixed multiple.
    assert peak < 200 * len(frame) + 256 * 1024, (peak, len(frame))


def test_real_requests_decode() -> None:
    for frame in REAL:
        decode_everything(frame)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    bounded(data)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(REAL) - 1),
    seed=st.integers(0, 2**32 - 1),
    flips=st.integers(1, 8),
    cut=st.integers(0, 100),
)
def test_mutated_real_requests_never_crash_the_decoder(
    index: int, seed: int, flips: int, cut: int
) -> None:
    rng = random.Random(seed)
    frame = bytearray(REAL[index])
    for _ in range(flips):
        pos = rng.randrange(len(frame))
        frame[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    if cut < 30:
        frame = frame[: max(0, len(frame) - cut)]
    bounded(bytes(frame))


@pytest.mark.parametrize(
    ("key", "version", "prefix"),
    [
        (ApiKey.METADATA, 1, b""),
        (ApiKey.METADATA, 12, b""),
        (ApiKey.CREATE_TOPICS, 5, b""),
        # a compact array of int32s inside an entity: OffsetFetch v7 partition_indexes
        (ApiKey.OFFSET_FETCH, 7, b"\x02g\x02\x02t"),
    ],
)
def test_huge_array_lengths_are_refused_without_allocating(
    key: int, version: int, prefix: bytes
) -> None:
    # 2^32 - 2 items: a decoder that sizes the array first would ask for 32 GiB.
    length = uvarint_bytes(2**32 - 1) if is_flexible(key, version) else struct.pack(">i", 2**31 - 1)
    frame = memoryview(frame_of(key, version, prefix + length + b"\x00" * 16))
    header, offset = parse_request_header(frame)
    with pytest.raises(DecodeError):
        decode_request(header, frame, offset)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_framing_of_arbitrary_chunks_never_crashes(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                bounded(bytes(frame))
    except FrameError:
        pass
    assert decoder.buffered <= sum(len(c) for c in chunks)


def test_controlled_shutdown_round_trips() -> None:
    body = controlled_shutdown.encode_request(3, 1_234_567_890_123)
    assert controlled_shutdown.decode_request(Reader(body)) == (3, 1_234_567_890_123)
    answer = controlled_shutdown.encode_response(0, [("orders", 2), ("t", 0)])
    assert controlled_shutdown.decode_response(Reader(answer)) == (0, [("orders", 2), ("t", 0)])
