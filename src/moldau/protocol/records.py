"""Kafka record batches (magic v2): the 61-byte header, CRC32C, and, where a feature
needs it, the records inside.

The append path looks at the header (`BatchHeader.parse`, `validate_batch`), and at
each record's timestamp and key (`record_stamps_and_keys`) only where Kafka's
per-record checks need them. Decoding records (`iter_records`) is for features that
need them: exact offset-by-timestamp lookups, compaction, tests.

Layout of the header (big-endian):
  0 baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
  17 crc uint32 (covers byte 21 to the end) | 21 attributes int16 | 23 lastOffsetDelta int32
  27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64
  51 producerEpoch int16 | 53 baseSequence int32 | 57 recordsCount int32 | 61 records
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

import cramjam
import crc32c

from moldau.protocol.errors import CorruptMessageError, InvalidRecordError
from moldau.protocol.wire import Buffer, DecodeError

HEADER_SIZE = 61
# baseOffset + batchLength: the part of the header outside batchLength's count.
LOG_OVERHEAD = 12
MAGIC_V2 = 2

OFFSET_BASE = 0
OFFSET_LENGTH = 8
OFFSET_LEADER_EPOCH = 12
OFFSET_MAGIC = 16
OFFSET_CRC = 17
OFFSET_ATTRIBUTES = 21
OFFSET_MAX_TIMESTAMP = 35

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH = struct.Struct(">qi")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # set: LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_TIMESTAMP = -1


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: Buffer, pos: int = 0) -> BatchHeader:
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptMessageError(f"record batch shorter than {HEADER_SIZE} bytes")
        return cls(*_HEADER.unpack_from(buf, pos))

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in the log."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


def offset_and_length(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """baseOffset and batchLength of the batch at `pos` (its first 12 bytes)."""
    base, length = _OFFSET_LENGTH.unpack_from(buf, pos)
    return int(base), int(length)


# The low byte of the attributes, which holds the codec: the end of what a batch's
# codec takes to read.
CODEC_BYTE = OFFSET_ATTRIBUTES + 1


def codecs_of(read: Callable[[int, int], Buffer], start: int, end: int) -> set[Compression]:
    """The codec of each whole batch in [start, end) of what `read(position, size)`
    reads: one small read per batch, its records untouched."""
    codecs = set()
    pos = start
    while pos + CODEC_BYTE + 1 <= end:
        head = read(pos, CODEC_BYTE + 1)
        if len(head) < CODEC_BYTE + 1:
            break
        _, length = offset_and_length(head)
        if length < 0 or pos + LOG_OVERHEAD + length > end:
            break
        codecs.add(Compression(head[CODEC_BYTE] & ATTR_COMPRESSION_MASK))
        pos += LOG_OVERHEAD + length
    return codecs


def compute_crc(batch: Buffer) -> int:
    return int(crc32c.crc32c(memoryview(batch)[OFFSET_ATTRIBUTES:]))


def validate_batch(batch: Buffer) -> BatchHeader:
    """Check one v2 batch that arrived in a Produce request: size, magic, CRC32C,
    and header fields whose nonsense Kafka refuses. No record is decoded."""
    h = validate_replicated_batch(batch)
    if h.records_count <= 0:
        raise InvalidRecordError("record batch has no records")
    if h.records_count != h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch count {h.records_count} does not match "
            f"lastOffsetDelta {h.last_offset_delta}"
        )
    if h.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise InvalidRecordError(
            f"base sequence {h.base_sequence} of producer id {h.producer_id} is negative"
        )
    return h


def validate_replicated_batch(batch: Buffer) -> BatchHeader:
    """Check one v2 batch a follower fetched from its leader: size, magic, CRC32C,
    codec. Unlike a producer's, a batch the log cleaner rewrote holds fewer records
    than its offsets span, or none (Kafka keeps an empty batch for a producer's last
    sequence), so the count is only bounded by lastOffsetDelta + 1."""
    h = BatchHeader.parse(batch)
    if h.magic != MAGIC_V2:
        raise InvalidRecordError(f"record batch magic {h.magic} is not supported (only v2)")
    if h.batch_length != len(batch) - LOG_OVERHEAD:
        raise CorruptMessageError(
            f"record batch length {h.batch_length} does not match its {len(batch)} bytes"
        )
    if h.crc != compute_crc(batch):
        raise CorruptMessageError("record batch CRC32C mismatch")
    if h.last_offset_delta < 0 or not 0 <= h.records_count <= h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"record batch count {h.records_count} does not fit "
            f"lastOffsetDelta {h.last_offset_delta}"
        )
    if h.compression > Compression.ZSTD:
        raise InvalidRecordError(f"unknown compression codec {h.compression}")
    return h


def split_batches(records: Buffer) -> list[memoryview]:
    """Split a records field into whole batches; a torn last batch is an error."""
    view = memoryview(records)
    out = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD:
            raise CorruptMessageError("truncated record batch")
        _, length = offset_and_length(view, pos)
        end = pos + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or end > len(view):
            raise CorruptMessageError("truncated record batch")
        out.append(view[pos:end])
        pos = end
    return out


# -- records inside a batch ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """A zig-zag varint (records use signed varints)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")
    return (value >> 1) ^ -(value & 1), pos


