"""Log compaction: the latest value per key stays, tombstones go after
delete.retention.ms, the active segment is never touched, and a swap interrupted by
a crash is completed at the next open."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import InvalidRecordError
from moldau.protocol.records import (
    BatchHeader,
    Compression,
    build_batch,
    iter_records,
    split_batches,
)
from moldau.storage.cleaner import CleanResult, clean, dirty_ratio
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords

TP = TopicPartition("compacted", 0)


def run(steps: Generator[None, None, CleanResult | None]) -> CleanResult | None:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def compacted_log(path: Path, clock: FakeClock, **config: object) -> Log:
    settings: dict[str, object] = {
        "compact": True, "delete": False, "segment_bytes": 600, "file_delete_delay_ms": 0,
    }  # fmt: skip
    settings.update(config)
    return Log.open(path, TP, LogConfig(**settings), clock, had_clean_shutdown=True)  # type: ignore[arg-type]


def contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for batch in log.read_batches(log.log_start_offset, log.log_end_offset):
        out += [(r.offset, r.key, r.value) for r in iter_records(batch)]
    return out


def write(
    log: Log,
    clock: FakeClock,
    key: bytes,
    value: bytes | None,
    codec: Compression = Compression.NONE,
) -> int:
    batch = build_batch([(key, value)], timestamp=clock.milliseconds(), compression=codec)
    return log.append_as_leader(memoryview(batch), 0).first_offset


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_only_the_latest_value_of_each_key_stays(tmp_path: Path, clock: FakeClock) -> None:
    log = compacted_log(tmp_path, clock)
    latest = {}
    for i in range(60):
        key = b"k%d" % (i % 5)
        latest[key] = (write(log, clock, key, b"v%d" % i, Compression.GZIP), b"v%d" % i)
    assert len(log.segments) > 3
    active_before = log.active_segment
    active_size = active_before.size
    assert dirty_ratio(log, 0, log.log_end_offset, clock.milliseconds()) == 1.0
    result = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert result is not None and result.records_removed > 0
    assert result.first_dirty_offset == log.active_segment.base_offset
    assert log.active_segment is active_before and active_before.size == active_size
    kept = contents(log)
    # Below the active segment each key appears once, with its latest value;
    # offsets never change.
    cleaned = [(o, k, v) for o, k, v in kept if o < active_before.base_offset]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)
    final = {k: (o, v) for o, k, v in kept}
    assert final == latest
    assert [o for o, _, _ in kept] == sorted(o for o, _, _ in kept)
    assert result.bytes_after < result.bytes_before
    assert (
        dirty_ratio(log, result.first_dirty_offset, log.log_end_offset, clock.milliseconds()) == 0.0
    )


def test_nothing_at_or_above_the_high_watermark_is_cleaned(
    tmp_path: Path, clock: FakeClock
) -> None:
    # K=v1 is committed; K=v2 and the records after it are not (the followers have
    # not fetched them). The cleaner must keep v1: v2 may yet be cut away by a new
    # leader, and a consumer reads only up to the high watermark.
    log = compacted_log(tmp_path, clock)
    write(log, clock, b"K", b"v1")
    hw = log.log_end_offset
    write(log, clock, b"K", b"v2")
    for i in range(40):
        write(log, clock, b"filler-%d" % i, b"x" * 10)
    assert len(log.segments) > 3
    assert dirty_ratio(log, 0, hw, clock.milliseconds()) == 0.0
    assert run(clean(log, 0, hw, clock.milliseconds())) is None
    data = log.read(0, 1 << 20, hw, min_one_message=True)
    assert [(r.key, r.value) for r in iter_records(data.records.read())] == [(b"K", b"v1")]

    # The HW moves into the third segment: the two segments below it are cleaned,
    # with only what lies below them in the key map; the rest is untouched.
    third = log.segments[2]
    hw = third.base_offset + 1
    untouched = [(s, s.size) for s in log.segments[2:]]
    result = run(clean(log, 0, hw, clock.milliseconds()))
    assert result is not None and result.first_dirty_offset == third.base_offset
    assert [(s, s.size) for s in log.segments[2:]] == untouched
    assert [(k, v) for _, k, v in contents(log) if k == b"K"] == [(b"K", b"v2")]
    # A consumer's read of the rewritten segments still stops at the HW.
    read = log.read(0, 1 << 20, hw, min_one_message=True).records
    raw = read.read() if isinstance(read, FileRecords) else read
    offsets = [r.offset for b in split_batches(raw) for r in iter_records(b)]
    assert offsets and max(offsets) < hw


def test_tombstones_are_removed_only_after_delete_retention(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = compacted_log(tmp_path, clock, delete_retention_ms=60_000)
    for i in range(10):
        write(log, clock, b"k%d" % i, b"value" * 10)
    for i in range(10):
        write(log, clock, b"k%d" % i, None)
    for i in range(20):
        write(log, clock, b"other", b"%d" % i)
    first = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert first is not None
    tombstones = [k for _, k, v in contents(log) if v is None]
    assert sorted(tombstones) == sorted(b"k%d" % i for i in range(10))
    # Later: the segments holding the tombstones are more than delete.retention.ms
    # older than the newest cleaned segment.
    cleaned = [s for s in log.segments if s.base_offset < first.first_dirty_offset]
    for seg in cleaned[:-1]:
        os.utime(seg.log_path, (0, 0))
    for i in range(20):
        write(log, clock, b"more", b"%d" % i)
    second = run(clean(log, first.first_dirty_offset, log.log_end_offset, clock.milliseconds()))
    assert second is not None
    assert [k for _, k, v in contents(log) if v is None] == []
    assert b"k3" not in {k for _, k, _ in contents(log)}


def test_compacted_topics_refuse_records_without_keys(tmp_path: Path, clock: FakeClock) -> None:
    log = compacted_log(tmp_path, clock)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(memoryview(build_batch([(b"k", b"v"), (None, b"v")])), 0)
    assert log.log_end_offset == 0


def test_an_interrupted_swap_is_completed_on_open(tmp_path: Path, clock: FakeClock) -> None:
    log = compacted_log(tmp_path, clock)
    for i in range(40):
        write(log, clock, b"k%d" % (i % 3), b"v%d" % i)
    first = log.segments[0]
    # A crash after the cleaned segment became .swap but before it replaced the old one.
    cleaned = log.new_cleaned_segment(first.base_offset)
    for batch in log.read_batches(first.base_offset, log.segments[1].base_offset)[-1:]:
        from moldau.protocol.records import BatchHeader

        h = BatchHeader.parse(batch)
        cleaned.append(h.last_offset, h.max_timestamp, h.last_offset, [batch], len(batch))
    cleaned.flush()
    cleaned.change_file_suffix(".cleaned", ".swap")
    expected_first = log.read_batches(first.base_offset, log.segments[1].base_offset)[-1]
    log.close()
    reopened = compacted_log(tmp_path, clock)
    assert not list(tmp_path.glob("*.swap"))
    assert reopened.read_batches(0, reopened.segments[1].base_offset) == [expected_first]
    assert reopened.log_end_offset == 40


def test_a_cleaner_write_that_fails_anywhere_loses_no_latest_value(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while compacting (the .cleaned segment, or any rename of the swap):
    the directory goes offline, and the next start finds every key's latest value at
    its offset, every record of the active segment, and nothing half-swapped."""
    from moldau.protocol.errors import KafkaStorageError
    from moldau.storage.log_dir_failure import LogDirFailureChannel
    from tests.faults import failing_os

    def build(path: Path) -> tuple[Log, dict[bytes, tuple[int, bytes]]]:
        log = compacted_log(path, clock)
        latest = {}
        for i in range(40):
            key = b"k%d" % (i % 4)
            latest[key] = (write(log, clock, key, b"v%d" % i), b"v%d" % i)
        return log, latest

    probe, _ = build(tmp_path / "probe")
    with failing_os(monkeypatch) as fake:
        assert run(clean(probe, 0, probe.log_end_offset, clock.milliseconds())) is not None
    writes = len(fake.calls)
    assert writes > 10
    for n in range(writes):
        log, latest = build(tmp_path / str(n))
        before = contents(log)
        channel = LogDirFailureChannel()
        with (
            failing_os(monkeypatch, fail_at=n) as fake,
            pytest.raises((OSError, KafkaStorageError)),
        ):
            run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
        log.close_handlers()
        reopened = Log.open(
            log.dir, TP, log.config, clock, had_clean_shutdown=False, failure_channel=channel
        )
        after = contents(reopened)
        assert {(k, (o, v)) for o, k, v in after if k is not None and latest[k] == (o, v)} == {
            (k, ov) for k, ov in latest.items()
        }, f"write {n} ({fake.calls[n]})"
        # Whatever is there was there before (compaction only removes), in order.
        assert set(after) <= set(before) and after == sorted(after)
        assert not [p for p in reopened.dir.iterdir() if p.suffix in (".cleaned", ".swap")]
        reopened.close_handlers()


