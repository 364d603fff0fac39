"""Splitting a byte stream into Kafka frames (int32 size + payload), sans-IO.

Sizes are checked before anything is allocated: a negative size or one above the
limit (`socket.request.max.bytes`) is a `FrameError`, and the caller closes the
connection. Memory held is only what the peer actually sent.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(ValueError):
    """The stream cannot be framed: the connection must be closed."""


class FrameDecoder:
    """Feed bytes with `feed`, take complete frames from `frames`.

    A frame that lies wholly inside one fed chunk is returned as a memoryview of
    that chunk (no copy); a frame spread over chunks is joined once.
    """

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._want = -1  # payload size of the frame being assembled, -1 if unknown

    @property
    def buffered(self) -> int:
        return self._buffered

    def feed(self, data: bytes) -> list[memoryview]:
        """Add bytes; return every frame they complete, in order."""
        if self._buffered == 0:
            return self._split(data)
        self._chunks.append(data)
        self._buffered += len(data)
        if self._want < 0:
            if self._buffered < 4:
                return []
            head = b"".join(self._chunks)
            self._chunks = [head]
            self._want = self._check(_SIZE.unpack_from(head, 0)[0])
        if self._buffered < 4 + self._want:
            return []
        whole = b"".join(self._chunks)
        self._chunks = []
        self._buffered = 0
        self._want = -1
        return self._split(whole)

    def _split(self, data: bytes) -> list[memoryview]:
        frames: list[memoryview] = []
        view = memoryview(data)
        pos = 0
        end = len(data)
        while end - pos >= 4:
            size = self._check(_SIZE.unpack_from(data, pos)[0])
            if end - pos - 4 < size:
                break
            frames.append(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            rest = bytes(view[pos:])
            self._chunks = [rest]
            self._buffered = len(rest)
            self._want = self._check(_SIZE.unpack_from(rest, 0)[0]) if len(rest) >= 4 else -1
        return frames

    def _check(self, size: int) -> int:
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self._max:
            raise FrameError(f"frame size {size} exceeds the limit of {self._max} bytes")
        return size
