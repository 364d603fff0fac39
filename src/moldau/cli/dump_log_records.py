"""kafka-dump-log's view of a `.log` segment: one line a batch, and with
--deep-iteration (or --print-data-log) one line a record, in Kafka's words.

The file is opened read-only and read by position (pread): the tool takes no lock
and writes nothing, so it can run on a live broker's files. It reads up to the size
the file had when opened, one batch in memory at a time, so a 1 GB segment costs
one batch of memory; a batch a broker is still writing shows as bytes past the last
whole batch, as with Kafka's tool. Batches and records are read by
moldau.protocol.records and legacy_records, the broker's own code.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from moldau.cli.progress import Progress
from moldau.protocol import legacy_records
from moldau.protocol.errors import CorruptMessageError, InvalidRecordError
from moldau.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    Compression,
    ControlRecordType,
    TimestampType,
    compute_crc,
    iter_records,
    read_end_txn_marker,
)
from moldau.protocol.wire import DecodeError
from moldau.storage.segment import pread_all

# What Kafka's file reader needs to see a batch: offset, size, leader epoch, magic.
HEADER_SIZE_UP_TO_MAGIC = 17
# The smallest entry Kafka accepts (a v0 message with no key and value).
RECORD_OVERHEAD_V0 = 14
_ENTRY_HEAD = struct.Struct(">qi")
_INT_MAX = 2**31 - 1
# Kafka's DELETE_HORIZON_FLAG: the base timestamp holds the cleaner's delete horizon.
_ATTR_DELETE_HORIZON = 0x40
_TIMESTAMP_TYPE_NAMES = {
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
# Control record types other than transaction markers (KRaft's), by Kafka's names.
_CONTROL_TYPE_NAMES = {
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
_READ_ERRORS = (CorruptMessageError, InvalidRecordError, DecodeError, struct.error, ValueError)

#: (offset, key, value) -> (key text, payload text): what --print-data-log shows.
Parser = Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]


class DumpError(Exception):
    """The file cannot be read further; the message is Kafka's where it has one."""


