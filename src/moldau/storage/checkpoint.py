"""Checkpoint files in Kafka's text format, replaced atomically.

    <version>
    <number of entries>
    <entry>...

Every replace is: write a temp file, fsync it, rename over the old one, fsync the
directory. A reader never sees a torn file.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, cast

from moldau.storage.partition_name import TopicPartition

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[T]):
    """What checkpoint files will say, numbered in the order it was taken."""

    seq: int
    data: T


class SnapshotWriter:
    """Writes snapshots from any thread (checkpoints fsync, so they are written off
    the event loop), one at a time and in the order they were taken: one older than
    a snapshot already written is dropped, so a slow worker cannot put back what the
    final checkpoint of a shutdown replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = 0
        self._written = 0

    def take(self, data: T) -> Snapshot[T]:
        """Number a snapshot (on the event loop, where the state was read)."""
        self._taken += 1
        return Snapshot(self._taken, data)

    def write(self, snapshot: Snapshot[T], write: Callable[[T], None]) -> None:
        with self._lock:
            if snapshot.seq < self._written:
                return
            self._written = snapshot.seq
            write(snapshot.data)


def write_atomically(path: Path, data: bytes, sync: bool = True) -> None:
    """Replace `path` with `data`. If any step fails (a full disk, say) the old file
    is left as it was and the temp file is removed, then the error is raised.
    Without `sync` the new file is not forced to disk (the caller does it later)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # the error being raised says what went wrong
            tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)


def read_file(path: Path) -> bytes:
    """A whole file, with the fewest syscalls (pathlib's read_bytes costs more, and
    start-up reads one or two small files per partition)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return cast(Callable[[int], int], libc.syncfs)
    except (OSError, AttributeError):  # not Linux
        return None


_SYNCFS = _load_syncfs()


# syncfs(2) reports write-back errors since Linux 5.8; before, it returns 0 even
# when a page failed to reach the disk.
SYNCFS_REPORTS_ERRORS_SINCE = (5, 8)


def syncfs_reports_errors(kernel_release: str) -> bool:
    """Whether syncfs on the Linux kernel of this release (os.uname().release, e.g.
    "5.15.0-91-generic") reports write-back errors. An unreadable one: no."""
    numbers = re.match(r"(\d+)\.(\d+)", kernel_release)
    if numbers is None:
        return False
    return (int(numbers[1]), int(numbers[2])) >= SYNCFS_REPORTS_ERRORS_SINCE


def can_sync_filesystem() -> bool:
    """Whether `sync_filesystem` may stand in for an fsync of each file: syncfs
    exists and reports a failed write-back (else the caller fsyncs every file, or a
    lost write would pass for a clean shutdown)."""
    return _SYNCFS is not None and syncfs_reports_errors(os.uname().release)


def sync_filesystem(path: Path) -> None:
    """Force every write to the file system holding `path` to disk, data and
    metadata (syncfs(2)): one call where a clean shutdown of thousands of logs
    would fsync each of their files. Only where `can_sync_filesystem`."""
    assert _SYNCFS is not None
    fd = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), str(path))
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory, or any file opened read-only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointFile:
    """A checkpoint of entries of one shape, e.g. `topic partition offset`."""

    VERSION = 0

    def __init__(self, path: Path) -> None:
        self.path = path

    def write_lines(self, lines: Iterable[str], sync: bool = True) -> None:
        body = list(lines)
        text = f"{self.VERSION}\n{len(body)}\n" + "".join(line + "\n" for line in body)
        write_atomically(self.path, text.encode(), sync)

    def read_lines(self) -> list[str]:
        """The entries; [] if the file is missing. A malformed file raises ValueError."""
        try:
            text = read_file(self.path).decode()
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        if len(lines) < 2 or int(lines[0]) != self.VERSION:
            raise ValueError(f"{self.path}: unknown checkpoint version")
        count = int(lines[1])
        entries = [line for line in lines[2:] if line]
        if len(entries) != count:
            raise ValueError(f"{self.path}: expected {count} entries, found {len(entries)}")
        return entries


class OffsetCheckpointFile(CheckpointFile):
    """`topic partition offset` per line: recovery points, log start offsets, HWs."""

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.write_lines(f"{tp.topic} {tp.partition} {off}" for tp, off in sorted(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        return dict(_parse(self.read_lines(), _offset_entry))


def _offset_entry(line: str) -> tuple[TopicPartition, int]:
    topic, partition, offset = line.split(" ")
    return TopicPartition(topic, int(partition)), int(offset)


def _parse(lines: list[str], parse: Callable[[str], T]) -> list[T]:
    try:
        return [parse(line) for line in lines]
    except ValueError as e:
        raise ValueError(f"malformed checkpoint entry: {e}") from e


class LeaderEpochCheckpointFile(CheckpointFile):
    """`epoch start_offset` per line, for one partition (leader-epoch-checkpoint)."""

    def write(self, entries: Iterable[tuple[int, int]], sync: bool = True) -> None:
        self.write_lines((f"{epoch} {offset}" for epoch, offset in entries), sync)

    def read(self) -> list[tuple[int, int]]:
        def entry(line: str) -> tuple[int, int]:
            epoch, offset = line.split(" ")
            return int(epoch), int(offset)

        return _parse(self.read_lines(), entry)
