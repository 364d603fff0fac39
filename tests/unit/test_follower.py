"""A follower's log against its leader's, without a network: fetched batches are
appended as the leader wrote them, and a log that diverged after a double failover
is cut back to where the two agree, by leader epoch (KIP-101 / KIP-279 through
Fetch's last_fetched_epoch and diverging_epoch), not to the high watermark."""

from __future__ import annotations

from pathlib import Path

from moldau.clock import FakeClock
from moldau.protocol.control import LeaderAndIsrPartitionState
from moldau.protocol.records import build_batch, iter_records, split_batches
from moldau.replication.partition import FetchIsolation, Partition
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords

TP = TopicPartition("t", 0)


def replica(tmp: Path, broker: int, clock: FakeClock) -> Partition:
    return Partition(TP, broker, LogManager([tmp / str(broker)], clock, broker),
                     lambda _: LogConfig(), clock)  # fmt: skip


def lead(p: Partition, epoch: int, isr: tuple[int, ...] = (1, 2)) -> None:
    p.make_leader(
        LeaderAndIsrPartitionState("t", 0, 1, p.local_broker_id, epoch, isr, epoch, (1, 2)),
        None,
        None,
    )


def follow(p: Partition, leader: int, epoch: int) -> None:
    p.make_follower(
        LeaderAndIsrPartitionState("t", 0, 1, leader, epoch, (1, 2), epoch, (1, 2)), None, None
    )


def write(p: Partition, *values: bytes) -> None:
    for v in values:
        p.append_records_to_leader(memoryview(build_batch([(None, v)])), 1)


def values(p: Partition) -> list[tuple[int, bytes | None]]:
    assert p.log is not None
    data = p.log.read(0, 1 << 20, p.log.log_end_offset, True).records
    raw = data.read() if isinstance(data, FileRecords) else data
    return [(r.offset, r.value) for b in split_batches(raw) for r in iter_records(b)]


def sync(follower: Partition, leader: Partition, rounds: int = 5) -> None:
    """What the follower's fetcher does, fetch by fetch."""
    for _ in range(rounds):
        lg = follower.log
        assert lg is not None
        info = leader.read_records(
            lg.log_end_offset, leader.leader_epoch, 1 << 20, FetchIsolation.LOG_END,
            fetch_only_from_leader=True, min_one_message=True,
            last_fetched_epoch=lg.leader_epoch_cache.latest_epoch,
        )  # fmt: skip
        if info.diverging_epoch is not None:
            follower.truncate_to_diverging_epoch(*info.diverging_epoch)
            continue
        records = info.data.records
        raw = records.read() if isinstance(records, FileRecords) else records
        follower.append_records_to_follower(raw, info.high_watermark, info.log_start_offset)
        leader.update_follower_fetch_state(follower.local_broker_id, lg.log_end_offset, 0, 0)


def test_a_follower_copies_the_leaders_batches_with_their_offsets_and_epochs(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    a, b = replica(tmp_path, 1, clock), replica(tmp_path, 2, clock)
    lead(a, 0)
    follow(b, 1, 0)
    write(a, b"m0", b"m1", b"m2")
    sync(b, a)
    assert values(b) == values(a) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    assert b.log is not None and b.log.leader_epoch_cache.entries == [(0, 0)]
    # The leader's HW moved once the follower had everything; the follower learns
    # it with its next fetch.
    assert a.high_watermark == 3
    sync(b, a, 1)
    assert b.high_watermark == 3


def test_a_double_failover_does_not_leave_the_logs_diverged(tmp_path: Path) -> None:
    """A leads (epoch 0) and appends m2, which B never fetches; A dies. B leads in
    epoch 1 and appends n2 at offset 2. A comes back as follower: by its high
    watermark (2) alone it would keep m2 at offset 2, where B has n2. With epochs it
    learns that epoch 0 ended at 2 on B, cuts m2, and copies n2."""
    clock = FakeClock()
    a, b = replica(tmp_path, 1, clock), replica(tmp_path, 2, clock)
    lead(a, 0)
    follow(b, 1, 0)
    write(a, b"m0", b"m1")
    sync(b, a)
    write(a, b"m2")  # never replicated: A dies now
    lead(b, 1, isr=(2,))
    write(b, b"n2", b"n3")
    follow(a, 2, 1)
    assert a.high_watermark == 2
    sync(a, b)
    assert values(a) == values(b) == [(0, b"m0"), (1, b"m1"), (2, b"n2"), (3, b"n3")]
    assert a.log is not None and a.log.leader_epoch_cache.entries == [(0, 0), (1, 2)]


def test_a_follower_behind_the_leaders_log_start_starts_again_from_it(tmp_path: Path) -> None:
    clock = FakeClock()
    b = replica(tmp_path, 2, clock)
    follow(b, 1, 0)
    assert b.log is not None
    b.restart_follower_log_at(40)
    assert (b.log.log_start_offset, b.log.log_end_offset, b.high_watermark) == (40, 40, 40)


def test_the_end_of_a_leader_epoch_is_found_as_kafka_finds_it(tmp_path: Path) -> None:
    from moldau.storage.leader_epoch import LeaderEpochCache

    cache = LeaderEpochCache(tmp_path)
    for epoch, start in ((0, 0), (2, 10), (5, 20)):
        cache.assign(epoch, start)
    ends = {e: cache.end_offset_for(e, 30) for e in (-1, 0, 1, 2, 3, 5, 6)}
    assert ends == {
        -1: (-1, -1),  # no epoch asked
        0: (0, 10),
        1: (0, 10),  # the largest epoch at or below 1, and where the next starts
        2: (2, 20),
        3: (2, 20),
        5: (5, 30),  # the latest ends at the log end
        6: (-1, -1),  # newer than this log knows
    }
    cache.truncate_from_start(12)  # retention removed epoch 0's records
    assert cache.end_offset_for(1, 30) == (1, 12)  # older than all: ends where they begin


def test_an_epoch_a_leader_started_but_never_wrote_does_not_stall_its_follower(
    tmp_path: Path,
) -> None:
    """A leads (epoch 0) and writes; B leads in epoch 1 and writes nothing; A leads
    again in epoch 2. B's cache names epoch 1 at its log end, which A never had: the
    fetch's diverging answer must clear it, or B would ask about it for ever."""
    clock = FakeClock()
    a, b = replica(tmp_path, 1, clock), replica(tmp_path, 2, clock)
    lead(a, 0)
    follow(b, 1, 0)
    write(a, b"m0", b"m1")
    sync(b, a)
    lead(b, 1)
    follow(a, 2, 1)
    lead(a, 2)
    follow(b, 1, 2)
    write(a, b"m2")
    sync(b, a)
    assert values(b) == values(a) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    assert b.log is not None and b.log.leader_epoch_cache.entries == [(0, 0), (2, 2)]


def test_partitions_spread_over_a_leaders_fetchers_as_kafka_spreads_them() -> None:
    from moldau.replication.fetcher import fetcher_id

    # Kafka: abs(31 * topic.hashCode() + partition) % num.replica.fetchers in Java
    # ints: "hello".hashCode() is 99162322, and 31 times it overflows to -1220935314.
    assert [fetcher_id(TopicPartition("hello", p), 3) for p in range(4)] == [0, 2, 1, 0]
    assert fetcher_id(TopicPartition("t", 7), 1) == 0
    assert {fetcher_id(TopicPartition("t", p), 4) for p in range(8)} == {0, 1, 2, 3}