def test_a_log_deleted_while_the_cleaner_works_on_it_is_not_a_disk_failure(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Deleting a topic renames its directory under a cleaner pass in progress: the
    pass stops, and the log directory stays online."""
    from moldau.protocol.errors import KafkaError
    from moldau.storage.log_manager import LogManager

    manager = LogManager([tmp_path], clock, 1)
    config = LogConfig(compact=True, delete=False, segment_bytes=600)
    log = manager.get_or_create_log(TP, config)
    for i in range(40):
        write(log, clock, b"k%d" % (i % 4), b"v%d" % i)
    steps = clean(log, 0, log.log_end_offset, clock.milliseconds())
    next(steps)
    manager.delete_log(TP)
    with pytest.raises(KafkaError):
        run(steps)
    assert manager.failure_channel.offline_dirs == []
    assert manager.live_log_dirs == [tmp_path.resolve()]


def test_a_follower_copies_batches_the_cleaner_left_with_fewer_records(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A reassignment target, or a follower far behind, copies compacted segments:
    batches with fewer records than their offsets span are appended as they are."""
    leader = compacted_log(tmp_path / "leader", clock)
    for i in range(30):
        batch = build_batch(
            [(b"k%d" % ((i + j) % 4), b"v%d-%d" % (i, j)) for j in range(3)],
            timestamp=clock.milliseconds(),
        )
        leader.append_as_leader(memoryview(batch), 0)
    assert run(clean(leader, 0, leader.log_end_offset, clock.milliseconds())) is not None
    follower = compacted_log(tmp_path / "follower", clock)
    for batch in leader.read_batches(0, leader.log_end_offset):
        follower.append_as_follower(memoryview(batch))
    assert follower.log_end_offset == leader.log_end_offset
    assert contents(follower) == contents(leader)


def test_a_producers_last_batch_keeps_its_header_when_every_record_in_it_is_superseded(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A replica that rebuilds producer state from the compacted log (here a
    reassignment target copying it) knows the producer's last sequence as the
    leader does: once it leads, it takes the producer's next batch (it answered
    OUT_OF_ORDER_SEQUENCE_NUMBER when the cleaner had dropped that last batch) and
    acknowledges a retry of the last one without writing it twice."""
    pid = 42

    def idempotent(records: list[tuple[bytes, bytes]], seq: int) -> memoryview:
        batch = build_batch(
            records, timestamp=clock.milliseconds(), compression=Compression.GZIP,
            producer_id=pid, producer_epoch=3, base_sequence=seq,
        )  # fmt: skip
        return memoryview(batch)

    leader = compacted_log(tmp_path / "leader", clock)
    leader.append_as_leader(idempotent([(b"a", b"1")], 0), 0)
    last = idempotent([(b"b", b"1"), (b"c", b"1")], 1)  # offsets 1-2, sequences 1-2
    leader.append_as_leader(last, 0)
    write(leader, clock, b"b", b"2")  # another client supersedes both of its records
    write(leader, clock, b"c", b"2")
    for i in range(30):
        write(leader, clock, b"filler-%d" % i, b"x" * 10)
    assert run(clean(leader, 0, leader.log_end_offset, clock.milliseconds())) is not None
    assert [(o, k, v) for o, k, v in contents(leader) if k in (b"a", b"b", b"c")] == [
        (0, b"a", b"1"), (3, b"b", b"2"), (4, b"c", b"2"),
    ]  # fmt: skip
    # The batch stays as its header alone, written as Kafka writes an empty batch.
    kept = BatchHeader.parse(leader.read_batches(1, 2)[0])
    assert (kept.base_offset, kept.last_offset_delta, kept.records_count) == (1, 1, 0)
    assert (kept.producer_id, kept.producer_epoch, kept.base_sequence) == (pid, 3, 1)
    assert (kept.compression, kept.base_timestamp) == (Compression.NONE, -1)
    assert kept.max_timestamp == BatchHeader.parse(last).max_timestamp

    target = compacted_log(tmp_path / "target", clock)
    for batch in leader.read_batches(0, leader.log_end_offset):
        target.append_as_follower(memoryview(batch))
    end = target.log_end_offset
    assert target.append_as_leader(idempotent([(b"d", b"1")], 3), 1).first_offset == end
    retry = target.append_as_leader(last, 1)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (1, 2)
    assert target.log_end_offset == end + 1


def segments_below_active(log: Log) -> list[object]:
    return list(log.segments[:-1])


def test_segments_the_cleaner_shrank_are_merged_and_unchanged_ones_left_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Kafka's groupSegmentsBySize: adjacent segments are cleaned into one while they
    add up to at most segment.bytes, so a compacted log does not keep every segment
    it ever rolled (each with its open files). A segment from which nothing is
    removed is not rewritten again."""
    log = compacted_log(tmp_path, clock)
    for i in range(120):
        write(log, clock, b"k%d" % (i % 5), b"v%d" % i)
    rolled = len(segments_below_active(log))
    assert rolled > 8
    # Groups are made from the segments' sizes before cleaning (as Kafka's): the
    # first pass shrinks full segments, the next merges what it shrank.
    first = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert first is not None and len(segments_below_active(log)) == rolled
    for i in range(120, 130):
        write(log, clock, b"k%d" % (i % 5), b"v%d" % i)
    second = run(clean(log, first.first_dirty_offset, log.log_end_offset, clock.milliseconds()))
    assert second is not None
    merged = segments_below_active(log)
    assert len(merged) <= 3
    assert all(s.size <= log.config.segment_bytes for s in merged)  # type: ignore[attr-defined]
    latest = {k: v for _, k, v in contents(log)}
    assert latest == {b"k%d" % k: b"v%d" % (125 + k) for k in range(5)}
    offsets = [o for o, _, _ in contents(log)]
    assert offsets == sorted(set(offsets))
    # Again, with nothing left to remove: what shrank last time is merged, then no
    # segment is swapped any more.
    again = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert again is not None and again.records_removed == 0
    merged = segments_below_active(log)
    again = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert again is not None and again.segments == 0 and again.records_removed == 0
    assert segments_below_active(log) == merged


def test_an_interrupted_swap_of_a_group_is_completed_on_open(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the cleaned segment of a group became .swap and one of the
    group's segments was renamed .deleted: the next open removes the others, which
    lie in the swap's offset range, so no offset is there twice."""
    from moldau.protocol.errors import KafkaStorageError
    from moldau.storage.segment import LogSegment

    def key(i: int) -> bytes:
        # A key written once in every four records: each segment keeps some records.
        return b"once-%d" % i if i % 4 == 0 else b"hot-%d" % (i % 3)

    log = compacted_log(tmp_path, clock)
    for i in range(130):
        write(log, clock, key(i), b"v%d" % i)
    first = run(clean(log, 0, log.log_end_offset, clock.milliseconds()))
    assert first is not None  # shrank the segments: the next pass merges them
    for i in range(130, 140):
        write(log, clock, key(i), b"v%d" % i)
    latest = {key(i): b"v%d" % i for i in range(140)}
    before = contents(log)
    real = LogSegment.mark_deleted
    renamed: list[LogSegment] = []

    def crash_on_the_second(segment: LogSegment) -> None:
        if renamed:
            raise OSError(5, "Input/output error")
        renamed.append(segment)
        real(segment)

    monkeypatch.setattr(LogSegment, "mark_deleted", crash_on_the_second)
    with pytest.raises(KafkaStorageError):
        run(clean(log, first.first_dirty_offset, log.log_end_offset, clock.milliseconds()))
    monkeypatch.undo()
    assert list(tmp_path.glob("*.log.swap"))
    log.close_handlers()
    reopened = Log.open(log.dir, TP, log.config, clock, had_clean_shutdown=False)
    after = contents(reopened)
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(set(offsets)), "an offset is there twice"
    assert set(after) <= set(before)
    assert {k: v for _, k, v in after} == latest
    assert not list(tmp_path.glob("*.swap"))
    reopened.close_handlers()


def test_repeated_passes_hold_a_bounded_number_of_files_open(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A busy compacted topic cleaned often: the segments each pass retires keep
    their files open until file.delete.delay.ms (60 s), as on Kafka. One pass
    retired every segment below the active one (rewritten one for one, never
    merged), and a broker ran out of descriptors within a minute; now a pass
    retires about one merged segment."""
    log = compacted_log(tmp_path, clock, file_delete_delay_ms=60_000)
    first_dirty = 0
    for round_ in range(40):
        for i in range(12):
            write(log, clock, b"k%d" % (i % 5), b"r%d-%d" % (round_, i))
        result = run(clean(log, first_dirty, log.log_end_offset, clock.milliseconds()))
        if result is not None:
            first_dirty = result.first_dirty_offset
    open_files = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(tmp_path)):
            open_files += 1
    assert open_files < 400, f"{open_files} files of the log held open"  # was 1,449
    log.close()


def test_a_segment_deleted_under_a_cleaner_pass_is_never_read_through_a_reused_descriptor(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Retention deletes the first segment (its files closed at once with
    file.delete.delay.ms 0) while a pass is stopped at one of its yields, and the
    freed descriptor numbers go to pipes, as they would to new connections or
    segments: the pass must not read the segment through its old number (a pread of
    a pipe is an OSError, which takes the log directory offline; a file opened since
    would hand it another file's bytes). It gives up (the log changed) and the log
    is intact."""
    log = compacted_log(tmp_path, clock)
    for i in range(450):  # more than one step of batches: the pass yields
        write(log, clock, b"k%d" % (i % 4), b"v%d" % i)
    steps = clean(log, 0, log.log_end_offset, clock.milliseconds())
    next(steps)
    first, second = log.segments[0], log.segments[1]
    log.maybe_increment_log_start_offset(second.base_offset)
    assert log.delete_old_segments(log.log_end_offset) == 1
    log.delete_expired_files(clock.milliseconds())
    assert first.closed
    pipes = [os.pipe() for _ in range(8)]
    try:
        assert run(steps) is None
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
    assert contents(log)[0][0] == second.base_offset
    assert len(contents(log)) == 450 - second.base_offset
    assert not list(tmp_path.glob("*.cleaned"))  # the half-written segment went too


@pytest.mark.parametrize(
    ("codec", "topic_levels", "level"),
    [
        (Compression.LZ4, {}, 9),  # Kafka's default: lz4's fast mode, not the library's
        (Compression.GZIP, {"compression.gzip.level": 1}, 1),
        (Compression.ZSTD, {"compression.zstd.level": 10}, 10),
    ],
    ids=["lz4-default", "gzip-1", "zstd-10"],
)
def test_the_cleaner_rebuilds_a_batch_in_its_codec_at_the_topics_level_for_it(
    tmp_path: Path, clock: FakeClock, codec: Compression, topic_levels: dict[str, int], level: int
) -> None:
    """A batch the cleaner removes records from is compressed again in its own codec
    (as Kafka's MemoryRecords.filterTo), at the topic's compression.<codec>.level,
    whose defaults are Kafka's (lz4 9, gzip -1, zstd 3), not the library's."""
    from moldau.config.broker import BrokerConfig
    from moldau.config.topic import log_config, resolve
    from moldau.protocol.records import HEADER_SIZE, compress, decompress

    overrides = {"cleanup.policy": "compact", **{k: str(v) for k, v in topic_levels.items()}}
    config = log_config(resolve(overrides, BrokerConfig({})))
    log = compacted_log(tmp_path, clock, segment_bytes=1 << 20, codec_levels=config.codec_levels)
    text = b" the same words again and again, for the codec to find" * 4
    for round_ in range(2):
        keys = range(40) if round_ == 0 else range(0, 40, 2)  # half are superseded
        records = [(b"k%d" % k, b"%d:%d %s" % (round_, k, text)) for k in keys]
        log.append_as_leader(
            memoryview(build_batch(records, timestamp=clock.milliseconds(), compression=codec)), 0
        )
    log.roll()
    assert run(clean(log, 0, log.log_end_offset, clock.milliseconds())) is not None
    first = next(iter(split_batches(bytes(log.read_batches(0, 40)[0]))))
    header = BatchHeader.parse(first)
    assert header.compression == codec and header.records_count == 20
    payload = bytes(first[HEADER_SIZE:])
    assert payload == compress(codec, decompress(codec, payload), level)
