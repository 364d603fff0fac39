"""A log segment: one `.log` file of record batches plus its `.index` and `.timeindex`,
and a `.txnindex` if a transaction was aborted in it.

Threading contract: all methods run on the broker's event-loop thread except
`flush`, which may run on a worker thread (it only calls fsync).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from moldau.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    Compression,
    codecs_of,
    compute_crc,
    iter_records,
)
from moldau.protocol.wire import Buffer
from moldau.storage.index import OffsetIndex, TimeIndex
from moldau.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_SCAN_CHUNK = 64 * 1024
_RECOVER_CHUNK = 1024 * 1024
# baseOffset, batchLength, ..., lastOffsetDelta: the header bytes needed to know a
# batch's offset range.
_OFFSETS_PREFIX = 27


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class SegmentFile:
    """A segment's open `.log` file, held by its segment and by every FileRecords
    sliced from it: the descriptor is closed when the last of them lets go (CPython
    frees the object, and so closes it, the moment its last reference goes). A
    fetch answer's slice thus keeps its file open until it is sent, though the
    segment be deleted (retention, a deleted topic, a cleaned segment swapped out),
    truncated away or closed (an offline log dir) meanwhile: a bare descriptor
    number could by then name another file, opened since, whose bytes the client
    would get. Kafka's FileRecords hold a FileChannel, never reused: once closed,
    the send fails and the connection is closed. Here the answer goes out as read
    instead, with no check at each sendfile chunk; a deleted file's space is freed
    when its last answer is sent."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound early: a file still held at interpreter exit is closed
        # after the module's globals are gone.
        _close(self.fd)


