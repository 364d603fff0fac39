"""A segment's aborted-transaction index, `<base>.txnindex` (Kafka's TransactionIndex).

One 34-byte entry per transaction aborted by a marker in the segment, in the order
the markers were written: int16 version (0), int64 producerId, firstOffset,
lastOffset (the marker's offset), lastStableOffset (the LSO once the marker was
written). A read_committed fetch sends the aborted transactions overlapping what it
returns, and the consumer drops their records.

Aborts are rare and most segments have none: the file is created with its first
entry, never opened for a segment known to have none, and read once, on first use,
into memory (the entries are kept there, few and small).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file's bytes; a torn last entry is ignored."""
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            raise ValueError(f"transaction index entry version {version} is not supported")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TransactionIndex:
    def __init__(self, path: Path, exists: bool | None = None) -> None:
        """`exists`: whether the file is there, if the caller knows (else it is
        looked for on first use)."""
        self.path = path
        self._exists = exists
        self._entries: list[AbortedTxn] | None = None
        self._fd: int | None = None

    # -- reading -------------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            if self._exists is None:
                self._exists = self.path.exists()
            if self._exists:
                self._entries = decode_entries(self.path.read_bytes())
            else:
                self._entries = []
        return self._entries

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return list(self._load())

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions that overlap [fetch_offset, upper_bound_offset),
        and whether the search is complete (an entry's LSO reached the upper bound:
        no later segment can hold one that starts below it), as Kafka's
        collectAbortedTxns."""
        out = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    # -- writing -------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"aborted transaction ending at {txn.last_offset} is not after the last one "
                f"indexed ({entries[-1].last_offset}) in {self.path}"
            )
        data = txn.encode()
        fd = self._open()
        written = os.write(fd, data)
        if written != len(data):
            os.write(fd, data[written:])
        entries.append(txn)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._exists = True
        return self._fd

    def truncate_to(self, offset: int) -> None:
        """Remove the entries of transactions whose marker is at or after `offset`."""
        if self._entries is None and self._exists is False:
            return
        entries = self._load()
        keep = next((i for i, t in enumerate(entries) if t.last_offset >= offset), len(entries))
        if keep == len(entries):
            return
        os.truncate(self.path, keep * ENTRY_SIZE)
        del entries[keep:]

    def reset(self) -> None:
        """Empty it (its segment is being recovered: the entries are written again)."""
        self._entries = []
        if self._exists is not False:
            self.close()
            self.path.unlink(missing_ok=True)
            self._exists = False

    def flush(self) -> None:
        fd = self._fd
        if fd is not None:
            os.fsync(fd)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def rename(self, target: Path) -> None:
        """Move the file (if there is one) to `target`; an open descriptor stays valid."""
        if self._exists is None:
            self._exists = self.path.exists()
        if self._exists:
            os.replace(self.path, target)
        self.path = target

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self._exists = False
        self._entries = []
