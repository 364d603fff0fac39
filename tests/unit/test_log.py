"""The storage engine: append, read, roll, indexes, retention, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnknownServerError,
)
from moldau.protocol.records import (
    BatchHeader,
    Compression,
    TimestampType,
    build_batch,
    compress,
    compute_crc,
    decompress,
    iter_records,
    split_batches,
    validate_batch,
)
from moldau.storage.log import FetchDataInfo, Log
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords

TP = TopicPartition("t", 0)


def open_log(path: Path, clock: FakeClock, clean: bool = True, **config: object) -> Log:
    return Log.open(path, TP, LogConfig(**config), clock, had_clean_shutdown=clean)  # type: ignore[arg-type]


def batch(
    n: int, ts: int, size: int = 10, compression: Compression = Compression.NONE
) -> memoryview:
    return memoryview(
        build_batch(
            [(b"k%d" % i, b"v" * size) for i in range(n)], timestamp=ts, compression=compression
        )
    )


def records_of(info: FetchDataInfo) -> list[tuple[int, bytes | None]]:
    data = info.records.read() if isinstance(info.records, FileRecords) else info.records
    out = []
    for b in split_batches(data):
        out += [(r.offset, r.value) for r in iter_records(b)]
    return out


def all_records(log: Log) -> list[int]:
    """Every offset in the log, read as a consumer would: one read per segment."""
    offsets: list[int] = []
    pos = log.log_start_offset
    while pos < log.log_end_offset:
        got = [o for o, _ in records_of(log.read(pos, 2**30, log.log_end_offset, True))]
        assert got, f"no progress at {pos}"
        offsets += got
        pos = got[-1] + 1
    return offsets


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_offsets_are_assigned_contiguously_from_zero(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    infos = [log.append_as_leader(batch(3, clock.milliseconds()), 0) for _ in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == 12
    assert all_records(log) == list(range(12))


def test_appended_batch_keeps_its_bytes_except_offset_and_epoch(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(1, 5), 0)
    original = batch(2, 7)
    log.append_as_leader(original, 3)
    stored = log.read_batches(1, 3)[0]
    h = BatchHeader.parse(stored)
    assert (h.base_offset, h.partition_leader_epoch) == (1, 3)
    assert stored[17:] == bytes(original[17:])
    validate_batch(stored)  # the CRC still holds: it does not cover offset or epoch


def test_read_from_the_middle_of_a_batch_returns_that_whole_batch(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(5, 1), 0)
    log.append_as_leader(batch(5, 1), 0)
    info = log.read(7, 2**20, log.log_end_offset, True)
    assert [o for o, _ in records_of(info)] == [5, 6, 7, 8, 9]


def test_read_stops_at_max_offset(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    for _ in range(3):
        log.append_as_leader(batch(2, 1), 0)
    assert [o for o, _ in records_of(log.read(0, 2**20, 4, True))] == [0, 1, 2, 3]
    assert log.read(4, 2**20, 4, True).size == 0


def test_read_respects_max_bytes_but_returns_one_batch_when_asked(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    b = batch(1, 1, size=500)
    log.append_as_leader(b, 0)
    log.append_as_leader(b, 0)
    assert log.read(0, 100, 2, min_one_message=False).size == 100
    info = log.read(0, 100, 2, min_one_message=True)
    assert info.size == len(b)
    assert not info.first_entry_incomplete


@pytest.mark.parametrize("index_interval_bytes", [4096, 1])
def test_a_read_cut_by_max_bytes_ends_with_the_last_whole_batch(
    tmp_path: Path, clock: FakeClock, index_interval_bytes: int
) -> None:
    """Not with part of the next one, which a client would fetch again anyway;
    the index is used to find the cut (every batch indexed, or none)."""
    log = open_log(tmp_path, clock, index_interval_bytes=index_interval_bytes)
    b = batch(2, 1, size=300)
    for _ in range(10):
        log.append_as_leader(b, 0)
    info = log.read(0, 3 * len(b) + len(b) // 2, 20, min_one_message=True)
    assert info.size == 3 * len(b)
    assert [o for o, _ in records_of(info)] == [0, 1, 2, 3, 4, 5]
    info = log.read(4, 2 * len(b) - 1, 20, min_one_message=False)
    assert info.size == len(b)
    assert [o for o, _ in records_of(info)] == [4, 5]
    # Not even one whole batch fits and none is asked for: cut short, as Kafka does.
    assert log.read(4, len(b) - 1, 20, min_one_message=False).size == len(b) - 1


def test_out_of_range_offsets_are_refused(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_leader(batch(2, 1), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100, 2, True)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100, 2, True)
    assert log.read(2, 100, 2, True).size == 0  # the log end is a valid, empty position


def test_corrupt_and_oversized_batches_are_refused_and_nothing_is_appended(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, max_message_bytes=200)
    good = bytearray(batch(1, 1))
    good[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(memoryview(bytes(good)), 0)
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(batch(1, 1, size=300), 0)
    assert log.log_end_offset == 0
    assert log.size_in_bytes() == 0


def test_segments_roll_by_size_and_reads_cross_them(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for _ in range(20):
        log.append_as_leader(batch(2, 1, size=100), 0)
    assert len(log.segments) > 3
    assert sorted(p.name for p in tmp_path.glob("*.log"))[0] == "00000000000000000000.log"
    assert all_records(log) == list(range(40))


def test_read_batches_stops_at_max_batches_across_segments(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for _ in range(20):
        log.append_as_leader(batch(2, 1, size=100), 0)
    # Loading a log step by step: each step reads only what it asked for.
    offsets: list[int] = []
    position = 0
    while position < log.log_end_offset:
        step = log.read_batches(position, log.log_end_offset, max_batches=3)
        assert 1 <= len(step) <= 3
        offsets += [r.offset for b in step for r in iter_records(b)]
        position = offsets[-1] + 1
    assert offsets == list(range(40))


def test_segments_roll_by_age_of_record_timestamps(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_ms=1000)
    t0 = clock.milliseconds()
    log.append_as_leader(batch(1, t0), 0)
    log.append_as_leader(batch(1, t0 + 500), 0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, t0 + 1500), 0)
    assert len(log.segments) == 2
    assert log.segments[1].base_offset == 2


def test_sparse_index_finds_offsets_deep_in_a_segment(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=256)
    for i in range(300):
        log.append_as_leader(batch(1, i, size=50), 0)
    assert log.active_segment.offset_index.entries > 10
    for target in (0, 1, 150, 298, 299):
        info = log.read(target, 1, log.log_end_offset, True)
        assert records_of(info)[0][0] == target


def test_log_append_time_sets_timestamps_and_keeps_the_crc_valid(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    info = log.append_as_leader(batch(3, 12345, compression=Compression.LZ4), 0)
    assert info.log_append_time == clock.milliseconds()
    stored = log.read_batches(0, 3)[0]
    h = validate_batch(stored)
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in iter_records(stored)] == [clock.milliseconds()] * 3


def test_create_time_outside_the_allowed_window_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, message_timestamp_before_max_ms=1000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, clock.milliseconds() - 5000), 0)
    log.append_as_leader(batch(1, clock.milliseconds() - 500), 0)
    assert log.log_end_offset == 1


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_a_refused_batch_names_each_keyless_record_of_a_compacted_topic(
    tmp_path: Path, clock: FakeClock, compression: Compression
) -> None:
    """KIP-467: the client fails exactly the named records; the others of the batch
    are told apart. Nothing is appended."""
    log = open_log(tmp_path, clock, compact=True)
    keys = [b"a", None, b"b", None, None]
    refused = build_batch([(k, b"v") for k in keys], compression=compression)
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(memoryview(refused), 0)
    assert [i for i, _ in e.value.record_errors] == [1, 3, 4]
    assert all("key" in (why or "") for _, why in e.value.record_errors)
    assert log.log_end_offset == 0
    log.append_as_leader(memoryview(build_batch([(b"a", b"v")])), 0)
    assert log.log_end_offset == 1


def test_a_record_older_than_its_batchs_first_is_refused_by_name(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The header's base timestamp is the first record's, not the oldest's: with
    before.max.ms set, the records themselves are checked, as Kafka checks them."""
    now = clock.milliseconds()
    log = open_log(
        tmp_path, clock, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000
    )
    stamps = [now, now - 5000, now - 10, now - 20]
    refused = build_batch([(b"k", b"v")] * 4, timestamps=stamps, compression=Compression.GZIP)
    assert BatchHeader.parse(refused).base_timestamp == now
    with pytest.raises(InvalidTimestampError) as e:
        log.append_as_leader(memoryview(refused), 0)
    assert [i for i, _ in e.value.record_errors] == [1]
    assert log.log_end_offset == 0


