"""Where each record's fields lie in the records of one v2 batch (its body, after
decompression), and those fields' bytes gathered into one buffer: the two parts of
decoding that must look at every record, because records are a run of varints and
their fields are interleaved.

Two implementations of each with the same answer: `walk_py` and `gather_py` in
Python (+numpy), and `walk_c` and `gather_c` from the optional compiled helper
(moldau.spark._record_walk, built from _record_walk.c when the package is
installed with a C compiler present). `walk` and `gather` are the C ones when it
was built; `COMPILED` says whether it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from moldau.protocol.errors import CorruptMessageError

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Per record: offset and timestamp deltas, and the start and length of its key
    and value in the body (length -1: null); its header count. Per header, in
    record order: the start and length of its key and value."""

    offset_delta: I64
    timestamp_delta: I64
    key_start: I64
    key_length: I64
    value_start: I64
    value_length: I64
    header_count: I64
    header_key_start: I64
    header_key_length: I64
    header_value_start: I64
    header_value_length: I64


def _corrupt(reason: str) -> CorruptMessageError:
    return CorruptMessageError(f"record batch cannot be read: {reason}")


def walk_py(body: bytes, count: int) -> RecordLayout:
    n = len(body)
    od: list[int] = []
    td: list[int] = []
    ks: list[int] = []
    kl: list[int] = []
    vs: list[int] = []
    vl: list[int] = []
    hc: list[int] = []
    hks: list[int] = []
    hkl: list[int] = []
    hvs: list[int] = []
    hvl: list[int] = []

    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= n:
                raise _corrupt("truncated varint")
            b = body[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return (value >> 1) ^ -(value & 1), pos
            shift += 7
            if shift > 63:
                raise _corrupt("varint too long")

    pos = 0
    for _ in range(count):
        length, pos = varint(pos)
        end = pos + length
        if length < 0 or end > n:
            raise _corrupt("a record runs past its batch")
        t, pos = varint(pos + 1)  # past the attributes byte
        o, pos = varint(pos)
        td.append(t)
        od.append(o)
        for starts, lengths in ((ks, kl), (vs, vl)):
            size, pos = varint(pos)
            starts.append(pos)
            lengths.append(size)
            if size > 0:
                pos += size
        headers, pos = varint(pos)
        if headers < 0:
            raise _corrupt("negative header count")
        hc.append(headers)
        for _ in range(headers):
            size, pos = varint(pos)
            if size < 0:
                raise _corrupt("a header has a null key")
            hks.append(pos)
            hkl.append(size)
            pos += size
            size, pos = varint(pos)
            hvs.append(pos)
            hvl.append(size)
            if size > 0:
                pos += size
        if pos != end:
            raise _corrupt("a record's length does not match its fields")
    a = np.array
    return RecordLayout(*(a(x, np.int64) for x in (od, td, ks, kl, vs, vl, hc, hks, hkl, hvs, hvl)))


U8 = npt.NDArray[np.uint8]
_TOO_MANY_HEADERS = -6  # _record_walk.c's E_TOO_MANY_HEADERS
Gather = Callable[[U8, I64, I64, int], U8]


def gather_py(buffer: U8, starts: I64, sizes: I64, total: int) -> U8:
    """The byte ranges (start, size >= 0) of `buffer` concatenated; `total` is the
    sum of the sizes."""
    if total == 0:
        return np.empty(0, np.uint8)
    out_at = np.cumsum(sizes) - sizes  # where each range starts in the output
    # Each output byte's index in `buffer`: its own index, shifted by its range's.
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - out_at, sizes)
    gathered: U8 = buffer[index]
    return gathered


def _load_c() -> tuple[Callable[[bytes, int], RecordLayout], Gather] | None:
    try:
        from moldau.spark import _record_walk  # type: ignore[attr-defined]
    except ImportError:
        return None

    def walk_c(body: bytes, count: int) -> RecordLayout:
        per_record = np.empty((7, count), np.int64)
        # Room for two headers a record; a batch with more is walked again with room
        # for the most its bytes can hold (each header takes two bytes at least).
        per_header = np.empty((4, 2 * count), np.int64)
        headers = _record_walk.walk(body, count, per_record, per_header)
        if headers == _TOO_MANY_HEADERS:
            per_header = np.empty((4, len(body) // 2 + 1), np.int64)
            headers = _record_walk.walk(body, count, per_record, per_header)
        if headers < 0:
            raise _corrupt(_record_walk.REASONS.get(headers, "unknown"))
        h = per_header[:, :headers]
        return RecordLayout(*per_record, *h)

    def gather_c(buffer: U8, starts: I64, sizes: I64, total: int) -> U8:
        out = np.empty(total, np.uint8)
        if _record_walk.gather(buffer, starts, sizes, out) != total:
            raise _corrupt("a field lies outside the fetched bytes")
        return out

    return walk_c, gather_c


_compiled = _load_c()
COMPILED = _compiled is not None
walk_c, gather_c = _compiled or (None, None)
walk: Callable[[bytes, int], RecordLayout] = walk_c or walk_py
gather: Gather = gather_c or gather_py
