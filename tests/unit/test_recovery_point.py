"""What the recovery point claims is on disk, and only that: a restart after a crash
re-reads every segment past it, so a recovery point above records that never
reached the disk lets an OS crash tear them unnoticed (a gap, or garbage, where
recovery would have cut the log back to whole batches).

A flush on a worker thread that races a follower's truncation, a recovery that
would move the recovery point to the log end without an fsync, and a clean
shutdown that would trust syncfs where the kernel does not report write-back
errors are each checked here."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import moldau.storage.log_manager
import moldau.storage.segment
from moldau.clock import FakeClock
from moldau.protocol.records import build_batch
from moldau.storage import checkpoint
from moldau.storage.checkpoint import OffsetCheckpointFile, syncfs_reports_errors
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.log_dir_failure import LogDirFailureChannel
from moldau.storage.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import LogSegment
from tests.unit.test_log import records_of

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000
# Three or four batches of three records a segment.
CONFIG = LogConfig(segment_bytes=400)


def batch(offset: int, tag: bytes) -> memoryview:
    """Three records, as a leader wrote them at `offset` (a follower's append)."""
    data = bytearray(
        build_batch([(b"k", b"%s-%d" % (tag, offset + j)) for j in range(3)], timestamp=TS)
    )
    data[0:8] = offset.to_bytes(8, "big")
    return memoryview(bytes(data))


def append(log: Log, count: int, tag: bytes) -> None:
    for _ in range(count):
        log.append_as_follower(batch(log.log_end_offset, tag))


def read_all(log: Log) -> list[tuple[int, bytes | None]]:
    """Every record, read as a consumer would from the log start (a read stops at a
    segment's end)."""
    out: list[tuple[int, bytes | None]] = []
    pos = log.log_start_offset
    while pos < log.log_end_offset:
        got = records_of(log.read(pos, 2**30, log.log_end_offset, True))
        if not got:
            break
        out += got
        pos = got[-1][0] + 1
    return out


def expected(tags: list[tuple[int, bytes]], end: int) -> list[tuple[int, bytes | None]]:
    """The records below `end`, each offset's value from the last tag that wrote it."""
    values: dict[int, bytes] = {}
    for start, tag in tags:
        for o in range(start, end):
            values[o] = b"%s-%d" % (tag, o)
    return [(o, values[o]) for o in range(end)]


def tear_last_batch(segment: LogSegment) -> int:
    """An OS crash lost the end of `segment`'s file, never fsynced: its last batch
    is cut in half. Returns that batch's base offset."""
    *_, last = segment.batches_from(0)
    os.truncate(segment.log_path, last.position + last.size // 2)
    return last.base_offset


class BlockingFsync:
    """The segment module's `os`: the fsync of `fd` from a worker thread waits until
    the test releases it, so the test runs a truncation in between."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.entered = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        if fd == self.fd and threading.current_thread() is not threading.main_thread():
            self.entered.set()
            assert self.release.wait(30)
        os.fsync(fd)


def test_a_truncation_during_a_flush_neither_fails_the_disk_nor_claims_what_it_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush of the whole log (27 records, three segments) runs on a worker
    thread; while it fsyncs the second segment, the follower cuts its log to 6 (the
    event loop does not wait for flushes), which removes that segment. Its
    descriptor must still be open when the fsync runs (an EBADF would take the log
    directory offline), and the recovery point the flush sets may not pass 6.
    Records appended after the cut, never flushed, are then recovered by the next
    unclean start: an OS crash that tore one of them leaves a log cut back to whole
    batches, not a torn batch a consumer would fail on."""
    channel = LogDirFailureChannel()
    log = Log.open(
        tmp_path / "t-0", TP, CONFIG, FakeClock(TS), had_clean_shutdown=True,
        failure_channel=channel,
    )  # fmt: skip
    append(log, 9, b"old")
    assert len(log.segments) == 3
    # The flush waits in the fsync of the second segment, which the cut removes.
    fsync = BlockingFsync(log.segments[1]._held().fd)
    monkeypatch.setattr(moldau.storage.segment, "os", fsync)
    with ThreadPoolExecutor(1) as pool:
        flush = pool.submit(log.flush)
        assert fsync.entered.wait(30)
        assert log.truncate_to(6)
        fsync.release.set()
        flush.result()  # no KafkaStorageError
    assert not channel.is_offline(log.log_dir)
    assert log.recovery_point <= log.log_end_offset == 6

    append(log, 7, b"new")  # 6-26, in three segments again, not flushed
    assert len(log.segments) == 3
    torn = tear_last_batch(log.segments[1])
    log.close_handlers()  # the crash: no flush, no clean shutdown
    reopened = Log.open(
        log.dir, TP, CONFIG, FakeClock(TS), recovery_point=log.recovery_point,
        had_clean_shutdown=False,
    )  # fmt: skip
    assert read_all(reopened) == expected([(0, b"old"), (6, b"new")], torn)
    assert reopened.log_end_offset == torn
    reopened.close_handlers()


def start(data: Path) -> LogManager:
    manager = LogManager([data], FakeClock(TS), 1)
    manager.startup(lambda _: CONFIG, "cluster")
    return manager


def test_a_recovered_log_keeps_its_recovery_point_until_a_flush(tmp_path: Path) -> None:
    """A broker killed before any flush restarts and recovers its log (27 records,
    three segments). The recovery re-read the records, it did not fsync them: the
    recovery point it checkpoints stays where it was (0, as Kafka's LogLoader
    keeps it), so when an OS crash then tears the middle segment and kills the
    broker again, the next start cuts the log back to whole batches instead of
    trusting the torn segment."""
    manager = start(tmp_path)
    lg = manager.get_or_create_log(TP, CONFIG)
    append(lg, 9, b"v")
    manager.checkpoint()
    manager.halt()

    manager = start(tmp_path)
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {TP: 0}
    lg = manager.logs[TP]
    torn = tear_last_batch(lg.segments[1])
    manager.halt()

    manager = start(tmp_path)
    lg = manager.logs[TP]
    assert read_all(lg) == expected([(0, b"v")], torn)
    assert lg.log_end_offset == torn
    manager.halt()


@pytest.mark.parametrize(
    ("release", "reports"),
    [
        ("5.8.0", True),
        ("5.15.0-91-generic", True),
        ("6.1.0-18-amd64", True),
        ("10.2", True),
        ("5.7.19-arch1-1", False),
        ("4.19.0-25-amd64", False),
        ("3.10.0-1160.el7.x86_64", False),
        ("", False),
        ("unknown", False),
    ],
)
def test_syncfs_reports_write_back_errors_from_linux_5_8(release: str, reports: bool) -> None:
    assert syncfs_reports_errors(release) is reports


@pytest.mark.skipif(not checkpoint.can_sync_filesystem(), reason="no syncfs here")
@pytest.mark.parametrize(("release", "syncfs"), [("5.4.0-150-generic", False), ("5.8.0", True)])
def test_a_clean_shutdown_trusts_syncfs_only_where_it_reports_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str, syncfs: bool
) -> None:
    """Where syncfs would hide a failed write-back, a clean shutdown fsyncs each
    log's files instead, whatever the number of logs."""
    monkeypatch.setattr(moldau.storage.log_manager, "SYNC_FILESYSTEM_ABOVE_LOGS", 0)
    uname = os.uname()
    monkeypatch.setattr(
        os, "uname", lambda: os.uname_result((uname[0], uname[1], release, *uname[3:]))
    )
    synced: list[Path] = []
    monkeypatch.setattr(moldau.storage.log_manager, "sync_filesystem", synced.append)
    manager = start(tmp_path)
    append(manager.get_or_create_log(TP, CONFIG), 2, b"v")
    manager.shutdown()
    assert synced == ([tmp_path.resolve()] if syncfs else [])
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {TP: 6}


def test_a_truncation_writes_the_leader_epochs_off_the_loop_before_the_recovery_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's truncation runs on the event loop: it must not fsync the
    leader-epoch checkpoint there (a slow disk would stall every client). It
    changes the epochs in memory; the checkpoint the fetcher writes on a worker
    thread before it appends past the cut writes the file, then the recovery
    points."""
    from moldau.storage.leader_epoch import CHECKPOINT_NAME

    manager = LogManager([tmp_path], FakeClock(TS), 1)
    log = manager.get_or_create_log(TP, CONFIG)
    for epoch in (1, 2):  # epoch 1 from offset 0, epoch 2 from offset 9
        for _ in range(3):
            b = bytearray(batch(log.log_end_offset, b"e%d" % epoch))
            b[12:16] = epoch.to_bytes(4, "big")  # partitionLeaderEpoch, outside the CRC
            log.append_as_follower(memoryview(bytes(b)))
    log.flush()
    epochs_file = checkpoint.LeaderEpochCheckpointFile(log.dir / CHECKPOINT_NAME)
    assert epochs_file.read() == [(1, 0), (2, 9)]

    written: list[tuple[str, str]] = []

    class RecordingOs:
        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        def replace(self, src: str | Path, dst: str | Path) -> None:
            written.append((Path(dst).name, threading.current_thread().name))
            os.replace(src, dst)

        def fsync(self, fd: int) -> None:
            written.append(("fsync", threading.current_thread().name))
            os.fsync(fd)

    monkeypatch.setattr(checkpoint, "os", RecordingOs())
    assert log.truncate_to(9)
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert written == []  # nothing written, let alone fsynced, on the loop's thread
    with ThreadPoolExecutor(1, thread_name_prefix="checkpoint") as pool:
        pool.submit(manager.write_checkpoints, manager.checkpoint_snapshot()).result()
    assert epochs_file.read() == [(1, 0)]
    renamed = [name for name, _ in written if name != "fsync"]
    assert renamed.index(CHECKPOINT_NAME) < renamed.index(RECOVERY_POINT_CHECKPOINT)
    assert all(thread.startswith("checkpoint") for _, thread in written)
