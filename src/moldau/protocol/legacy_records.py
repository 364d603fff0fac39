"""Kafka's message formats before record batches: magic 0 (Kafka 0.8) and magic 1
(0.10, adds a timestamp), as clients of Produce v0-v2 write them and clients of
Fetch v0-v3 read them. The log holds only magic v2 batches: a message set is
converted to one batch on the way in (`up_convert`) and batches to a message set on
the way out (`down_convert`), for those request versions only, as Kafka 3.x does.

A message set is a run of entries: offset int64 | size int32 | message, where a
message is crc uint32 (CRC-32 of the rest) | magic int8 | attributes int8 |
timestamp int64 (magic 1 only) | key | value, key and value as int32 length (-1:
null) and bytes. Attributes: bits 0-2 the codec, bit 3 (magic 1) LogAppendTime. A
compressed message (a "wrapper") holds the compressed message set of its records in
its value; its offset is its last record's; the records inside carry absolute
offsets in magic 0 and offsets relative to the first (0, 1, ...) in magic 1.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import cramjam

from moldau.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from moldau.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    TimestampType,
    build_batch,
    compress,
    decompress,
    iter_records,
    split_batches,
)
from moldau.protocol.wire import Buffer

MAGIC_V0 = 0
MAGIC_V1 = 1

_ENTRY = struct.Struct(">qi")  # offset, size
_V0_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes
_V1_HEAD = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
_I32 = struct.Struct(">i")
ENTRY_OVERHEAD = _ENTRY.size
# crc, magic, attributes, key and value lengths: the smallest message.
_MIN_MESSAGE = {MAGIC_V0: 14, MAGIC_V1: 22}


@dataclass(frozen=True, slots=True)
class Message:
    offset: int
    magic: int
    attributes: int
    timestamp: int  # NO_TIMESTAMP in magic 0
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        """The codec's id (a Compression, or an id no codec has)."""
        return self.attributes & ATTR_COMPRESSION_MASK


# -- reading (Produce v0-v2) -----------------------------------------------------------


def iter_messages(data: Buffer) -> Iterator[Message]:
    """The messages of a message set, each checked against its CRC. A set that does
    not end with a whole message is corrupt (Kafka trims such a tail; a producer
    never sends one)."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if len(view) - pos < ENTRY_OVERHEAD:
            raise CorruptMessageError("message set ends with a partial message")
        offset, size = _ENTRY.unpack_from(view, pos)
        start, end = pos + ENTRY_OVERHEAD, pos + ENTRY_OVERHEAD + size
        if end > len(view) or size < _MIN_MESSAGE[MAGIC_V0]:
            raise CorruptMessageError("message set ends with a partial message")
        yield parse_message(offset, view[start:end])
        pos = end


def parse_message(offset: int, m: memoryview, check_crc: bool = True) -> Message:
    """One message (after its offset and size); without `check_crc` a message whose
    CRC fails is read all the same (kafka-dump-log shows it as invalid)."""
    _, magic, attributes = _V0_HEAD.unpack_from(m, 0)
    if magic not in (MAGIC_V0, MAGIC_V1) or len(m) < _MIN_MESSAGE[magic]:
        raise CorruptMessageError(f"message of magic {magic} in a message set")
    if check_crc and not crc_valid(m):
        raise CorruptMessageError(f"message at offset {offset} fails its CRC check")
    timestamp = NO_TIMESTAMP
    pos = 6
    if magic == MAGIC_V1:
        timestamp = _V1_HEAD.unpack_from(m, 0)[3]
        pos = 14
    key, pos = _bytes(m, pos)
    value, pos = _bytes(m, pos)
    if pos != len(m):
        raise CorruptMessageError(f"message at offset {offset} has bytes past its value")
    return Message(offset, magic, attributes, timestamp, key, value)


def crc_valid(m: Buffer) -> bool:
    """Whether a message (after its offset and size) matches its CRC-32."""
    return bool(zlib.crc32(memoryview(m)[4:]) == _V0_HEAD.unpack_from(m, 0)[0])


def _bytes(m: memoryview, pos: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(m):
        raise CorruptMessageError("message ends inside a length")
    (n,) = _I32.unpack_from(m, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(m):
        raise CorruptMessageError("message ends inside its key or value")
    return bytes(m[pos : pos + n]), pos + n


def records_of(message: Message) -> list[Message]:
    """A plain message, or the records inside a wrapper."""
    codec = message.codec
    if codec == Compression.NONE:
        return [message]
    if codec == Compression.ZSTD:
        raise UnsupportedCompressionTypeError("zstd needs record batches (magic 2)")
    if codec not in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        raise CorruptMessageError(f"unknown compression codec {codec}")
    raw = message.value or b""
    if codec == Compression.LZ4 and message.magic == MAGIC_V0:
        raw = _lz4_with_header_checksum(raw, broken=False)
    try:
        inner = list(iter_messages(decompress(Compression(codec), raw)))
    except (cramjam.DecompressionError, ValueError, struct.error) as e:
        raise CorruptMessageError(f"wrapper message does not decompress: {e}") from e
    log_append = bool(message.attributes & ATTR_TIMESTAMP_TYPE)
    out = []
    for m in inner:
        if m.magic != message.magic:
            raise InvalidRecordError("a record's magic differs from its wrapper's")
        if m.codec != Compression.NONE:
            raise InvalidRecordError("a compressed message inside a compressed message")
        timestamp = message.timestamp if log_append else m.timestamp
        out.append(Message(m.offset, m.magic, m.attributes, timestamp, m.key, m.value))
    return out


def up_convert(message_set: Buffer) -> bytes:
    """One v2 batch of the message set's records, under the codec of its (last)
    compressed message, as Kafka keeps a producer's codec; offsets and the batch's
    leader epoch are the log's to assign."""
    records: list[Message] = []
    codec = Compression.NONE
    for message in iter_messages(message_set):
        records.extend(records_of(message))  # refuses codecs of no id
        if message.codec != Compression.NONE:
            codec = Compression(message.codec)
    if not records:
        raise CorruptMessageError("no records")
    return build_batch(
        [(r.key, r.value) for r in records],
        timestamps=[r.timestamp for r in records],
        compression=codec,
    )


