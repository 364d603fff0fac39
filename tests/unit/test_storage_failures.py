"""A write that fails on the append path leaves the log as it was (issue: a full disk
must never cost an acknowledged record). Every write of an append is made to fail in
turn (the log file, the indexes, the producer snapshot of a roll, the leader epoch
checkpoint, an fsync), with a partial write landing first: the log afterwards has the
same records, offsets and files as before, its directory is offline, and once
reopened (a restart) it takes the next batch at the same offset."""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import KafkaStorageError
from moldau.protocol.records import build_batch
from moldau.storage.checkpoint import OffsetCheckpointFile
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.log_dir_failure import LogDirFailureChannel
from moldau.storage.partition_name import TopicPartition
from tests.faults import failing_os
from tests.unit.test_log import records_of

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


def batch(i: int, n: int = 3, producer_id: int = -1, sequence: int = -1) -> memoryview:
    return memoryview(
        build_batch(
            [(b"k%d" % j, b"value-%d-%d" % (i, j)) for j in range(n)],
            timestamp=TS + i,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=sequence,
        )
    )


@dataclass(frozen=True)
class Scenario:
    name: str
    config: dict[str, Any]
    # What the next append is: (log, batch number) -> append it.
    append: Callable[[Log, int], object]
    rolls: bool = False


def leader(epoch: int = 0) -> Callable[[Log, int], object]:
    return lambda log, i: log.append_as_leader(batch(i, producer_id=7, sequence=3 * i), epoch)


def follower(log: Log, i: int) -> object:
    b = bytearray(batch(i))
    b[0:8] = log.log_end_offset.to_bytes(8, "big")  # a leader's offsets
    return log.append_as_follower(memoryview(bytes(b)))


SCENARIOS = [
    # Every append writes an index and a time index entry.
    Scenario("index entries", {"index_interval_bytes": 1}, leader()),
    # The append rolls a new segment: producer snapshot, new files, time index entry.
    Scenario("roll", {"segment_bytes": 400, "index_interval_bytes": 1}, leader(), rolls=True),
    # A new leader epoch: the leader-epoch-checkpoint is written.
    Scenario("new leader epoch", {}, leader(epoch=1)),
    # flush.messages=1: every append is fsynced.
    Scenario("flush", {"flush_messages": 1}, leader()),
    Scenario("follower", {"index_interval_bytes": 1}, follower),
]
PRIOR_BATCHES = 4


def build(directory: Path, scenario: Scenario) -> Log:
    log = Log.open(
        directory / "t-0",
        TP,
        LogConfig(**scenario.config),
        FakeClock(TS + 100),
        had_clean_shutdown=True,
        failure_channel=LogDirFailureChannel(),
    )
    for i in range(PRIOR_BATCHES):
        log.append_as_leader(batch(i, producer_id=7, sequence=3 * i), 0)
    return log


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def log_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def memory_state(log: Log) -> object:
    return (
        log.log_end_offset,
        log.recovery_point,
        [
            (
                s.base_offset,
                s.size,
                s.offset_index.entries,
                s.time_index.entries,
                s.max_timestamp_so_far,
                s.offset_of_max_timestamp,
                s.rolling_based_timestamp,
                s.bytes_since_last_index_entry,
            )
            for s in log.segments
            if s.size
        ],
        log.leader_epoch_cache.entries,
        {pid: list(e.batches) for pid, e in log.producer_state.producers.items()},
    )


def reopen(log: Log) -> Log:
    log.close_handlers()
    return Log.open(
        log.dir, TP, log.config, FakeClock(TS + 100), had_clean_shutdown=False,
        failure_channel=LogDirFailureChannel(),
    )  # fmt: skip


def read_all(log: Log) -> list[tuple[int, bytes | None]]:
    return records_of(log.read(log.log_start_offset, 2**30, log.log_end_offset, True))