def zigzag(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class RecordsDecompressionError(CorruptMessageError):
    """A batch's payload does not decompress (its CRC matched: the producer's
    compressor wrote it so)."""


def decompress(codec: Compression, data: Buffer) -> bytes:
    """The records of a batch's payload; RecordsDecompressionError (a
    CorruptMessageError) if they do not decompress."""
    try:
        return _decompress(codec, data)
    except (cramjam.DecompressionError, struct.error) as e:
        raise RecordsDecompressionError(
            f"{codec.name.lower()} records do not decompress: {e}"
        ) from e


def _decompress(codec: Compression, data: Buffer) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(bytes(data)))
    if codec == Compression.SNAPPY:
        raw = bytes(data)
        if raw.startswith(_XERIAL_MAGIC):
            # Java's xerial framing: 16-byte header, then (int32 size, block)*.
            out = bytearray()
            pos = 16
            while pos < len(raw):
                (n,) = struct.unpack_from(">i", raw, pos)
                out += bytes(cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise InvalidRecordError(f"unknown compression codec {codec}")


_LZ4_KAFKA_DEFAULT = 9


def compress(codec: Compression, data: bytes, level: int | None = None) -> bytes:
    """`level`: the codec's level (Kafka's compression.<codec>.level), None for the
    library's default; gzip's -1 is zlib's default."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=None if level == -1 else level))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        # Kafka's default level, 9, means lz4's fast compressor (any other, HC): lz4
        # frame levels below 3 are that fast mode. Kafka reads only frames of
        # independent blocks (cramjam.lz4.compress links them).
        frame = cramjam.lz4.Compressor(
            level=1 if level == _LZ4_KAFKA_DEFAULT else level, block_linked=False
        )
        frame.compress(data)
        return bytes(frame.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise InvalidRecordError(f"unknown compression codec {codec}")


def iter_records(batch: Buffer) -> Iterator[Record]:
    """Decode the records of one batch (decompressing if needed)."""
    h = BatchHeader.parse(batch)
    body = decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size])
    pos = 0
    log_append = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    for _ in range(h.records_count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise CorruptMessageError("record runs past its batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = _varint(body, pos)
        off_delta, pos = _varint(body, pos)
        key, pos = _varbytes(body, pos)
        value, pos = _varbytes(body, pos)
        n_headers, pos = _varint(body, pos)
        headers = []
        for _ in range(n_headers):
            hk, pos = _varbytes(body, pos)
            hv, pos = _varbytes(body, pos)
            headers.append(((hk or b"").decode("utf-8", "replace"), hv))
        if pos != end:
            raise CorruptMessageError("record length does not match its fields")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        yield Record(h.base_offset + off_delta, ts, key, value, tuple(headers))


def record_stamps_and_keys(batch: Buffer) -> Iterator[tuple[int, int]]:
    """(timestamp, key length, -1 for none) of each record of one batch, in order:
    what produce validation asks of a record. Keys, values and headers are skipped,
    not copied; a compressed batch is decompressed."""
    h = BatchHeader.parse(batch)
    # bytes, also uncompressed: indexing it is three times faster than a memoryview's.
    body = decompress(h.compression, memoryview(batch)[HEADER_SIZE : h.size])
    log_append = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    pos = 0
    for index in range(h.records_count):
        try:
            length, pos = _varint(body, pos)
            end = pos + length
            if length < 0 or end > len(body):
                raise DecodeError("it runs past its batch")
            ts_delta, pos = _varint(body, pos + 1)  # past the attributes byte
            _, pos = _varint(body, pos)  # offset delta
            key_length, _ = _varint(body, pos)
        except DecodeError as e:
            # Kafka's answer to a record it cannot read (DefaultRecord.readFrom).
            raise InvalidRecordError(f"record {index} of the batch cannot be read: {e}") from e
        yield (h.max_timestamp if log_append else h.base_timestamp + ts_delta), key_length
        pos = end


def _varbytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptMessageError("record field runs past its batch")
    return buf[pos : pos + n], pos + n


# (key, value) or (key, value, headers)
NewRecord = (
    tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
)


def build_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    compression: Compression = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    log_append_time: bool = False,
    transactional: bool = False,
) -> bytes:
    """Encode a v2 batch of (key, value[, headers]) records. Used to write the
    broker's own records (e.g. committed offsets) and by tests."""
    body = bytearray()
    stamps = list(timestamps) if timestamps is not None else [timestamp] * len(records)
    # The first record's, as producers write it (not the oldest: deltas may be negative).
    base_ts = stamps[0] if stamps else timestamp
    for i, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers: Sequence[tuple[str, bytes | None]] = rec[2] if len(rec) == 3 else ()
        r = bytearray(b"\x00")
        r += zigzag(stamps[i] - base_ts)
        r += zigzag(i)
        for field in (key, value):
            if field is None:
                r += zigzag(-1)
            else:
                r += zigzag(len(field)) + field
        r += zigzag(len(headers))
        for hk, hv in headers:
            hkb = hk.encode()
            r += zigzag(len(hkb)) + hkb
            r += zigzag(-1) if hv is None else zigzag(len(hv)) + hv
        body += zigzag(len(r)) + r
    payload = compress(compression, bytes(body), compression_level)
    return wrap_records(
        payload,
        len(records),
        base_timestamp=base_ts,
        max_timestamp=max(stamps) if stamps else timestamp,
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        log_append_time=log_append_time,
        transactional=transactional,
    )


def wrap_records(
    payload: bytes,
    count: int,
    *,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    log_append_time: bool = False,
    transactional: bool = False,
) -> bytes:
    """A v2 batch of `count` records already encoded (and compressed) as `payload`."""
    attributes = int(compression) | (ATTR_TIMESTAMP_TYPE if log_append_time else 0)
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    header = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            count - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    batch = header + payload
    struct.pack_into(">I", batch, OFFSET_CRC, compute_crc(batch))
    return bytes(batch)


def recompress(batch: Buffer, codec: Compression, level: int | None = None) -> bytes:
    """The same batch with its records re-encoded under `codec` (for topics whose
    compression.type is not `producer`). Offsets, timestamps, headers, producer
    fields and attributes other than the codec are kept."""
    h = BatchHeader.parse(batch)
    records = list(iter_records(batch))
    out = bytearray(
        build_batch(
            [(r.key, r.value, r.headers) for r in records],
            base_offset=h.base_offset,
            timestamps=[r.timestamp for r in records],
            compression=codec,
            compression_level=level,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=h.base_sequence,
            partition_leader_epoch=h.partition_leader_epoch,
        )
    )
    # Keep the original header fields the records do not determine.
    attributes = (h.attributes & ~ATTR_COMPRESSION_MASK) | int(codec)
    struct.pack_into(">h", out, OFFSET_ATTRIBUTES, attributes)
    struct.pack_into(">iqq", out, 23, h.last_offset_delta, h.base_timestamp, h.max_timestamp)
    struct.pack_into(">I", out, OFFSET_CRC, compute_crc(out))
    return bytes(out)


def empty_batch(header: BatchHeader) -> bytes:
    """The batch's header with no records (Kafka's DefaultRecordBatch.writeEmptyHeader):
    what the log cleaner keeps of a producer's last batch once every record in it is
    superseded, so that a replica rebuilding producer state from the log still learns
    the producer's epoch and last sequence. Offsets (base, lastOffsetDelta), leader
    epoch, producer id, epoch and base sequence, maxTimestamp, the timestamp type and
    the transactional and control bits stay; no codec, baseTimestamp -1, no records."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    out = bytearray(
        _HEADER.pack(
            header.base_offset,
            HEADER_SIZE - LOG_OVERHEAD,
            header.partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            header.last_offset_delta,
            NO_TIMESTAMP,
            header.max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            0,
        )
    )
    struct.pack_into(">I", out, OFFSET_CRC, compute_crc(out))
    return bytes(out)


def rebuild_batch(batch: Buffer, keep: Sequence[Record], level: int | None = None) -> bytes:
    """The batch with only `keep` of its records (as the log cleaner writes it): the
    header's offsets range, producer fields, codec and timestamp type stay; each
    record keeps its offset and timestamp. `level`: the codec's level (see
    `compress`)."""
    h = BatchHeader.parse(batch)
    body = bytearray()
    for r in keep:
        rec = bytearray(b"\x00")
        rec += zigzag(r.timestamp - h.base_timestamp)
        rec += zigzag(r.offset - h.base_offset)
        for field in (r.key, r.value):
            rec += zigzag(-1) if field is None else zigzag(len(field)) + field
        rec += zigzag(len(r.headers))
        for hk, hv in r.headers:
            hkb = hk.encode()
            rec += zigzag(len(hkb)) + hkb
            rec += zigzag(-1) if hv is None else zigzag(len(hv)) + hv
        body += zigzag(len(rec)) + rec
    payload = compress(h.compression, bytes(body), level)
    out = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", out, OFFSET_LENGTH, HEADER_SIZE - LOG_OVERHEAD + len(payload))
    struct.pack_into(">i", out, 57, len(keep))
    out += payload
    struct.pack_into(">I", out, OFFSET_CRC, compute_crc(out))
    return bytes(out)


# -- transaction markers (control batches) ---------------------------------------------


class ControlRecordType(IntEnum):
    """The type a control record's key names (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1


