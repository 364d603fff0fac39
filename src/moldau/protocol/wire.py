"""Primitive readers and writers of the Kafka wire format, for the hand-written paths.

The generated codec (kio) handles everything else. A `Reader` checks every length
against the bytes that remain before it slices or allocates, so a hostile length
costs nothing.
"""

from __future__ import annotations

import struct
from uuid import UUID

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

Buffer = bytes | bytearray | memoryview


class DecodeError(ValueError):
    """The bytes are not a valid encoding of what was expected."""


class Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise DecodeError(f"need {n} bytes at {self.pos}, have {self.remaining()}")

    def int8(self) -> int:
        self._need(1)
        (v,) = _I8.unpack_from(self.buf, self.pos)
        self.pos += 1
        return int(v)

    def int16(self) -> int:
        self._need(2)
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def int32(self) -> int:
        self._need(4)
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def int64(self) -> int:
        self._need(8)
        (v,) = _I64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def uuid(self) -> UUID:
        self._need(16)
        v = UUID(bytes=bytes(self.buf[self.pos : self.pos + 16]))
        self.pos += 16
        return v

    def uvarint(self) -> int:
        value = 0
        shift = 0
        buf = self.buf
        while True:
            if self.pos >= len(buf):
                raise DecodeError("truncated varint")
            b = buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise DecodeError("varint too long")

    def raw(self, n: int) -> memoryview:
        self._need(n)
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def skip(self, n: int) -> None:
        self._need(n)
        self.pos += n

    # Strings and bytes: legacy (int16/int32 length) and compact (uvarint length + 1).

    def string(self, flexible: bool) -> str:
        s = self.nullable_string(flexible)
        if s is None:
            raise DecodeError("null where a string is required")
        return s

    def nullable_string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        try:
            return str(self.raw(n), "utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError("string is not UTF-8") from e

    def nullable_bytes(self, flexible: bool) -> memoryview | None:
        n = self.uvarint() - 1 if flexible else self.int32()
        if n < 0:
            return None
        return self.raw(n)

    def array_length(self, flexible: bool, min_item_size: int = 1) -> int:
        """An array's length, -1 for null; refuses lengths the remaining bytes cannot hold."""
        n = self.uvarint() - 1 if flexible else self.int32()
        if n > 0 and n * min_item_size > self.remaining():
            raise DecodeError(f"array of {n} items in {self.remaining()} bytes")
        return max(n, -1)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.skip(self.uvarint())


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Writer:
    """Appends wire primitives to a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        self.buf += uvarint_bytes(v)

    def uuid(self, v: UUID) -> None:
        self.buf += v.bytes

    def nullable_string(self, s: str | None, flexible: bool) -> None:
        if s is None:
            if flexible:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = s.encode()
        if flexible:
            self.uvarint(len(data) + 1)
        else:
            self.int16(len(data))
        self.buf += data

    def string(self, s: str, flexible: bool) -> None:
        self.nullable_string(s, flexible)

    def array_length(self, n: int, flexible: bool) -> None:
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def bytes_length(self, n: int, flexible: bool) -> None:
        """Length prefix of a bytes/records field (-1 for null)."""
        if flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def empty_tagged_fields(self) -> None:
        self.buf.append(0)


def pack_i32(v: int) -> bytes:
    return _I32.pack(v)


def pack_i64(v: int) -> bytes:
    return _I64.pack(v)


def unpack_u32(buf: Buffer, pos: int) -> int:
    return int(_U32.unpack_from(buf, pos)[0])