def count_writes(tmp_path: Path, scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> int:
    log = build(tmp_path / "count", scenario)
    with failing_os(monkeypatch) as fake:
        scenario.append(log, PRIOR_BATCHES)
    log.close_handlers()
    return len(fake.calls)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_failed_write_anywhere_in_an_append_leaves_the_log_as_it_was(
    tmp_path: Path, scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = count_writes(tmp_path, scenario, monkeypatch)
    assert writes >= 1
    for n in range(writes):
        log = build(tmp_path / str(n), scenario)
        before_memory, before_files = memory_state(log), files(log.dir)
        before_records = read_all(log)
        with failing_os(monkeypatch, fail_at=n) as fake, pytest.raises(KafkaStorageError):
            scenario.append(log, PRIOR_BATCHES)
        assert memory_state(log) == before_memory, f"write {n} ({fake.calls[n]})"
        if scenario.rolls:
            assert log_bytes(log.dir) == b"".join(
                v for k, v in before_files.items() if k.endswith(".log")
            ), f"write {n} ({fake.calls[n]})"
        else:
            assert files(log.dir) == before_files, f"write {n} ({fake.calls[n]})"
        # The directory is offline: nothing more is written until a restart.
        assert log.failure_channel.is_offline(log.log_dir)
        with failing_os(monkeypatch) as after, pytest.raises(KafkaStorageError):
            scenario.append(log, PRIOR_BATCHES)
        assert after.calls == []
        restarted = reopen(log)
        assert read_all(restarted) == before_records
        info = scenario.append(restarted, PRIOR_BATCHES)
        assert getattr(info, "first_offset", None) == before_memory[0]  # type: ignore[index]
        restarted.close_handlers()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_a_disk_that_fails_for_good_mid_append_loses_no_earlier_record(
    tmp_path: Path, scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO from the failing write on: the append cannot even be cut back. Memory is
    still as before, and recovery at the next start keeps every earlier record (the
    failed batch itself may or may not survive, as in Kafka: it was never
    acknowledged)."""
    writes = count_writes(tmp_path, scenario, monkeypatch)
    for n in range(writes):
        log = build(tmp_path / str(n), scenario)
        before_memory = memory_state(log)
        before_records = read_all(log)
        with (
            failing_os(monkeypatch, fail_at=n, code=errno.EIO, sticky=True),
            pytest.raises(KafkaStorageError),
        ):
            scenario.append(log, PRIOR_BATCHES)
        assert memory_state(log) == before_memory
        restarted = reopen(log)
        got = read_all(restarted)
        assert got[: len(before_records)] == before_records
        assert len(got) in (len(before_records), len(before_records) + 3)
        restarted.close_handlers()


def test_a_failed_checkpoint_write_keeps_the_previous_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TP: 5})
    before = path.read_bytes()
    with failing_os(monkeypatch) as fake:
        checkpoint.write({TP: 6})
    checkpoint.write({TP: 5})
    replaced_at = fake.calls.index("replace")
    for n in range(len(fake.calls)):
        with failing_os(monkeypatch, fail_at=n), pytest.raises(OSError):
            checkpoint.write({TP: 6})
        # Only a failure after the rename (the directory's fsync) shows the new file.
        assert (path.read_bytes() == before) == (n <= replaced_at), fake.calls[n]
        assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
        checkpoint.write({TP: 5})


def test_a_checkpoint_taken_earlier_but_written_late_does_not_replace_a_newer_one(
    tmp_path: Path,
) -> None:
    """Checkpoints are written by worker threads from snapshots: one that was slow to
    run (its thread queued while the broker shut down) must not put back older
    recovery points over the final checkpoint."""
    from moldau.storage.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager

    clock = FakeClock()
    manager = LogManager([tmp_path], clock, 1)
    manager.startup(lambda _: LogConfig(), "cluster")
    tp = TopicPartition("t", 0)
    lg = manager.get_or_create_log(tp, LogConfig())
    lg.append_as_leader(batch(0), 0)
    early = manager.checkpoint_snapshot()
    lg.flush()
    late = manager.checkpoint_snapshot()
    manager.write_checkpoints(late)
    manager.write_checkpoints(early)
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {tp: 3}
