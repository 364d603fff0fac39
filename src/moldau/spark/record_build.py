"""The Spark sink's records built from Arrow columns in bulk, with no Python object
per row: the records of a v2 batch (keys, values and headers), and Kafka's Java
partitioner (murmur2 of the key) for every row.

Measured (bench/RESULTS.md), a task spent 1.3 µs of CPU a row handing rows one by
one to confluent-kafka, against 0.1 µs the broker spent on them: the per-row work
was the write's bound. The C helper (_record_build.c, built by pip, optional) does
both jobs; the Python functions here do the same, slower, where it is missing, and
the tests hold the two equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from moldau.protocol.records import zigzag

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """An Arrow binary column as the builders take it: int32 offsets rebased to the
    column's first row, its data, and a null flag per row (None: no nulls)."""

    offsets: I32
    data: memoryview
    nulls: U8 | None

    @classmethod
    def of(cls, array: pa.Array) -> BinaryColumn:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if not pa.types.is_binary(array.type):
            # Spark's strings are utf8 and its binaries binary: same layout.
            array = array.cast(pa.binary())
        _validity, offsets_buf, data_buf = array.buffers()
        n = len(array)
        offsets = np.frombuffer(offsets_buf, dtype=np.int32)[array.offset : array.offset + n + 1]
        data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
        nulls = None
        if array.null_count:
            nulls = np.asarray(array.is_null(), dtype=np.uint8)
        return cls(offsets, data, nulls)

    def get(self, row: int) -> bytes | None:
        if self.nulls is not None and self.nulls[row]:
            return None
        return bytes(self.data[self.offsets[row] : self.offsets[row + 1]])


@dataclass(frozen=True, slots=True)
class HeaderColumn:
    """Spark's `headers` column (array<struct<key: string, value: binary>>) as the
    builders take it: each row's headers are entries offsets[row]..offsets[row + 1]
    of `keys` and `values`; a null row has none."""

    offsets: I32
    nulls: U8 | None
    keys: BinaryColumn
    values: BinaryColumn

    @classmethod
    def of(cls, array: pa.Array) -> HeaderColumn:
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        # The list's offsets point into its whole child (a slice keeps the child
        # whole); the child's fields, flattened, carry the null entries as nulls.
        keys, values = array.values.flatten()
        if keys.null_count:
            # Kafka's headers have keys (the Java client refuses a null one).
            raise ValueError("a header's key is null")
        nulls = None
        if array.null_count:
            nulls = np.asarray(array.is_null(), dtype=np.uint8)
        return cls(
            np.asarray(array.offsets, dtype=np.int32),
            nulls,
            BinaryColumn.of(keys),
            BinaryColumn.of(values),
        )

    def get(self, row: int) -> list[tuple[bytes, bytes | None]]:
        if self.nulls is not None and self.nulls[row]:
            return []
        entries = range(int(self.offsets[row]), int(self.offsets[row + 1]))
        return [(self.keys.get(h) or b"", self.values.get(h)) for h in entries]


def _field(data: bytes | None) -> bytes:
    return zigzag(-1) if data is None else zigzag(len(data)) + data


def build_py(
    key: BinaryColumn | None,
    value: BinaryColumn,
    rows: I64,
    headers: HeaderColumn | None = None,
) -> bytes:
    """The records (timestamp delta 0, offset delta i) of `rows`."""
    out = bytearray()
    for i, row in enumerate(rows.tolist()):
        body = bytearray(b"\x00\x00") + zigzag(i)
        body += _field(None if key is None else key.get(row))
        body += _field(value.get(row))
        entries = [] if headers is None else headers.get(row)
        body += zigzag(len(entries))
        for k, v in entries:
            body += _field(k) + _field(v)
        out += zigzag(len(body)) + body
    return bytes(out)


def murmur2_py(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), unsigned."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    quads = length // 4
    for i in range(quads):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[4 * quads :]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


def partitions_py(key: BinaryColumn, count: int, partitions: int) -> I32:
    """Each row's partition by its key (-1 for a null key), as the Java producer."""
    out = np.empty(count, dtype=np.int32)
    for row in range(count):
        k = key.get(row)
        out[row] = -1 if k is None else (murmur2_py(k) & 0x7FFFFFFF) % partitions
    return out


class Build(Protocol):
    def __call__(
        self,
        key: BinaryColumn | None,
        value: BinaryColumn,
        rows: I64,
        headers: HeaderColumn | None = None,
    ) -> bytes: ...


Partition = Callable[[BinaryColumn, int, int], I32]


def _load_c() -> tuple[Build, Partition] | None:
    try:
        from moldau.spark import _record_build  # type: ignore[attr-defined]
    except ImportError:
        return None

    def build_c(
        key: BinaryColumn | None,
        value: BinaryColumn,
        rows: I64,
        headers: HeaderColumn | None = None,
    ) -> bytes:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        k: tuple[object, ...] = (None,) * 3 if key is None else (key.offsets, key.data, key.nulls)
        h: tuple[object, ...] = (None,) * 7
        if headers is not None:
            hk, hv = headers.keys, headers.values
            h = (headers.offsets, headers.nulls, hk.offsets, hk.data, hv.offsets, hv.data, hv.nulls)
        return bytes(_record_build.build(*k, value.offsets, value.data, value.nulls, rows, *h))

    def partitions_c(key: BinaryColumn, count: int, partitions: int) -> I32:
        raw = _record_build.murmur2(key.offsets, key.data, key.nulls, count, partitions)
        return np.frombuffer(raw, dtype=np.int32)

    return build_c, partitions_c


_C = _load_c()
#: Whether the C helper is in use (the tests check both ways against each other).
COMPILED = _C is not None
build: Build = _C[0] if _C is not None else build_py
key_partitions: Partition = _C[1] if _C is not None else partitions_py
