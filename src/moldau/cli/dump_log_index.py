"""kafka-dump-log's view of a segment's `.index` and `.timeindex`: each entry, checked
against the segment's `.log` as Kafka's tool checks it (an offset index entry must
point at a batch whose last offset it names; a time index entry at a batch whose
last offset it names and whose largest timestamp it holds, in increasing order),
and the sanity check the broker runs at start-up (--index-sanity-check).

Entries are decoded by moldau.storage.index; the files are only read.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TextIO

from moldau.cli.dump_log_records import (
    HEADER_SIZE_UP_TO_MAGIC,
    DumpError,
    file_batches,
)
from moldau.protocol.legacy_records import parse_message, records_of
from moldau.protocol.records import MAGIC_V2, NO_TIMESTAMP, BatchHeader, iter_records
from moldau.storage.index import OffsetIndex, TimeIndex, offset_entries, time_entries

OFFSET_ENTRY_SIZE = OffsetIndex.entry_size
TIME_ENTRY_SIZE = TimeIndex.entry_size


@dataclass
class IndexErrors:
    """What the checks found, by the index file's absolute path, printed on stderr
    once every file is dumped (as Kafka's tool)."""

    offset_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = []
        for name, pairs in self.offset_mismatches.items():
            out.append(f"Mismatches in :{name}")
            # Kafka keeps them in a list it prepends to: the last found comes first.
            out += [f"  Index offset: {i}, log offset: {o}" for i, o in reversed(pairs)]
        for name, pairs in self.time_mismatches.items():
            out.append(f"Found timestamp mismatch in :{name}")
            out += [f"  Index timestamp: {i}, log timestamp: {t}" for i, t in pairs]
        for name, pairs in self.out_of_order.items():
            out.append(f"Found out of order timestamp in :{name}")
            out += [f"  Index timestamp: {i}, Previously indexed timestamp: {p}" for i, p in pairs]
        for pairs in self.not_found.values():
            out.append("The following indexed offsets are not found in the log.")
            out += [f"Indexed offset: {i}, found log offset: {o}" for i, o in pairs]
        return out


def _base_offset(path: str) -> int:
    return int(os.path.basename(path).split(".")[0])


def _sibling(path: str, suffix: str) -> str:
    return str(Path(path).absolute().parent / (os.path.basename(path).split(".")[0] + suffix))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class IndexMode(NamedTuple):
    sanity_only: bool = False  # --index-sanity-check
    verify_only: bool = False  # --verify-index-only


class _IndexFile(NamedTuple):
    base: int
    size: int
    entries: list[tuple[int, int]]
    absolute: str


def _load(path: str, decode: Callable[[bytes, int], Iterator[tuple[int, int]]]) -> _IndexFile:
    base = _base_offset(path)
    data = _read(path)
    return _IndexFile(base, len(data), list(decode(data, base)), str(Path(path).absolute()))


def dump_index(path: str, out: TextIO, errors: IndexErrors, mode: IndexMode) -> None:
    base, length, entries, absolute = _load(path, offset_entries)
    if not entries:
        out.write(f"{path} is empty.\n")
        return
    if mode.sanity_only:
        if entries[-1][0] < base:
            what = f"Corrupt index found, index file {absolute}"
            raise _behind(what, "offset", entries[-1][0], "base offset", base)
        _check_length(length, OFFSET_ENTRY_SIZE, f"Index file {absolute}")
        out.write(f"{path} passed sanity check.\n")
        return
    log_path = _sibling(path, ".log")
    fd = os.open(log_path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for i, (offset, position) in enumerate(entries):
            # A crash can leave zeroed entries in Kafka's preallocated files: stop there.
            if offset == base and i > 0:
                return
            found = _first_last_offset(fd, position, size, log_path)
            if found != offset:
                errors.offset_mismatches.setdefault(absolute, []).append((offset, found))
            if not mode.verify_only:
                out.write(f"offset: {offset} position: {position}\n")
    finally:
        os.close(fd)


def _first_last_offset(fd: int, position: int, size: int, log_path: str) -> int:
    """The last offset of the batch at `position` (its header only)."""
    if position >= size - HEADER_SIZE_UP_TO_MAGIC:
        raise DumpError(f"no batch at position {position} of {log_path}")
    for _, batch in file_batches(fd, size, log_path, start=position, whole=False):
        return _last_offset(batch)
    raise DumpError(f"no whole batch at position {position} of {log_path}")


def _last_offset(batch: bytes) -> int:
    if batch[16] >= MAGIC_V2:
        return BatchHeader.parse(batch).last_offset
    return int.from_bytes(batch[:8], "big", signed=True)


def _behind(what: str, field: str, last: int, first_name: str, first: int) -> DumpError:
    """Kafka's words for an index whose last entry lies before its first."""
    return DumpError(
        f"{what} has non-zero size but the last {field} is {last} which is less than the "
        f"{first_name} {first}"
    )


def _check_length(length: int, entry_size: int, what: str) -> None:
    if length % entry_size != 0:
        raise DumpError(
            f"{what} is corrupt, found {length} bytes which is neither positive nor a "
            f"multiple of {entry_size}"
        )


def dump_time_index(path: str, out: TextIO, errors: IndexErrors, mode: IndexMode) -> None:
    base, length, entries, absolute = _load(path, time_entries)
    if mode.sanity_only:
        what = f"Corrupt time index found, time index file ({absolute})"
        if entries and entries[-1][0] < entries[0][0]:
            raise _behind(what, "timestamp", entries[-1][0], "first timestamp", entries[0][0])
        if entries and entries[-1][1] < base:
            raise _behind(what, "offset", entries[-1][1], "first offset", base)
        _check_length(length, TIME_ENTRY_SIZE, f"Time index file {absolute}")
        out.write(f"{path} passed sanity check.\n")
        return
    index_path = _sibling(path, ".index")
    try:
        index = list(offset_entries(_read(index_path), base))
    except FileNotFoundError:
        index = []  # Moldau creates an index with its first entry
    index_offsets = [o for o, _ in index]
    log_path = _sibling(path, ".log")
    fd = os.open(log_path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        previous = NO_TIMESTAMP
        for i, (timestamp, offset) in enumerate(entries):
            if offset == base and i > 0:
                return
            slot = bisect_right(index_offsets, offset) - 1
            position = index[slot][1] if slot >= 0 else 0
            batch = next(
                (
                    b
                    for _, b in file_batches(fd, size, log_path, start=position)
                    if _last_offset(b) >= offset
                ),
                None,
            )
            if batch is None:
                errors.not_found.setdefault(absolute, []).append((offset, -1))
            elif _last_offset(batch) != offset:
                errors.not_found.setdefault(absolute, []).append((offset, _last_offset(batch)))
            else:
                largest = max(_timestamps(batch), default=NO_TIMESTAMP)
                if largest != timestamp:
                    errors.time_mismatches.setdefault(absolute, []).append((timestamp, largest))
                if previous >= timestamp:
                    errors.out_of_order.setdefault(absolute, []).append((timestamp, previous))
            if not mode.verify_only:
                out.write(f"timestamp: {timestamp} offset: {offset}\n")
            previous = timestamp
    finally:
        os.close(fd)


def _timestamps(batch: bytes) -> list[int]:
    if batch[16] >= MAGIC_V2:
        return [r.timestamp for r in iter_records(batch)]
    offset = int.from_bytes(batch[:8], "big", signed=True)
    message = parse_message(offset, memoryview(batch)[12:], check_crc=False)
    return [m.timestamp for m in records_of(message)]