_CONTROL_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_CONTROL_VERSION = 0


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The control batch that ends a producer's transaction on a partition (Kafka's
    MemoryRecords.withEndTransactionMarker): transactional and control, no base
    sequence, one record whose key names the type and whose value carries the
    coordinator epoch. Its offsets are assigned on append."""
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    key = _CONTROL_KEY.pack(_CONTROL_VERSION, kind)
    value = _MARKER_VALUE.pack(_CONTROL_VERSION, coordinator_epoch)
    batch = bytearray(
        build_batch(
            [(key, value)],
            timestamp=timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            partition_leader_epoch=partition_leader_epoch,
            transactional=True,
        )
    )
    struct.pack_into(">h", batch, OFFSET_ATTRIBUTES, ATTR_TRANSACTIONAL | ATTR_CONTROL)
    struct.pack_into(">I", batch, OFFSET_CRC, compute_crc(batch))
    return bytes(batch)


def read_end_txn_marker(batch: Buffer) -> tuple[ControlRecordType, int]:
    """(type, coordinator epoch) of a transaction marker batch. A control batch
    whose record is not a marker, or cannot be read, is refused."""
    h = BatchHeader.parse(batch)
    if not h.is_control:
        raise InvalidRecordError("not a control batch")
    try:
        records = list(iter_records(batch))
    except DecodeError as e:
        raise CorruptMessageError(f"control record cannot be read: {e}") from e
    if len(records) != 1:
        raise InvalidRecordError(f"a control batch holds {len(records)} records, not 1")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError("control record has no valid key")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version} is invalid")
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control record type {kind} is not a transaction marker")
    # Kafka reads the fields it knows of a newer version and ignores the rest.
    if value is None or len(value) < _MARKER_VALUE.size:
        raise InvalidRecordError("transaction marker has no valid value")
    value_version, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecordError(f"transaction marker version {value_version} is invalid")
    return ControlRecordType(kind), int(coordinator_epoch)