def string_parser(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    """Kafka's StringDecoder for keys and values."""
    return _text(key), _text(value)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


@dataclass
class LogDumpOptions:
    deep: bool = False
    print_data: bool = False
    parser: Parser = string_parser
    skip_record_metadata: bool = False
    max_bytes: int | None = None


@dataclass
class LogDumpResult:
    #: (offset, the offset after it) where a record's offset is not the last + 1.
    non_consecutive: list[tuple[int, int]] = field(default_factory=list)


def dump_log(
    path: str, out: TextIO, options: LogDumpOptions, progress: Progress | None = None
) -> LogDumpResult:
    name = os.path.basename(path)
    out.write(f"Log starting offset: {int(name.split('.')[0])}\n")
    result = LogDumpResult()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        end = size if options.max_bytes is None else min(size, options.max_bytes)
        if progress is not None:
            progress.total = end
        last_offset = -1
        valid_bytes = 0
        for position, data in file_batches(fd, end, path):
            magic = data[16]
            if magic >= MAGIC_V2:
                lines = _v2_batch(data, position, options)
            else:
                lines = _legacy_batch(data, position, options)
            for line, offset in lines:
                out.write(line + "\n")
                if offset is None:
                    continue
                if last_offset != -1 and offset != last_offset + 1:
                    result.non_consecutive.append((last_offset, offset))
                last_offset = offset
            valid_bytes += len(data)
            if progress is not None:
                progress.update(valid_bytes)
        trailing = end - valid_bytes
        if trailing > 0 and options.max_bytes is None:
            out.write(f"Found {trailing} invalid bytes at the end of {name}\n")
    finally:
        os.close(fd)
    return result


def file_batches(
    fd: int, end: int, path: str, start: int = 0, whole: bool = True
) -> Iterator[tuple[int, bytes]]:
    """(position, bytes) of each whole batch (or legacy entry) in [start, end), as
    Kafka's FileLogInputStream walks them: a torn last one ends the walk; a size no
    entry can have is Kafka's CorruptRecordException. Without `whole`, only each
    batch's header is read."""
    position = start
    while position < end - HEADER_SIZE_UP_TO_MAGIC:
        _, size = _ENTRY_HEAD.unpack(os.pread(fd, LOG_OVERHEAD, position))
        if size < RECORD_OVERHEAD_V0:
            raise DumpError(
                f"Found record size {size} smaller than minimum record overhead "
                f"({RECORD_OVERHEAD_V0}) in file {path}."
            )
        if position > end - LOG_OVERHEAD - size:
            return
        wanted = LOG_OVERHEAD + size if whole else min(HEADER_SIZE, LOG_OVERHEAD + size)
        data = pread_all(fd, position, wanted)
        if len(data) < wanted:
            return  # the file shrank under us (a broker truncating it)
        yield position, data
        position += LOG_OVERHEAD + size


def _codec_name(attributes: int) -> str:
    codec = attributes & ATTR_COMPRESSION_MASK
    try:
        return Compression(codec).name.lower()
    except ValueError:
        raise DumpError(f"Unknown compression type id: {codec}") from None


def _next_sequence(base: int, delta: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps past Integer.MAX_VALUE."""
    if base < 0:
        return -1
    return (base + delta) % (_INT_MAX + 1)


def _v2_batch(
    data: bytes, position: int, options: LogDumpOptions
) -> Iterator[tuple[str, int | None]]:
    if len(data) < HEADER_SIZE:
        raise DumpError(
            f"Record batch size {len(data)} is smaller than the minimum allowed ({HEADER_SIZE})"
        )
    h = BatchHeader.parse(data)
    timestamp_type = _TIMESTAMP_TYPE_NAMES[h.timestamp_type]
    horizon = (
        f"OptionalLong[{h.base_timestamp}]"
        if h.attributes & _ATTR_DELETE_HORIZON
        else "OptionalLong.empty"
    )
    valid = h.crc == compute_crc(data)
    yield (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} "
        f"lastSequence: {_next_sequence(h.base_sequence, h.last_offset_delta)} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
        f"deleteHorizonMs: {horizon} position: {position} {timestamp_type}: {h.max_timestamp} "
        f"size: {len(data)} magic: {h.magic} compresscodec: {_codec_name(h.attributes)} "
        f"crc: {h.crc} isvalid: {_bool(valid)}",
        None,
    )
    if not options.deep:
        return
    try:
        # (A control batch the cleaner emptied has no record to name its type.)
        control = _control_text(data) if h.is_control and h.records_count else ""
        for r in iter_records(data):
            prefix = "| "
            line = ""
            if not options.skip_record_metadata:
                sequence = _next_sequence(h.base_sequence, r.offset - h.base_offset)
                keys = ",".join(k for k, _ in r.headers)
                line = (
                    f"{prefix}offset: {r.offset} {timestamp_type}: {r.timestamp} "
                    f"keySize: {_size(r.key)} valueSize: {_size(r.value)} "
                    f"sequence: {sequence} headerKeys: [{keys}]{control}"
                )
                prefix = " "
            if options.print_data and not h.is_control:
                line += _contents(options.parser, r.offset, r.key, r.value, prefix)
            yield line, r.offset
    except _READ_ERRORS as e:
        raise DumpError(f"batch at position {position} cannot be read: {e}") from e


def _control_text(batch: bytes) -> str:
    key = next(iter_records(batch)).key or b""
    kind = struct.unpack_from(">h", key, 2)[0] if len(key) >= 4 else -1
    if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        marker, coordinator_epoch = read_end_txn_marker(batch)
        return f" endTxnMarker: {marker.name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {_CONTROL_TYPE_NAMES.get(kind, 'UNKNOWN')}({kind})"


def _contents(
    parser: Parser, offset: int, key: bytes | None, value: bytes | None, prefix: str
) -> str:
    key_text, payload = parser(offset, key, value)
    text = ""
    if key_text is not None:
        text += f"{prefix}key: {key_text}"
    if payload is not None:
        text += f" payload: {payload}"
    return text


def _legacy_batch(
    data: bytes, position: int, options: LogDumpOptions
) -> Iterator[tuple[str, int | None]]:
    """A v0/v1 entry (a message, or a wrapper of compressed messages): what logs
    written before Kafka 0.11 hold. Moldau writes none; Kafka's old segments do."""
    offset = _ENTRY_HEAD.unpack_from(data)[0]
    body = memoryview(data)[LOG_OVERHEAD:]
    try:
        message = legacy_records.parse_message(offset, body, check_crc=False)
    except _READ_ERRORS as e:
        raise DumpError(f"message at position {position} cannot be read: {e}") from e
    crc = struct.unpack_from(">I", body)[0]
    timestamp_type = _legacy_timestamp_type(message.magic, message.attributes)
    yield (
        f"offset: {offset} position: {position} {timestamp_type}: {message.timestamp} "
        f"size: {len(data)} magic: {message.magic} "
        f"compresscodec: {_codec_name(message.attributes)} crc: {crc} "
        f"isvalid: {_bool(legacy_records.crc_valid(body))}",
        None,
    )
    if not options.deep:
        return
    try:
        inner = legacy_records.records_of(message)
    except _READ_ERRORS as e:
        raise DumpError(f"message at position {position} cannot be read: {e}") from e
    compressed = message.codec != Compression.NONE
    # Magic 1 wrappers number their records from 0; the wrapper holds the last's offset.
    base = offset - inner[-1].offset if compressed and message.magic == 1 else 0
    for m in inner:
        m_crc = crc if not compressed else _message_crc(m)
        line = ""
        prefix = "| "
        if not options.skip_record_metadata:
            line = (
                f"{prefix}offset: {base + m.offset} "
                f"{_legacy_timestamp_type(m.magic, message.attributes)}: {m.timestamp} "
                f"keySize: {_size(m.key)} valueSize: {_size(m.value)} "
                # Kafka's tool prints a stray brace here; kept so outputs compare.
                f"isValid: true crc: {m_crc}}}"
            )
            prefix = " "
        if options.print_data:
            line += _contents(options.parser, base + m.offset, m.key, m.value, prefix)
        yield line, base + m.offset


def _message_crc(m: legacy_records.Message) -> int:
    encoded = legacy_records.message(m.magic, m.attributes, m.timestamp, m.key, m.value)
    return int(struct.unpack_from(">I", encoded)[0])


def _legacy_timestamp_type(magic: int, attributes: int) -> str:
    if magic == 0:
        return "NoTimestampType"
    return "LogAppendTime" if attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"


def _size(b: bytes | None) -> int:
    return -1 if b is None else len(b)


def _bool(b: bool) -> str:
    return "true" if b else "false"