def test_a_producer_may_not_set_log_append_time(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError) as e:
        log.append_as_leader(memoryview(build_batch([(b"k", b"v")] * 2, log_append_time=True)), 0)
    assert [i for i, _ in e.value.record_errors] == [0, 1]


def test_offset_for_timestamp_finds_the_first_record_at_or_after(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=600, index_interval_bytes=100)
    for i in range(30):
        ts = 1000 + i * 10
        b = build_batch([(None, b"a"), (None, b"b")], timestamps=[ts, ts + 5])
        log.append_as_leader(memoryview(b), 0)
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (1000, 0)
    assert log.offset_for_timestamp(1005) == (1005, 1)
    assert log.offset_for_timestamp(1006) == (1010, 2)
    assert log.offset_for_timestamp(1150) == (1150, 30)
    assert log.offset_for_timestamp(1296) is None
    assert log.max_timestamp_and_offset() == (1295, 59)


def test_retention_by_bytes_deletes_oldest_segments_below_hw(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=500, retention_bytes=1000, file_delete_delay_ms=0)
    for _ in range(20):
        log.append_as_leader(batch(1, clock.milliseconds(), size=100), 0)
    before = len(log.segments)
    assert log.delete_old_segments(high_watermark=0) == 0  # nothing below the HW
    deleted = log.delete_old_segments(high_watermark=log.log_end_offset)
    assert deleted > 0 and len(log.segments) == before - deleted
    assert log.size_in_bytes() - log.active_segment.size <= 1000
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100, log.log_end_offset, True)
    log.delete_expired_files(clock.milliseconds())
    assert not list(tmp_path.glob("*.deleted"))
    assert len(list(tmp_path.glob("*.log"))) == len(log.segments)


