"""Leader epoch cache: the start offset of each leader epoch in a log (KIP-101),
checkpointed to `leader-epoch-checkpoint` in the partition directory.

A new epoch is written without an fsync (as Kafka since KAFKA-15046): one per
partition per election would cost more than the election. The file is forced to
disk with the log's next flush, and recovery after a crash takes the epochs of the
batches it re-reads, so what a power loss takes from the file comes back from the
log."""

from __future__ import annotations

from pathlib import Path

from moldau.storage.checkpoint import LeaderEpochCheckpointFile, fsync_file

CHECKPOINT_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self._file = LeaderEpochCheckpointFile(directory / CHECKPOINT_NAME)
        try:
            self._entries = self._file.read()
        except ValueError:
            self._entries = []
        self._unsynced = False

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, if it is a new epoch."""
        if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
            return
        # A new epoch cannot start before an earlier one's start.
        kept = [(e, o) for e, o in self._entries if o < start_offset]
        self._replace([*kept, (epoch, start_offset)], sync=False)

    def flush(self) -> None:
        """Force to disk what `assign` wrote (from the log's flush; any thread)."""
        if self._unsynced and self._file.path.exists():
            self._unsynced = False
            fsync_file(self._file.path)

    def rewrite(self) -> None:
        """Write the checkpoint again from memory (after a failed write)."""
        self._file.write(self._entries)

    def _replace(self, entries: list[tuple[int, int]], sync: bool = True) -> None:
        """The file first: if writing it fails, memory still matches what is on disk."""
        if entries != self._entries:
            self._file.write(entries, sync)
            self._entries = entries
            self._unsynced = self._unsynced or not sync

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

    def delete(self) -> None:
        self._file.path.unlink(missing_ok=True)
