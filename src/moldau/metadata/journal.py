"""The embedded store on disk, as ZooKeeper keeps its data: a snapshot of the whole
tree (`metadata.json`) and an append-only journal (`metadata.journal`) of every
change since, so a write costs one append and one fsync whatever the tree's size.

Each journal record is one committed change: the new image of every persistent node
it touched (None for a node it removed), framed as length, CRC32C, JSON payload.
Loading reads the snapshot and replays the records after it; a torn or corrupt
tail (a crash mid-append) is cut off, since its change was never acknowledged. An
append that fails is cut off at once; while that cut fails too, no change is
written (it would follow a partial record, and be cut off with it at the next load).
Once the journal holds `snapshot_every` records the tree is written as a new
snapshot and the journal starts again (a crash between the two is harmless:
records the snapshot already holds are skipped by zxid)."""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c

from moldau.storage.checkpoint import fsync_dir, write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "metadata.json"
JOURNAL_FILE = "metadata.journal"
HEADER = struct.Struct(">II")  # payload length, CRC32C of the payload
MAX_RECORD_BYTES = 64 * 1024 * 1024

# A persistent node as stored: data (base64), version, cversion, czxid, mzxid, seq.
Image = dict[str, Any]


@dataclass
class StoredTree:
    zxid: int = 0
    root_seq: int = 0
    nodes: dict[str, Image] = field(default_factory=dict)

    def apply(self, zxid: int, root_seq: int, changed: dict[str, Image | None]) -> None:
        self.zxid = zxid
        self.root_seq = root_seq
        for path, image in changed.items():
            if image is None:
                self.nodes.pop(path, None)
            else:
                self.nodes[path] = image


class Journal:
    def __init__(self, directory: Path, snapshot_every: int = 10_000) -> None:
        self.directory = directory
        self.snapshot_every = snapshot_every
        self.records = 0  # in the journal since the last snapshot
        self._fd: int | None = None
        self._size = 0  # the end of the last whole record
        # A failed append left bytes after `_size` that could not be cut yet: no
        # record may be appended behind them (load would drop it with them).
        self._torn = False

    @property
    def journal_path(self) -> Path:
        return self.directory / JOURNAL_FILE

    def load(self) -> StoredTree:
        """The snapshot and every whole record after it; a torn tail is cut off."""
        tree = StoredTree()
        snapshot = self.directory / SNAPSHOT_FILE
        if snapshot.exists():
            state = json.loads(snapshot.read_text())
            tree = StoredTree(state["zxid"], state.get("root_seq", 0), state["nodes"])
        good = 0
        if self.journal_path.exists():
            data = self.journal_path.read_bytes()
            pos = 0
            while pos + HEADER.size <= len(data):
                length, crc = HEADER.unpack_from(data, pos)
                end = pos + HEADER.size + length
                if length > MAX_RECORD_BYTES or end > len(data):
                    break
                payload = data[pos + HEADER.size : end]
                if crc32c.crc32c(payload) != crc:
                    break
                record = json.loads(payload)
                if record["zxid"] > tree.zxid:
                    tree.apply(record["zxid"], record["root_seq"], record["nodes"])
                self.records += 1
                pos = good = end
            if good < len(data):
                log.warning(
                    "metadata journal: cutting %d bytes of an unfinished record at %d",
                    len(data) - good, good,
                )  # fmt: skip
                with open(self.journal_path, "r+b") as f:
                    f.truncate(good)
                    os.fsync(f.fileno())
        self._size = good
        return tree

    def append(self, zxid: int, root_seq: int, changed: dict[str, Image | None]) -> None:
        """Write and fsync one record. On failure the journal is cut back to where
        it was (so the change is not replayed later) and the error raised. While
        such a cut fails, every append is refused with it (each tries the cut
        again first): one written behind a partial record would be lost."""
        payload = json.dumps(
            {"zxid": zxid, "root_seq": root_seq, "nodes": changed}, separators=(",", ":")
        ).encode()
        record = HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload
        fd = self._open()
        if self._torn:
            self._cut_back(fd)
            log.info("metadata journal: the tail of a failed append is cut at last")
        try:
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            try:
                self._cut_back(fd)
            except OSError as e:
                log.error(
                    "metadata journal: could not cut back a failed append: %s; refusing"
                    " changes until it can", e,
                )  # fmt: skip
            raise
        self._size += len(record)
        self.records += 1

    def _open(self) -> int:
        if self._fd is None:
            new = not self.journal_path.exists()
            self._fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if new:
                fsync_dir(self.directory)
        return self._fd

    def _cut_back(self, fd: int) -> None:
        """Cut what a failed append wrote, or raise OSError and stay torn. (Left
        there, a partial record ends what load reads; a whole one was never
        acknowledged, but the next start would replay it.)"""
        self._torn = True
        os.ftruncate(fd, self._size)
        os.fsync(fd)
        self._torn = False

    def close(self) -> None:
        """Let go of the journal file (a store opened only to write, then handed on)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def due_for_snapshot(self) -> bool:
        return self.records >= self.snapshot_every

    def snapshot(self, tree: StoredTree) -> None:
        """Write the whole tree, then empty the journal."""
        write_atomically(
            self.directory / SNAPSHOT_FILE,
            json.dumps(
                {"zxid": tree.zxid, "root_seq": tree.root_seq, "nodes": tree.nodes}
            ).encode(),
        )
        fd = self._open()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._size = 0
        self.records = 0