def test_retention_by_time_can_delete_everything_and_keeps_the_offsets(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, retention_ms=1000)
    for _ in range(3):
        log.append_as_leader(batch(1, clock.milliseconds()), 0)
    clock.advance(5000)
    assert log.delete_old_segments(log.log_end_offset) == 1
    assert log.log_start_offset == log.log_end_offset == 3
    assert log.append_as_leader(batch(1, clock.milliseconds()), 0).first_offset == 3


def test_clean_reopen_keeps_everything(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=700)
    for i in range(10):
        log.append_as_leader(batch(2, 100 + i), 0)
    log.close()
    log = open_log(tmp_path, clock, segment_bytes=700)
    assert log.log_end_offset == 20
    assert all_records(log) == list(range(20))
    assert log.offset_for_timestamp(105) == (105, 10)
    assert log.append_as_leader(batch(1, 1), 0).first_offset == 20


@pytest.mark.parametrize("damage", ["torn", "garbage", "bad_crc"])
def test_recovery_cuts_a_torn_or_corrupt_tail(
    tmp_path: Path, clock: FakeClock, damage: str
) -> None:
    log = open_log(tmp_path, clock)
    for _ in range(5):
        log.append_as_leader(batch(2, 1), 0)
    good_size = log.size_in_bytes()
    path = log.active_segment.log_path
    # Simulate a crash: no close, then damage the end of the file.
    extra = bytes(batch(2, 1))
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        if damage == "torn":
            f.write(extra[: len(extra) // 2])
        elif damage == "garbage":
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x0a\x7f\xff\xff\xff" + b"junk" * 10)
        else:
            b = bytearray(extra)
            b[0:8] = (10).to_bytes(8, "big")
            b[-1] ^= 1
            f.write(b)
    log = open_log(tmp_path, clock, clean=False)
    assert log.size_in_bytes() == good_size
    assert log.log_end_offset == 10
    assert all_records(log) == list(range(10))
    assert log.append_as_leader(batch(1, 1), 0).first_offset == 10


def test_recovery_rebuilds_a_lost_index(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=100)
    for i in range(50):
        log.append_as_leader(batch(1, i), 0)
    index_path = log.active_segment.offset_index.path
    log.close()
    index_path.write_bytes(b"\x00\x00\x00\x05")  # a torn, nonsense index
    log = open_log(tmp_path, clock, clean=False, index_interval_bytes=100)
    assert log.active_segment.offset_index.entries > 5
    assert records_of(log.read(42, 1, 50, True))[0][0] == 42


def test_truncate_to_removes_the_tail(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=400)
    for _ in range(10):
        log.append_as_leader(batch(2, 1), 0)
    log.truncate_to(8)
    assert log.log_end_offset == 8
    assert all_records(log) == list(range(8))
    assert log.append_as_leader(batch(1, 1), 0).first_offset == 8


def idempotent_batch(pid: int, epoch: int, seq: int, n: int = 2) -> memoryview:
    return memoryview(
        build_batch(
            [(None, b"v%d" % i) for i in range(n)],
            timestamp=1,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )


def test_a_retried_idempotent_batch_is_acknowledged_with_its_offsets_not_appended(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    first = log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    log.append_as_leader(idempotent_batch(7, 0, 2), 0)
    retry = log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4


@pytest.mark.parametrize("reopen", [False, True])
def test_a_retried_batch_is_answered_with_the_time_of_its_first_append(
    tmp_path: Path, clock: FakeClock, reopen: bool
) -> None:
    """On a LogAppendTime topic the retry gets the broker's time of the append that
    wrote the batch, not the producer's timestamp nor -1, also once the producer
    state comes back from a snapshot; on a CreateTime topic, -1 both times."""
    log = open_log(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    first = log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    assert first.log_append_time == clock.milliseconds()
    clock.advance(5_000)
    if reopen:
        log.close()
        log = open_log(tmp_path, clock, message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    retry = log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    assert retry.duplicate and retry.first_offset == first.first_offset
    assert retry.log_append_time == first.log_append_time

    create_time = open_log(tmp_path / "create-time", clock)
    first = create_time.append_as_leader(idempotent_batch(7, 0, 0), 0)
    clock.advance(5_000)
    retry = create_time.append_as_leader(idempotent_batch(7, 0, 0), 0)
    assert retry.duplicate and retry.log_append_time == first.log_append_time == -1


def test_sequence_gaps_and_old_epochs_are_refused(tmp_path: Path, clock: FakeClock) -> None:
    from moldau.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError

    log = open_log(tmp_path, clock)
    log.append_as_leader(idempotent_batch(7, 1, 0), 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idempotent_batch(7, 1, 5), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idempotent_batch(7, 0, 2), 0)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idempotent_batch(7, 2, 3), 0)  # a new epoch starts at 0
    log.append_as_leader(idempotent_batch(7, 2, 0), 0)
    log.append_as_leader(idempotent_batch(8, 0, 40), 0)  # an unknown producer may start anywhere
    assert log.log_end_offset == 6


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_reopen(tmp_path: Path, clock: FakeClock, clean: bool) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    for seq in range(0, 20, 2):
        log.append_as_leader(idempotent_batch(7, 0, seq), 0)
    assert len(log.segments) > 2
    if clean:
        log.close()
    log = open_log(tmp_path, clock, clean=clean, segment_bytes=300)
    retry = log.append_as_leader(idempotent_batch(7, 0, 18), 0)
    assert retry.duplicate and retry.first_offset == 18
    from moldau.protocol.errors import OutOfOrderSequenceNumberError

    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(idempotent_batch(7, 0, 30), 0)
    assert log.append_as_leader(idempotent_batch(7, 0, 20), 0).first_offset == 20


def test_a_log_closed_again_without_appends_writes_no_new_snapshot(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Stopping a broker whose partitions took no writes since its start rewrites
    none of their producer state snapshots (as Kafka); the state stays exact."""
    log = open_log(tmp_path, clock)
    log.append_as_leader(idempotent_batch(7, 0, 0), 0)
    log.close()
    [snapshot] = tmp_path.glob("*.snapshot")
    written = snapshot.stat()
    log = open_log(tmp_path, clock)
    log.close()
    again = snapshot.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    log = open_log(tmp_path, clock)
    assert log.append_as_leader(idempotent_batch(7, 0, 0), 0).duplicate
    log.append_as_leader(idempotent_batch(7, 0, 2), 0)
    log.close()
    assert len(list(tmp_path.glob("*.snapshot"))) == 2


@pytest.mark.parametrize("target", [Compression.NONE, Compression.ZSTD, Compression.GZIP])
def test_a_topic_codec_other_than_producer_recompresses(
    tmp_path: Path, clock: FakeClock, target: Compression
) -> None:
    log = open_log(tmp_path, clock, compression=target)
    source = build_batch(
        [(b"k", b"v" * 100, [("h", b"1")]), (None, None)],
        timestamps=[5, 9],
        compression=Compression.LZ4,
        producer_id=3,
        producer_epoch=1,
        base_sequence=0,
    )
    log.append_as_leader(memoryview(source), 2)
    stored = log.read_batches(0, 2)[0]
    h = validate_batch(stored)
    assert h.compression == target
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (3, 1, 0)
    assert h.partition_leader_epoch == 2
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(stored)] == [
        (0, 5, b"k", b"v" * 100, (("h", b"1"),)),
        (1, 9, None, None, ()),
    ]


def test_a_lost_leader_epoch_checkpoint_comes_back_from_the_batches(
    tmp_path: Path, clock: FakeClock
) -> None:
    """New epochs are written without an fsync: after a crash (here, the file's
    later entries lost) recovery takes the epochs back from the batches it re-reads;
    a flush forces the file to disk."""
    log = open_log(tmp_path, clock)
    log.assign_leader_epoch(0, 0)
    log.append_as_leader(batch(3, 1000), 0)
    log.assign_leader_epoch(2, 3)
    log.append_as_leader(batch(2, 1000), 2)
    log.flush()
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 3)]
    log.close_handlers()
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")  # as a power loss may leave it
    reopened = open_log(tmp_path, clock, clean=False)
    assert reopened.leader_epoch_cache.entries == [(0, 0), (2, 3)]
    assert reopened.leader_epoch_cache.end_offset_for(0, reopened.log_end_offset) == (0, 3)


def test_a_truncation_below_the_log_start_brings_the_log_start_down_with_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    # A follower copied its leader's log start (5) inside its first segment, then is
    # cut back to 3: a log start above the log end would make every read of it out
    # of range, and the next fetch from 3 impossible.
    log = open_log(tmp_path, clock)
    for _ in range(8):
        log.append_as_leader(batch(1, clock.milliseconds()), 0)
    log.maybe_increment_log_start_offset(5)
    assert log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    log.append_as_follower(memoryview(build_batch([(b"k", b"v")], base_offset=3)))
    assert all_records(log) == [3]


def test_a_producer_batch_of_control_records_or_without_a_sequence_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    """As Kafka's LogValidator: the whole batch is INVALID_RECORD, no record named."""
    log = open_log(tmp_path, clock)
    no_sequence = build_batch([(b"k", b"v")], producer_id=7, producer_epoch=0, base_sequence=-1)
    control = bytearray(build_batch([(b"k", b"v")]))
    control[22] |= 0x20
    control[17:21] = compute_crc(control).to_bytes(4, "big")
    for refused in (no_sequence, bytes(control)):
        with pytest.raises(InvalidRecordError) as e:
            log.append_as_leader(memoryview(refused), 0)
        assert e.value.record_errors == []
    assert log.log_end_offset == 0


def test_a_recompressing_topic_uses_its_codecs_level(tmp_path: Path, clock: FakeClock) -> None:
    """compression.zstd.level shapes what is stored;
    the records stay as sent."""
    sent = build_batch(
        [(b"k%d" % i, b"%d-" % (i * 7919 % 1000) * 20) for i in range(300)],
        timestamp=clock.milliseconds(),
        compression=Compression.GZIP,
    )
    stored = {}
    for level in (1, 19):
        log = open_log(
            tmp_path / str(level), clock, compression=Compression.ZSTD, compression_level=level
        )
        log.append_as_leader(memoryview(sent), 0)
        data = log.read(0, 1 << 20, log.log_end_offset, True).records
        stored[level] = data.read() if isinstance(data, FileRecords) else data
        assert BatchHeader.parse(stored[level]).compression == Compression.ZSTD
        assert [r.value for r in iter_records(stored[level])] == [
            r.value for r in iter_records(sent)
        ]
    assert len(stored[19]) < len(stored[1])


def test_lz4_at_kafkas_default_level_is_its_fast_compressor(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Kafka compresses lz4 at its default level 9 with the fast compressor, and at any
    other level with HC: level 9 stores more than HC's level 8 would."""
    words = [b"alpha", b"beta", b"gamma", b"delta"]

    def text(i: int) -> bytes:
        return b" ".join(
            words[i * j % 4] + b"%d" % ((i * 7919 + j * 104_729) % 100_000) for j in range(50)
        )

    sent = build_batch([(b"k%d" % i, text(i)) for i in range(300)], timestamp=clock.milliseconds())
    sizes = {}
    for level in (9, 8):
        log = open_log(
            tmp_path / str(level), clock, compression=Compression.LZ4, compression_level=level
        )
        sizes[level] = log.append_as_leader(memoryview(sent), 0).size
    assert sizes[9] > sizes[8]


@pytest.mark.parametrize("level", [None, 9, 1, 17])
def test_lz4_frames_are_of_independent_blocks_as_kafka_reads_them(level: int | None) -> None:
    """Kafka's Lz4BlockInputStream refuses a frame of linked blocks ("Dependent block
    stream is unsupported"): what the broker recompresses to lz4, or the cleaner
    rewrites, must set FLG's block-independence bit."""
    data = b"".join(b"record %d of a batch; " % i for i in range(20_000))
    frame = compress(Compression.LZ4, data, level)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # the frame's magic, little-endian
    flg = frame[4]
    assert flg >> 6 == 1 and flg & 0x20, f"FLG {flg:#x}"
    assert decompress(Compression.LZ4, frame) == data


@pytest.mark.parametrize(
    ("compression", "error"),
    # Kafka 4.1: INVALID_RECORD for records that do not parse, UNKNOWN_SERVER_ERROR
    # (its decompression's bare KafkaException) for a payload that does not decompress.
    [(Compression.NONE, InvalidRecordError), (Compression.ZSTD, UnknownServerError)],
)
@pytest.mark.parametrize(
    "config",
    [{"compact": True}, {"compression": Compression.GZIP}],
    ids=["compacted", "recompressed"],
)
def test_records_that_cannot_be_read_refuse_the_batch_with_a_kafka_error(
    tmp_path: Path,
    clock: FakeClock,
    compression: Compression,
    error: type[Exception],
    config: dict[str, object],
) -> None:
    """A valid CRC over records that do not parse (or decompress) is the partition's
    error, not an exception that fails the whole request."""
    log = open_log(tmp_path, clock, **config)
    garbled = bytearray(build_batch([(b"k", b"v" * 50)] * 3, compression=compression))
    garbled[61:] = b"\xff" * (len(garbled) - 61)
    garbled[17:21] = compute_crc(garbled).to_bytes(4, "big")
    with pytest.raises(error):
        log.append_as_leader(memoryview(bytes(garbled)), 0)
    assert log.log_end_offset == 0
