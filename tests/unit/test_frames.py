"""Framing of a byte stream, however it is cut into chunks."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moldau.protocol.frames import FrameDecoder, FrameError


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=10),
    cuts=st.lists(st.integers(0, 4000), max_size=20),
)
def test_frames_come_out_whole_and_in_order_for_any_chunking(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = framed(payloads)
    points = sorted({c for c in cuts if c < len(stream)} | {0, len(stream)})
    decoder = FrameDecoder(1000)
    out = []
    for a, b in itertools.pairwise(points):
        out += [bytes(f) for f in decoder.feed(stream[a:b])]
    assert out == payloads
    assert decoder.buffered == 0


def test_sizes_are_checked_before_anything_is_buffered() -> None:
    decoder = FrameDecoder(100)
    with pytest.raises(FrameError, match="exceeds"):
        decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameError, match="negative"):
        FrameDecoder(100).feed(struct.pack(">i", -1))
    partial = FrameDecoder(100)
    assert partial.feed(struct.pack(">i", 100) + b"x" * 10) == []
    assert partial.buffered == 14
