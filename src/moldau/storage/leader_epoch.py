"""Leader epoch cache: the start offset of each leader epoch in a log (KIP-101),
checkpointed to `leader-epoch-checkpoint` in the partition directory.

A new epoch is kept in memory and written with the log's next flush or close
(Kafka since KAFKA-15046 writes it without an fsync, to the same end): a write per
partition per election would cost more than the election (creating 10,000
partitions is 10,000 elections). Nothing is lost by waiting: the recovery point
only moves with a flush, which writes the file first, and recovery after a crash
takes the epochs of the batches past the recovery point from their headers. An
epoch that no batch carries yet may be forgotten by a crash; it has no records
that a follower could need to truncate.

A truncation (from the end by a follower, from the start as the log start moves)
changes the entries in memory too, and is written off the event loop, never with an
fsync on it (Kafka's truncateFromEndAsyncFlush). What keeps that safe is an order
kept by the callers: the replica fetcher writes the truncated checkpoint on a
worker thread (`LogManager.write_checkpoints`, with the lowered recovery point)
before it appends anything past the cut, so a crash never finds the file naming an
epoch at offsets the log has since been given by another leader. A crash before
that write finds a log that ends at the cut, and loading drops the entries past the
log end (as Kafka's LogLoader); one at the log start is dropped by the next
truncation from the start."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from moldau.storage.checkpoint import LeaderEpochCheckpointFile

CHECKPOINT_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: Path, exists: bool = True) -> None:
        """`exists`: False when the caller knows the checkpoint file is not there."""
        self._file = LeaderEpochCheckpointFile(directory / CHECKPOINT_NAME)
        self._entries: list[tuple[int, int]] = []
        if exists:
            with contextlib.suppress(ValueError):  # unreadable: start again empty
                self._entries = self._file.read()
        # Entries assigned or truncated and not yet written (`_truncated`: by a
        # truncation, which the next checkpoint writes). `_lock` guards the entries
        # and flags and is never held across I/O, so the event loop never waits for
        # a write; `_write_lock` keeps writes whole and in order, each of the entries
        # as they were when it began, so the newest is written last.
        self._dirty = False
        self._truncated = False
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, if it is a new epoch (in
        memory: the log's next flush or close writes it)."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return
        with self._lock:
            # A new epoch cannot start before an earlier one's start.
            kept = [(e, o) for e, o in self._entries if o < start_offset]
            self._entries = [*kept, (epoch, start_offset)]
            self._dirty = True

    @property
    def truncation_pending(self) -> bool:
        """A truncation changed the entries since the file was last written."""
        return self._truncated

    def flush(self, sync: bool = True) -> None:
        """Write what `assign` and the truncations recorded; without `sync` not
        forced to disk (the caller syncs the file system). From the log's flush or
        close, or a checkpoint after a truncation; any thread but the event loop's."""
        with self._write_lock:
            with self._lock:
                if not self._dirty:
                    return
                entries = list(self._entries)
                truncated, self._dirty, self._truncated = self._truncated, False, False
            try:
                self._file.write(entries, sync)
            except BaseException:
                with self._lock:  # still to be written
                    self._dirty = True
                    self._truncated = self._truncated or truncated
                raise

    def _replace(self, entries: list[tuple[int, int]]) -> None:
        """A truncation: in memory, written by the next checkpoint or flush."""
        with self._lock:
            if entries != self._entries:
                self._entries = entries
                self._dirty = self._truncated = True

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the leader that appended `offset` (-1 if unknown)."""
        epoch = -1
        for e, start in self._entries:
            if start > offset:
                break
            epoch = e
        return epoch

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where the next epoch starts), as
        OffsetForLeaderEpoch answers (Kafka's LeaderEpochFileCache.endOffsetFor):
        the latest epoch ends at the log end; an epoch older than all known ends
        where the first known one starts; an unknown or newer epoch: (-1, -1)."""
        entries = self._entries
        if epoch < 0 or not entries:
            return -1, -1
        if epoch == entries[-1][0]:
            return epoch, log_end_offset
        higher = next((i for i, (e, _) in enumerate(entries) if e > epoch), None)
        if higher is None:
            return -1, -1  # newer than any epoch of this log
        if higher == 0:
            return epoch, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]

    def clear(self) -> None:
        self._replace([])

    def truncate_from_end(self, end_offset: int) -> None:
        self._replace([(e, o) for e, o in self._entries if o < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """Entries before the log start collapse into one starting at it."""
        before = [(e, o) for e, o in self._entries if o <= start_offset]
        after = [(e, o) for e, o in self._entries if o > start_offset]
        self._replace(([(before[-1][0], start_offset)] if before else []) + after)
