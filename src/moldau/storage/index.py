"""Sparse segment indexes, in Kafka's file formats.

`.index`: entries of (offset - baseOffset: int32, position: int32), 8 bytes.
`.timeindex`: entries of (timestamp: int64, offset - baseOffset: int32), 12 bytes.

Entries live in memory (loaded on first use) and are appended to the file as they
are added; unlike Kafka the files are not preallocated, so their size is always a
whole number of entries except after a crash, which `load` repairs. Nor are they
created before their first entry: a missing file is an empty index.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from moldau.storage.checkpoint import read_file

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    pass


def offset_entries(data: bytes, base_offset: int) -> Iterator[tuple[int, int]]:
    """(offset, position) of each whole entry of an `.index` file's bytes."""
    whole = len(data) - len(data) % _OFFSET_ENTRY.size
    for rel, pos in _OFFSET_ENTRY.iter_unpack(data[:whole]):
        yield base_offset + rel, pos


def time_entries(data: bytes, base_offset: int) -> Iterator[tuple[int, int]]:
    """(timestamp, offset) of each whole entry of a `.timeindex` file's bytes."""
    whole = len(data) - len(data) % _TIME_ENTRY.size
    for ts, rel in _TIME_ENTRY.iter_unpack(data[:whole]):
        yield ts, base_offset + rel


class _Index:
    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._loaded = False
        self._fd = -1

    # -- file handling -----------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        try:
            data = read_file(self.path)
        except FileNotFoundError:
            data = b""
        whole = len(data) - len(data) % self.entry_size
        self._decode(data[:whole])
        self._loaded = True
        if whole != len(data):
            # A torn entry from a crash: drop it.
            self._open_fd()
            os.ftruncate(self._fd, whole)

    def known_empty(self) -> None:
        """The file is known to be missing: nothing to read."""
        self._loaded = True

    def _open_fd(self) -> None:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, data: bytes) -> None:
        self._open_fd()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._ensure_loaded()
        self._clear()
        self._open_fd()
        os.ftruncate(self._fd, 0)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    @property
    def entries(self) -> int:
        self._ensure_loaded()
        return self._count()

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def _truncate_entries(self, n: int) -> None:
        if self._fd < 0 and n == 0 and not self.path.exists():
            return  # never written (index files are created with their first entry)
        self._open_fd()
        os.ftruncate(self._fd, n * self.entry_size)

    # -- implemented by the two kinds ----------------------------------------------------

    def _decode(self, data: bytes) -> None:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    def _count(self) -> int:
        raise NotImplementedError


class OffsetIndex(_Index):
    entry_size = 8

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._offsets = array("q")
        self._positions = array("q")

    def _decode(self, data: bytes) -> None:
        self._clear()
        for offset, pos in offset_entries(data, self.base_offset):
            self._offsets.append(offset)
            self._positions.append(pos)

    def _clear(self) -> None:
        self._offsets = array("q")
        self._positions = array("q")

    def _count(self) -> int:
        return len(self._offsets)

    @property
    def last_offset(self) -> int:
        self._ensure_loaded()
        return self._offsets[-1] if self._offsets else self.base_offset

    def append(self, offset: int, position: int) -> None:
        self._ensure_loaded()
        if self._offsets and offset <= self._offsets[-1]:
            raise CorruptIndexError(
                f"index entry for offset {offset} is not after {self._offsets[-1]}"
            )
        if self.is_full:
            raise CorruptIndexError(f"{self.path} is full")
        # The file first: if the write fails, memory still matches the file.
        self._write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, target: int) -> tuple[int, int]:
        """The last entry at or before `target`: (offset, position); (base, 0) if none."""
        self._ensure_loaded()
        i = bisect_right(self._offsets, target) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def position_at_or_before(self, position: int) -> int:
        """The last indexed batch start at or before `position` (0 if none)."""
        self._ensure_loaded()
        i = bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= `offset`."""
        self._ensure_loaded()
        i = bisect_right(self._offsets, offset - 1)
        del self._offsets[i:]
        del self._positions[i:]
        # Always cut the file: a failed append may have left part of an entry there.
        self._truncate_entries(i)


class TimeIndex(_Index):
    entry_size = 12

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, base_offset, max_index_bytes)
        self._timestamps = array("q")
        self._offsets = array("q")

    def _decode(self, data: bytes) -> None:
        self._clear()
        for ts, offset in time_entries(data, self.base_offset):
            self._timestamps.append(ts)
            self._offsets.append(offset)

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")

    def _count(self) -> int:
        return len(self._offsets)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        self._ensure_loaded()
        if not self._offsets:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is newer than the last entry's."""
        self._ensure_loaded()
        if not skip_full_check and self.is_full:
            raise CorruptIndexError(f"{self.path} is full")
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if self._offsets and offset < self._offsets[-1]:
            raise CorruptIndexError(f"time index offset {offset} before {self._offsets[-1]}")
        self._write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with a timestamp <= `timestamp`: (timestamp, offset);
        (-1, base offset) if none."""
        self._ensure_loaded()
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= `offset`."""
        self._ensure_loaded()
        i = bisect_right(self._offsets, offset - 1)
        del self._timestamps[i:]
        del self._offsets[i:]
        self._truncate_entries(i)  # also a partial entry a failed append left