# -- writing (Fetch v0-v3) -------------------------------------------------------------


def message(
    magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """A message (without its offset and size)."""
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == MAGIC_V1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += _I32.pack(-1) if field is None else _I32.pack(len(field)) + field
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(offset: int, msg: bytes) -> bytes:
    return _ENTRY.pack(offset, len(msg)) + msg


def down_convert(batches: Buffer, magic: int, first_offset: int) -> bytes:
    """The records of whole v2 batches at or after `first_offset` as a message set
    of `magic` (0 or 1): one message per record of an uncompressed batch, one wrapper
    under the same codec for a compressed one. Control batches and record headers
    have no place in the old formats and are left out, as Kafka leaves them out."""
    out = bytearray()
    for batch in split_batches(batches):
        h = BatchHeader.parse(batch)
        if h.is_control:
            continue
        if h.compression == Compression.ZSTD:
            raise UnsupportedCompressionTypeError(
                "a zstd batch cannot be read with the message formats of Fetch v0-v9"
            )
        records = [r for r in iter_records(batch) if r.offset >= first_offset]
        if not records:
            continue
        ts_bit = 0
        if magic == MAGIC_V1 and h.timestamp_type == TimestampType.LOG_APPEND_TIME:
            ts_bit = ATTR_TIMESTAMP_TYPE
        if h.compression == Compression.NONE:
            for r in records:
                out += entry(r.offset, message(magic, ts_bit, r.timestamp, r.key, r.value))
            continue
        base = records[0].offset if magic == MAGIC_V1 else 0
        inner = b"".join(
            entry(r.offset - base, message(magic, ts_bit, r.timestamp, r.key, r.value))
            for r in records
        )
        value = compress(h.compression, inner)
        if h.compression == Compression.LZ4 and magic == MAGIC_V0:
            value = _lz4_with_header_checksum(value, broken=True)
        max_ts = max(r.timestamp for r in records)
        wrapper = message(magic, int(h.compression) | ts_bit, max_ts, None, value)
        out += entry(records[-1].offset, wrapper)
    return bytes(out)


def cut_message_set(data: bytes, limit: int, min_one_message: bool) -> bytes:
    """The message set cut to at most `limit` bytes at a message boundary; if even the
    first message is larger, that whole message when `min_one_message` (Fetch v3),
    else its first `limit` bytes (v0-v2: the client learns the message is too large
    for its fetch size, as from Kafka)."""
    limit = max(limit, 0)  # a client may ask for a negative size
    pos = 0
    while pos + ENTRY_OVERHEAD <= len(data):
        (size,) = _I32.unpack_from(data, pos + 8)
        end = pos + ENTRY_OVERHEAD + size
        if end > limit:
            if pos == 0:
                return data[:end] if min_one_message else data[:limit]
            break
        pos = end
    return data[:pos]


# -- LZ4 frames of Kafka 0.8-0.9 -------------------------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_FLAG_CONTENT_SIZE = 0x08


def _lz4_with_header_checksum(frame: bytes, broken: bool) -> bytes:
    """The frame with its header checksum made right (`broken=False`) or as Kafka
    0.8-0.9 wrote it in magic 0 (`broken=True`: over the magic number too, KAFKA-3160)."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise CorruptMessageError("not an LZ4 frame")
    end = 6 + (8 if frame[4] & _FLAG_CONTENT_SIZE else 0)  # FLG, BD, content size
    if len(frame) <= end:
        raise CorruptMessageError("LZ4 frame ends in its header")
    covered = frame[0 if broken else 4 : end]
    checksum = (_xxh32_short(covered) >> 8) & 0xFF
    return frame[:end] + bytes([checksum]) + frame[end + 1 :]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (an LZ4 frame descriptor), for which
    the hash skips its four-lane loop."""
    assert len(data) < 16
    h = (_P5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, i)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    for b in data[i:]:
        h = (_rotl((h + b * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)
