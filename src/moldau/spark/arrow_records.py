"""The records of one partition's Fetch answer as Arrow columns in the source's
schema, with no Python object per record.

The answer's records field is a run of v2 batches (the last may be cut short by the
fetch's byte limit). Each batch's header is read once; its records' fields are
located by a varint walk (moldau.spark.record_walk, in C when built), and every
column is then made with numpy over all batches at once: offsets and timestamps by
arithmetic on the deltas, keys, values and headers as Arrow binary arrays whose
data is gathered from the fetched bytes in one pass.

Kafka's consumer rules, as its CompletedFetch applies them: control batches are
skipped; with read_committed, a transactional batch is dropped when its producer
has an aborted transaction (the answer's aborted_transactions) that started at or
before the batch's last offset and whose abort marker has not been passed yet;
LogAppendTime batches give every record the batch's max timestamp.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from moldau.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    OFFSET_MAGIC,
    BatchHeader,
    Compression,
    ControlRecordType,
    decompress,
    iter_records,
    offset_and_length,
)
from moldau.spark import record_walk
from moldau.spark.record_walk import I64, Gather, RecordLayout
from moldau.spark.schema import arrow_schema

_CONTROL_KEY_TYPE = slice(2, 4)  # a control record key: version int16, type int16


class UnsupportedRecords(Exception):
    """Records this path does not read (message format v0/v1): the caller reads
    them another way."""


@dataclass(frozen=True, slots=True)
class Decoded:
    #: The records of [start, end) in the answer, in the source's schema; None if none.
    batch: pa.RecordBatch | None
    #: Where the next fetch starts: past the last whole batch (start if none).
    next_offset: int
    #: Whether the answer held bytes but no whole batch past `start`: a batch
    #: larger than the fetch's byte limit.
    stalled: bool


@dataclass(frozen=True, slots=True)
class _Batch:
    base_offset: int
    count: int
    base_timestamp: int
    max_timestamp: int
    log_append: bool
    #: Where the batch's record bytes start in the combined buffer.
    body_at: int
    layout: RecordLayout


def _is_abort_marker(batch: memoryview) -> bool:
    for record in iter_records(batch):
        key = record.key
        return (
            key is not None
            and len(key) >= 4
            and (int.from_bytes(key[_CONTROL_KEY_TYPE], "big") == ControlRecordType.ABORT)
        )
    return False


def decode(
    records: bytes,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool,
    aborted: Sequence[tuple[int, int]] | None = None,
    compiled: bool = record_walk.COMPILED,
) -> Decoded:
    """`aborted`: None for read_uncommitted; for read_committed the answer's
    (producer id, first offset) list, empty when it has none. `compiled`: use the
    compiled helper (the default when it was built) or the Python one."""
    walker: Callable[[bytes, int], RecordLayout] = record_walk.walk_py
    gather: Gather = record_walk.gather_py
    if compiled:
        assert record_walk.walk_c is not None and record_walk.gather_c is not None
        walker, gather = record_walk.walk_c, record_walk.gather_c
    view = memoryview(records)
    size = len(records)
    batches: list[_Batch] = []
    extra: list[bytes] = []  # decompressed bodies, placed after `records`
    extra_at = size
    next_offset = start
    pending = deque(sorted(aborted or (), key=lambda a: a[1]))
    aborting: set[int] = set()
    pos = 0
    while size - pos >= HEADER_SIZE:
        _, length = offset_and_length(view, pos)
        batch_end = pos + LOG_OVERHEAD + length
        if batch_end > size:
            break  # cut short by the byte limit
        if view[pos + OFFSET_MAGIC] != MAGIC_V2:
            raise UnsupportedRecords(f"message format v{view[pos + OFFSET_MAGIC]}")
        h = BatchHeader.parse(view, pos)
        at, pos = pos, batch_end
        # A batch before the fetch's offset (the broker sends whole batches) gives
        # no records, but its transaction's state still counts.
        before = h.last_offset < next_offset
        if not before:
            next_offset = h.last_offset + 1
        if aborted is not None and h.producer_id >= 0:
            while pending and pending[0][1] <= h.last_offset:
                aborting.add(pending.popleft()[0])
            if h.is_control:
                if _is_abort_marker(view[at:batch_end]):
                    aborting.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborting:
                continue
        if before or h.is_control or h.records_count <= 0:
            continue
        if h.compression == Compression.NONE:
            body_at = at + HEADER_SIZE
            layout = walker(view[body_at:batch_end], h.records_count)  # type: ignore[arg-type]
        else:
            body = decompress(h.compression, view[at + HEADER_SIZE : batch_end])
            body_at = extra_at
            extra.append(body)
            extra_at += len(body)
            layout = walker(body, h.records_count)
        batches.append(
            _Batch(
                h.base_offset,
                len(layout.offset_delta),
                h.base_timestamp,
                h.max_timestamp,
                h.timestamp_type == 1,
                body_at,
                layout,
            )
        )
    stalled = next_offset == start and size > 0
    if not batches:
        return Decoded(None, next_offset, stalled)
    buffer = np.frombuffer(records if not extra else b"".join([records, *extra]), np.uint8)
    batch = _columns(batches, buffer, gather, topic, partition, start, end, include_headers)
    return Decoded(batch, next_offset, stalled)


def _per_record(batches: list[_Batch], values: Sequence[int], dtype: type) -> npt.NDArray[Any]:
    counts = np.fromiter((b.count for b in batches), np.int64, len(batches))
    return np.repeat(np.array(values, dtype), counts)


def _concat(batches: list[_Batch], name: str) -> I64:
    parts = [getattr(b.layout, name) for b in batches]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _columns(
    batches: list[_Batch],
    buffer: npt.NDArray[np.uint8],
    gather: Gather,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch | None:
    schema = arrow_schema(include_headers)
    offsets = _per_record(batches, [b.base_offset for b in batches], np.int64)
    offsets += _concat(batches, "offset_delta")
    log_append = _per_record(batches, [b.log_append for b in batches], np.bool_)
    timestamps = np.where(
        log_append,
        _per_record(batches, [b.max_timestamp for b in batches], np.int64),
        _per_record(batches, [b.base_timestamp for b in batches], np.int64)
        + _concat(batches, "timestamp_delta"),
    )
    body_at = _per_record(batches, [b.body_at for b in batches], np.int64)
    keep = (offsets >= start) & (offsets < end)
    everything = bool(keep.all())
    if not everything:
        offsets, log_append, timestamps, body_at = (
            offsets[keep], log_append[keep], timestamps[keep], body_at[keep]
        )  # fmt: skip
    n = len(offsets)
    if n == 0:
        return None

    def field(name: str) -> I64:
        column = _concat(batches, name)
        return column if everything else column[keep]

    columns = [
        _binary(gather, buffer, field("key_start") + body_at, field("key_length"), pa.binary()),
        _binary(gather, buffer, field("value_start") + body_at, field("value_length"), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        # Kafka's ms; Spark's timestamps are µs.
        pa.array(timestamps * 1000, pa.int64()).view(schema.field("timestamp").type),
        pa.array(log_append.astype(np.int32), pa.int32()),
    ]
    if include_headers:
        columns.append(
            _headers(batches, buffer, gather, keep, everything, schema.field("headers").type)
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _headers(
    batches: list[_Batch],
    buffer: npt.NDArray[np.uint8],
    gather: Gather,
    keep: npt.NDArray[np.bool_],
    everything: bool,
    type_: pa.DataType,
) -> pa.Array:
    counts = _concat(batches, "header_count")
    per_header_at = np.repeat(_per_record(batches, [b.body_at for b in batches], np.int64), counts)
    names = ("header_key_start", "header_key_length", "header_value_start", "header_value_length")
    ks, kl, vs, vl = (_concat(batches, n) for n in names)
    if not everything:
        header_keep = np.repeat(keep, counts)
        ks, kl, vs, vl, per_header_at = (x[header_keep] for x in (ks, kl, vs, vl, per_header_at))
        counts = counts[keep]
    key_type, value_type = type_.value_type.field("key").type, type_.value_type.field("value").type
    keys = _binary(gather, buffer, ks + per_header_at, kl, pa.binary())
    try:
        keys = keys.cast(key_type)
    except pa.ArrowInvalid:
        # Not UTF-8: as the client path shows such a key, with replacement characters.
        keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], key_type)
    values = _binary(gather, buffer, vs + per_header_at, vl, value_type)
    entries = pa.StructArray.from_arrays([keys, values], fields=list(type_.value_type))
    list_offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    # A record with no headers has null headers, as Spark's connector gives it.
    mask = pa.array(counts == 0)
    return pa.ListArray.from_arrays(pa.array(list_offsets), entries, type=type_, mask=mask)


def _binary(
    gather: Gather, buffer: npt.NDArray[np.uint8], starts: I64, lengths: I64, type_: pa.DataType
) -> pa.Array:
    """A binary column of the byte ranges (start, length) of `buffer`, in order and
    not overlapping; length -1 is null."""
    n = len(starts)
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = gather(buffer, starts, sizes, int(offsets[-1]))
    validity = None
    nulls = n - int(np.count_nonzero(valid))
    if nulls:
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    large = offsets[-1] > np.iinfo(np.int32).max
    array = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        n,
        [
            validity,
            pa.py_buffer(offsets if large else offsets.astype(np.int32)),
            pa.py_buffer(data),
        ],
        null_count=nulls,
    )
    return array.cast(type_) if large else array