@dataclass(frozen=True, slots=True)
class FileRecords:
    """A slice of a segment file, sent with sendfile or read with pread; it holds
    the file open (see SegmentFile)."""

    file: SegmentFile
    position: int
    size: int

    def codecs(self) -> set[Compression]:
        """The codec of each whole batch in the slice, from its header alone."""
        fd = self.file.fd
        return codecs_of(
            lambda pos, n: os.pread(fd, n, pos), self.position, self.position + self.size
        )

    def read(self) -> bytes:
        """The slice's bytes; fewer if the file was truncated since it was cut."""
        return pread_all(self.file.fd, self.position, self.size)


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch is: its offsets and its bytes in the segment file."""

    base_offset: int
    last_offset: int
    position: int
    size: int


class SegmentMark(NamedTuple):
    """What a segment looked like before an append, so a failed append can be undone
    (a NamedTuple: it is taken on every append, and cheap to make)."""

    size: int
    bytes_since_last_index_entry: int
    max_timestamp: int
    offset_of_max_timestamp: int
    max_ts_loaded: bool
    rolling_based_timestamp: int | None


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        file_suffix: str = "",
        existing: set[str] | None = None,
    ) -> None:
        """`existing`: the names in `directory`, when the caller has just listed it
        (so that an index file known to be missing is not looked for)."""
        self.base_offset = base_offset
        self.directory = directory
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + file_suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        # Closes the descriptor once neither this segment nor a slice holds it.
        self._file: SegmentFile | None = SegmentFile(self._fd)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX + file_suffix),
            base_offset,
            max_index_bytes,
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + file_suffix),
            base_offset,
            max_index_bytes,
        )
        # Unlike Kafka's, an index file is created with its first entry: a new
        # partition costs a directory and one file (creating files is what creating
        # thousands of partitions waits on). A missing index is an empty one.
        if existing is not None:
            for index in (self.offset_index, self.time_index):
                if index.path.name not in existing:
                    index.known_empty()
        txn_path = directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + file_suffix)
        # A new segment has none; one opened from a listing has it if listed.
        txn_exists = txn_path.name in existing if existing is not None else None
        self.txn_index = TransactionIndex(txn_path, txn_exists)
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        # The max timestamp of the first batch: segment.ms counts from it (Kafka's
        # rollingBasedTimestamp). None until known.
        self.rolling_based_timestamp: int | None = None
        self._max_ts_loaded = False
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self.closed = False

    # -- timestamps ----------------------------------------------------------------------

    def _load_max_timestamp(self) -> None:
        if not self._max_ts_loaded:
            last = self.time_index.last_entry
            if last is not None and last[0] > self._max_timestamp:
                self._max_timestamp, self._offset_of_max_timestamp = last
            self._max_ts_loaded = True

    @property
    def max_timestamp_so_far(self) -> int:
        self._load_max_timestamp()
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        self._load_max_timestamp()
        return self._offset_of_max_timestamp

    def largest_timestamp(self) -> int:
        """Max timestamp of the segment's batches, or its file's mtime if none."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    # -- append --------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_largest_timestamp: int,
        parts: Sequence[Buffer],
        size: int,
    ) -> int:
        """Write one batch (given as parts, not joined) at the end; return its position."""
        position = self.size
        _write_all(self._fd, parts, size)
        self.size += size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = largest_timestamp
        self._track(largest_offset, largest_timestamp, offset_of_largest_timestamp, position, size)
        return position

    def mark(self) -> SegmentMark:
        return SegmentMark(
            self.size,
            self.bytes_since_last_index_entry,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._max_ts_loaded,
            self.rolling_based_timestamp,
        )

    def rollback(self, mark: SegmentMark, first_offset: int) -> None:
        """Undo an append of offsets from `first_offset` on, made after `mark`: memory
        first, then the files (the log is cut back, so no later append lands after
        a partial batch, and index entries for those offsets go). May raise OSError
        if the files cannot be cut; memory is restored regardless."""
        self.size = mark.size
        self.bytes_since_last_index_entry = mark.bytes_since_last_index_entry
        self._max_timestamp = mark.max_timestamp
        self._offset_of_max_timestamp = mark.offset_of_max_timestamp
        self._max_ts_loaded = mark.max_ts_loaded
        self.rolling_based_timestamp = mark.rolling_based_timestamp
        try:
            if os.fstat(self._fd).st_size != mark.size:
                os.ftruncate(self._fd, mark.size)
        finally:
            self.offset_index.truncate_to(first_offset)
            self.time_index.truncate_to(first_offset)
            self.txn_index.truncate_to(first_offset)

    def _track(
        self, largest_offset: int, largest_ts: int, offset_of_ts: int, position: int, size: int
    ) -> None:
        self._load_max_timestamp()
        if largest_ts > self._max_timestamp:
            self._max_timestamp = largest_ts
            self._offset_of_max_timestamp = offset_of_ts
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def on_become_inactive(self) -> None:
        """On roll: the time index's last entry must hold the segment's max timestamp."""
        self._load_max_timestamp()
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(
                self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True
            )

    # -- reading -------------------------------------------------------------------------

    def batches_from(self, position: int, end: int | None = None) -> Iterator[BatchPosition]:
        """Walk batch headers from `position` (a batch boundary) to `end`."""
        limit = self.size if end is None else min(end, self.size)
        pos = position
        chunk = b""
        chunk_pos = pos
        while pos + LOG_OVERHEAD <= limit:
            rel = pos - chunk_pos
            if rel + _OFFSETS_PREFIX > len(chunk):
                chunk = os.pread(self._fd, _SCAN_CHUNK, pos)
                chunk_pos = pos
                rel = 0
                if len(chunk) < _OFFSETS_PREFIX:
                    return
            base = int.from_bytes(chunk[rel : rel + 8], "big", signed=True)
            length = int.from_bytes(chunk[rel + 8 : rel + 12], "big", signed=True)
            delta = int.from_bytes(chunk[rel + 23 : rel + 27], "big", signed=True)
            size = LOG_OVERHEAD + length
            if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > limit:
                return
            yield BatchPosition(base, base + delta, pos, size)
            pos += size

    def headers_from(self, position: int) -> Iterator[BatchHeader]:
        """Every batch header from `position` (a batch boundary) to the end."""
        for _, header in self.positioned_headers_from(position):
            yield header

    def positioned_headers_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from `position` (a batch boundary) to
        the end."""
        pos = position
        chunk = b""
        chunk_pos = pos
        while pos + HEADER_SIZE <= self.size:
            rel = pos - chunk_pos
            if rel + HEADER_SIZE > len(chunk):
                chunk = os.pread(self._fd, _SCAN_CHUNK, pos)
                chunk_pos, rel = pos, 0
                if len(chunk) < HEADER_SIZE:
                    return
            header = BatchHeader.parse(chunk, rel)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > self.size:
                return
            yield pos, header
            pos += header.size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= `offset` (Kafka's translateOffset)."""
        _, position = self.offset_index.lookup(offset)
        for batch in self.batches_from(max(position, starting_position)):
            if batch.last_offset >= offset:
                return batch
        return None

    def whole_batches_end(self, start: int, end: int) -> int:
        """The end of the last batch that lies whole between `start` (a batch start)
        and `end`; `start` if none does. Walks batch headers only from the index
        entry nearest `end`."""
        last_end = max(start, self.offset_index.position_at_or_before(end))
        for batch in self.batches_from(last_end, end):  # those that end by `end`
            last_end = batch.position + batch.size
        return last_end

    def read_bytes(self, position: int, size: int) -> bytes:
        return pread_all(self._fd, position, size)

    def slice(self, position: int, size: int) -> FileRecords:
        """Bytes to send later: the slice keeps the file open until it is gone."""
        assert self._file is not None, f"a slice of closed segment {self.log_path}"
        return FileRecords(self._file, position, size)

    def next_offset(self) -> int:
        """The offset after the last batch in this segment (base offset if empty)."""
        if self.size == 0:
            return self.base_offset
        _, position = self.offset_index.lookup(2**63 - 1)
        last = None
        for batch in self.batches_from(position):
            last = batch
        return self.base_offset if last is None else last.last_offset + 1

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with timestamp >= `timestamp` and
        offset >= `start_offset`; decodes the records of that one batch."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, start_offset))
        for batch in self.batches_from(position):
            header = BatchHeader.parse(self.read_bytes(batch.position, HEADER_SIZE))
            if header.max_timestamp < timestamp or batch.last_offset < start_offset:
                continue
            for record in iter_records(self.read_bytes(batch.position, batch.size)):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.timestamp, record.offset
        return None

    # -- recovery and truncation ---------------------------------------------------------

    def recover(self) -> int:
        """Re-validate every batch, rebuild both indexes, and cut the file at the first
        invalid or torn batch. Returns the number of bytes cut. The transaction index
        is emptied: the log rewrites it as it replays the producers' batches."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.bytes_since_last_index_entry = 0
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self._max_ts_loaded = True
        self.rolling_based_timestamp = None
        valid = 0
        next_offset = self.base_offset
        for position, batch in self._read_batches_for_recovery():
            header = BatchHeader.parse(batch)
            if (
                header.magic != MAGIC_V2
                or header.crc != compute_crc(batch)
                or header.base_offset < next_offset
                or header.last_offset_delta < 0
            ):
                break
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = header.max_timestamp
            self._track(
                header.last_offset,
                header.max_timestamp,
                header.last_offset,
                position,
                header.size,
            )
            next_offset = header.last_offset + 1
            valid = position + header.size
        cut = self.size - valid
        if cut:
            os.ftruncate(self._fd, valid)
            self.size = valid
        return cut

    def _read_batches_for_recovery(self) -> Iterator[tuple[int, memoryview]]:
        pos = 0
        buf = b""
        buf_pos = 0
        while pos + LOG_OVERHEAD <= self.size:
            rel = pos - buf_pos
            if rel + LOG_OVERHEAD > len(buf):
                buf = os.pread(self._fd, _RECOVER_CHUNK, pos)
                buf_pos, rel = pos, 0
            length = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
            size = LOG_OVERHEAD + length
            if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > self.size:
                return
            if rel + size > len(buf):
                buf = os.pread(self._fd, max(size, _RECOVER_CHUNK), pos)
                buf_pos, rel = pos, 0
                if len(buf) < size:
                    return
            yield pos, memoryview(buf)[rel : rel + size]
            pos += size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; return bytes removed."""
        batch = self.translate_offset(offset)
        if batch is None:
            return 0
        position = batch.position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        # Recompute what was derived from the removed batches.
        self._max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self._max_ts_loaded = False
        self.bytes_since_last_index_entry = 0
        if position == 0:
            self.rolling_based_timestamp = None
        return removed

    # -- lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """May run on a worker thread while the event loop closes the segment: the
        file is held for the fsync, so that it never syncs a number reused since."""
        file = self._file
        if file is None:
            return
        os.fsync(file.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self.closed:
            return
        self.on_become_inactive()
        self.close_handlers()

    def close_handlers(self) -> None:
        """Close the files without writing anything (for deleted segments). The
        `.log` file stays open while slices handed out hold it (see SegmentFile)."""
        if self.closed:
            return
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._file = None
        self.closed = True

    def change_file_suffix(self, old: str, new: str) -> None:
        """Rename the segment's files from suffix `old` to `new` (e.g. a cleaned
        segment going from .cleaned to .swap to nothing). Open descriptors stay valid."""
        for path, rename in (
            (self.log_path, None),
            (self.offset_index.path, self.offset_index.rename),
            (self.time_index.path, self.time_index.rename),
            (self.txn_index.path, self.txn_index.rename),
        ):
            target = path.with_name(path.name[: len(path.name) - len(old)] + new)
            if rename is not None:
                rename(target)
            else:
                os.replace(path, target)
        self.log_path = self.log_path.with_name(
            self.log_path.name[: len(self.log_path.name) - len(old)] + new
        )

    def mark_deleted(self) -> None:
        """Rename the files to `.deleted`; readers with slices keep working until
        `delete_files` runs (after file.delete.delay.ms)."""
        self.change_file_suffix("", DELETED_SUFFIX)

    def delete_files(self) -> None:
        self.close_handlers()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    # -- aborted transactions ------------------------------------------------------------

    def update_txn_index(self, txn: AbortedTxn) -> None:
        """An abort marker of this segment ended the transaction `txn`."""
        self.txn_index.append(txn)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)


def pread_all(fd: int, position: int, size: int) -> bytes:
    """Up to `size` bytes at `position`: fewer only where the file ends."""
    chunks = []
    pos, left = position, size
    while left > 0:
        chunk = os.pread(fd, left, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, parts: Sequence[Buffer], size: int) -> None:
    written = os.writev(fd, parts)
    if written == size:
        return
    # A short write (rare on regular files): finish it part by part.
    data = memoryview(b"".join(bytes(p) for p in parts))[written:]
    while data:
        data = data[os.write(fd, data) :]
