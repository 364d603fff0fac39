"""The message formats of magic 0 and 1 (issue 11), against kafka-python's own
implementation of them (kafka.record.legacy_records, written apart from Moldau's):
what it writes converts to a v2 batch of the same records, and what Moldau writes
from v2 batches it reads as the same records, for every codec of those formats."""

from __future__ import annotations

import contextlib
import os
import struct

import cramjam
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from moldau.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from moldau.protocol.legacy_records import (
    MAGIC_V0,
    MAGIC_V1,
    _xxh32_short,
    cut_message_set,
    down_convert,
    entry,
    message,
    up_convert,
)
from moldau.protocol.records import (
    OFFSET_CRC,
    BatchHeader,
    Compression,
    build_batch,
    compute_crc,
    iter_records,
    validate_batch,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
RECORDS = [(b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"k3", b"v3" * 100)]
STAMPS = [1_700_000_000_000 + i for i in range(len(RECORDS))]


def kafka_python_message_set(magic: int, codec: Compression, first_offset: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, int(codec), batch_size=1 << 20)
    for i, (key, value) in enumerate(RECORDS):
        builder.append(first_offset + i, STAMPS[i] if magic else None, key, value)
    return bytes(builder.build())


def read_with_kafka_python(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:  # a partial message at the end
            break
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
@pytest.mark.parametrize("codec", CODECS)
def test_a_message_set_becomes_one_v2_batch_of_its_records(magic: int, codec: Compression) -> None:
    batch = up_convert(kafka_python_message_set(magic, codec))
    header = validate_batch(batch)
    assert header.compression == codec  # the producer's codec is kept
    assert header.producer_id == -1
    got = [(r.offset, r.timestamp, r.key, r.value) for r in iter_records(batch)]
    stamps = STAMPS if magic == MAGIC_V1 else [-1] * len(RECORDS)
    assert got == [(i, stamps[i], k, v) for i, (k, v) in enumerate(RECORDS)]


def test_several_messages_and_wrappers_make_one_batch() -> None:
    data = kafka_python_message_set(MAGIC_V1, Compression.GZIP) + kafka_python_message_set(
        MAGIC_V1, Compression.NONE, first_offset=4
    )
    values = [r.value for r in iter_records(up_convert(data))]
    assert values == [v for _, v in RECORDS] * 2


@pytest.mark.parametrize("magic", [MAGIC_V0, MAGIC_V1])
@pytest.mark.parametrize("codec", CODECS)
def test_v2_batches_read_as_message_sets(magic: int, codec: Compression) -> None:
    batches = build_batch(
        [(k, v, [("header", b"dropped")]) for k, v in RECORDS],
        base_offset=40,
        timestamps=STAMPS,
        compression=codec,
    ) + build_batch([(b"k", b"later")], base_offset=44, timestamp=STAMPS[0], compression=codec)
    converted = down_convert(batches, magic, first_offset=41)
    got = read_with_kafka_python(converted)
    stamp = (lambda i: STAMPS[i]) if magic == MAGIC_V1 else (lambda i: None)
    expected = [(40 + i, stamp(i), k, v) for i, (k, v) in enumerate(RECORDS)][1:]
    assert got == [*expected, (44, stamp(0), b"k", b"later")]


def test_log_append_time_is_each_records_time_in_magic_1() -> None:
    batch = build_batch(RECORDS, timestamps=STAMPS, log_append_time=True)
    for codec_batch in (batch, build_batch(RECORDS, timestamps=STAMPS, log_append_time=True,
                                           compression=Compression.GZIP)):  # fmt: skip
        got = read_with_kafka_python(down_convert(codec_batch, MAGIC_V1, 0))
        assert {ts for _, ts, _, _ in got} == {max(STAMPS)}


def test_control_batches_are_left_out() -> None:
    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"")], base_offset=0))
    struct.pack_into(">h", control, 21, 0x20 | 0x10)  # control, transactional
    struct.pack_into(">I", control, OFFSET_CRC, compute_crc(control))
    data = bytes(control) + build_batch([(None, b"after")], base_offset=1)
    assert BatchHeader.parse(data).is_control
    assert [v for _, _, _, v in read_with_kafka_python(down_convert(data, MAGIC_V1, 0))] == [
        b"after"
    ]


def test_zstd_has_no_old_message_format() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        down_convert(build_batch(RECORDS, compression=Compression.ZSTD), MAGIC_V1, 0)
    wrapper = message(MAGIC_V1, int(Compression.ZSTD), 0, None, b"whatever")
    with pytest.raises(UnsupportedCompressionTypeError):
        up_convert(entry(0, wrapper))
    for no_codec in (5, 6, 7):
        with pytest.raises(CorruptMessageError, match="unknown compression codec"):
            up_convert(entry(0, message(MAGIC_V1, no_codec, 0, None, b"x")))


def test_bad_message_sets_are_refused() -> None:
    good = kafka_python_message_set(MAGIC_V1, Compression.NONE)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptMessageError, match="CRC"):
        up_convert(bytes(flipped))
    with pytest.raises(CorruptMessageError, match="partial"):
        up_convert(good[:-3])
    with pytest.raises(CorruptMessageError):
        up_convert(b"")
    not_gzip = message(MAGIC_V1, int(Compression.GZIP), 0, None, b"not gzip")
    with pytest.raises(CorruptMessageError, match="decompress"):
        up_convert(entry(0, not_gzip))
    inner_ok = entry(0, message(MAGIC_V1, int(Compression.GZIP), 0, None, bytes(
        cramjam.gzip.compress(entry(0, message(MAGIC_V1, 0, 0, None, b"x")))
    )))  # fmt: skip
    nested_ok = message(
        MAGIC_V1, int(Compression.GZIP), 0, None, bytes(cramjam.gzip.compress(inner_ok))
    )
    with pytest.raises(InvalidRecordError, match="compressed message inside"):
        up_convert(entry(0, nested_ok))
    mixed = message(MAGIC_V1, int(Compression.GZIP), 0, None, bytes(
        cramjam.gzip.compress(entry(0, message(MAGIC_V0, 0, 0, None, b"x")))
    ))  # fmt: skip
    with pytest.raises(InvalidRecordError, match="magic"):
        up_convert(entry(0, mixed))
    bad_magic = bytearray(good)
    bad_magic[16] = 7
    with pytest.raises(CorruptMessageError, match="magic 7"):
        up_convert(bytes(bad_magic))


def test_cut_at_message_boundaries() -> None:
    data = down_convert(build_batch(RECORDS), MAGIC_V0, 0)
    sizes = [len(entry(0, message(MAGIC_V0, 0, 0, k, v))) for k, v in RECORDS]
    assert sum(sizes) == len(data)
    assert cut_message_set(data, len(data), False) == data
    assert cut_message_set(data, sizes[0] + sizes[1] + 5, False) == data[: sizes[0] + sizes[1]]
    # Not even the first fits: Fetch v3 still gets it whole, v0-v2 its first bytes.
    assert cut_message_set(data, 10, True) == data[: sizes[0]]
    assert cut_message_set(data, 10, False) == data[:10]
    assert cut_message_set(data, -5, False) == b""


def test_lz4_in_magic_0_has_the_header_checksum_of_kafka_0_8() -> None:
    """KAFKA-3160: Kafka 0.8-0.9 hashed the frame's magic number into the checksum of
    its descriptor; clients of magic 0 expect that (kafka-python reads either)."""
    converted = down_convert(build_batch(RECORDS, compression=Compression.LZ4), MAGIC_V0, 0)
    value_at = 12 + 4 + 2 + 4  # entry, crc, magic and attributes, null key
    frame = converted[value_at + 4 :]
    end = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[end] == (xxhash.xxh32(frame[:end]).intdigest() >> 8) & 0xFF
    assert frame[end] != (xxhash.xxh32(frame[4:end]).intdigest() >> 8) & 0xFF
    assert [v for *_, v in read_with_kafka_python(converted)] == [v for _, v in RECORDS]


def test_xxh32_of_short_input_is_xxhash() -> None:
    for n in range(16):
        for _ in range(10):
            data = os.urandom(n)
            assert _xxh32_short(data) == xxhash.xxh32(data).intdigest()


SAMPLES = [
    kafka_python_message_set(magic, codec) for magic in (MAGIC_V0, MAGIC_V1) for codec in CODECS
]


@settings(max_examples=300, deadline=None)
@given(
    sample=st.sampled_from(SAMPLES),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
)
def test_any_bytes_get_a_kafka_error_or_a_batch(
    sample: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    """What a producer of Produce v0-v2 sends is converted or refused with a Kafka
    error (CORRUPT_MESSAGE, ...), whatever the bytes: CRCs are checked before the
    codecs see the bytes, so most edits stop there; cuts reach every length field."""
    data = bytearray(sample[: max(cut, 1)])
    for pos, byte in edits:
        data[pos % len(data)] = byte
    with contextlib.suppress(KafkaError):
        validate_batch(up_convert(bytes(data)))


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_wrappers_whose_value_is_not_their_codec_are_corrupt(codec: Compression) -> None:
    for value in (
        b"",
        b"\x82SNAPPY\x00" + b"\x00" * 9 + b"\xff",
        b"\x04\x22\x4d\x18\x60",
        b"x" * 40,
    ):
        for magic in (MAGIC_V0, MAGIC_V1):
            with pytest.raises((CorruptMessageError, InvalidRecordError)):
                up_convert(entry(0, message(magic, int(codec), 0, None, value)))


@settings(max_examples=300, deadline=None)
@given(
    magic=st.sampled_from([MAGIC_V0, MAGIC_V1]),
    attributes=st.integers(-128, 127),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=80)),
)
def test_any_message_with_a_good_crc_gets_a_batch_or_a_kafka_error(
    magic: int, attributes: int, key: bytes | None, value: bytes | None
) -> None:
    """Past the CRC every attribute bit and any value reach the codecs: still a batch
    or a Kafka error, never another exception."""
    with contextlib.suppress(KafkaError):
        validate_batch(up_convert(entry(0, message(magic, attributes, 0, key, value))))
