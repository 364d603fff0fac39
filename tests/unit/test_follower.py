"""A follower's log against its leader's, without a network: fetched batches are
appended as the leader wrote them, and a log that diverged after a double failover
is cut back to where the two agree, by leader epoch (KIP-101 / KIP-279 through
Fetch's last_fetched_epoch and diverging_epoch), not to the high watermark.

The ReplicaFetcher's own steps (a log outside the leader's, a log without epochs,
the checkpoint after a cut) run it against `LeaderClient`, a FetchClient that
answers from a leader Partition of the same process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from moldau.clock import FakeClock
from moldau.protocol.control import LeaderAndIsrPartitionState
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.protocol.records import build_batch, iter_records, split_batches
from moldau.replication.fetcher import (
    FetcherConfig,
    FollowerFetchPartition,
    FollowerFetchResult,
    FollowerSetup,
    ReplicaFetcher,
)
from moldau.replication.partition import FetchIsolation, Partition
from moldau.storage.checkpoint import OffsetCheckpointFile
from moldau.storage.leader_epoch import CHECKPOINT_NAME
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager
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
    data = p.log.read(p.log.log_start_offset, 1 << 20, p.log.log_end_offset, True).records
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


class LeaderClient:
    """A FetchClient answering from leader Partitions of this process, as the
    leader's Fetch and ListOffsets handlers do (see `sync`). Once `done()` holds, or
    after `rounds` fetches, it answers no more: `finished` is set and the fetch
    waits until the test stops the fetcher."""

    def __init__(
        self, leaders: dict[int, Partition], done: Callable[[], bool], rounds: int = 20
    ) -> None:
        self.leaders = leaders
        self.done = done
        self.rounds = rounds
        self.finished = asyncio.Event()
        self.fetches: list[list[FollowerFetchPartition]] = []
        # Called as each fetch and each ListOffsets arrives (the test's hooks).
        self.on_fetch: Callable[[], None] = lambda: None
        self.on_list_offset: Callable[[], None] = lambda: None

    def stop(self) -> None:
        self.finished.set()

    async def fetch(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        config: FetcherConfig,
        partitions: Sequence[FollowerFetchPartition],
    ) -> list[FollowerFetchResult]:
        if self.done() or len(self.fetches) >= self.rounds:
            self.stop()
            await asyncio.Future()  # never answers
        self.on_fetch()
        self.fetches.append(list(partitions))
        leader = self.leaders[leader_id]
        assert leader.log is not None
        results = []
        for p in partitions:
            try:
                info = leader.read_records(
                    p.fetch_offset, p.current_leader_epoch, p.max_bytes, FetchIsolation.LOG_END,
                    fetch_only_from_leader=True, min_one_message=True,
                    last_fetched_epoch=p.last_fetched_epoch,
                )  # fmt: skip
            except KafkaError as e:
                # As ReplicaManager.read_from_local_log: the error with the offsets.
                results.append(
                    FollowerFetchResult(
                        p.tp, e.code, leader.high_watermark, leader.log.log_start_offset
                    )
                )
                continue
            if info.diverging_epoch is None:
                leader.update_follower_fetch_state(replica_id, p.fetch_offset, 0, 0)
            records = info.data.records
            raw = records.read() if isinstance(records, FileRecords) else records
            results.append(
                FollowerFetchResult(
                    p.tp, ErrorCode.none, info.high_watermark, info.log_start_offset,
                    info.diverging_epoch, raw,
                )
            )  # fmt: skip
        return results

    async def list_offset(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        tp: TopicPartition,
        current_leader_epoch: int,
        timestamp: int,
    ) -> int:
        self.on_list_offset()
        found = self.leaders[leader_id].fetch_offset_for_timestamp(
            timestamp, FetchIsolation.LOG_END, current_leader_epoch, fetch_only_from_leader=True
        )
        assert found is not None
        return found[1]


def fetcher_of(follower: Partition, client: LeaderClient) -> ReplicaFetcher:
    setup = FollowerSetup(
        follower.local_broker_id, client, {TP: follower}.get, FetcherConfig(backoff_ms=0),
        follower.clock, follower.log_manager,
    )  # fmt: skip
    fetcher = ReplicaFetcher(follower.leader_id, 0, setup)
    fetcher.add(TP, follower.leader_epoch)
    return fetcher


def run(fetcher: ReplicaFetcher, client: LeaderClient) -> None:
    """Run the fetcher until its client has answered what it will."""

    async def main() -> None:
        task = asyncio.create_task(fetcher.run())
        finished = asyncio.create_task(client.finished.wait())
        await asyncio.wait({task, finished}, return_when=asyncio.FIRST_COMPLETED)
        finished.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # raises what the fetcher died of, if it did

    asyncio.run(main())


def restart_without_epochs(p: Partition, leader: int, epoch: int) -> Partition:
    """The broker of `p` stops cleanly and starts again with an unreadable leader
    epoch checkpoint (its log then knows no epoch), to follow `leader` in `epoch`."""
    assert p.log is not None
    hw, log_dir = p.high_watermark, p.log.log_dir
    p.log_manager.shutdown()
    (p.log.dir / CHECKPOINT_NAME).write_text("not a checkpoint")
    manager = LogManager([log_dir], p.clock, p.local_broker_id)
    manager.startup(lambda _: LogConfig(), "cluster")
    again = Partition(TP, p.local_broker_id, manager, lambda _: LogConfig(), p.clock)
    state = LeaderAndIsrPartitionState("t", 0, 1, leader, epoch, (1, 2, 3), epoch, (1, 2, 3))
    again.make_follower(state, None, hw)
    assert again.log is not None and again.log.leader_epoch_cache.entries == []
    return again


def after_an_unclean_election(tmp_path: Path) -> tuple[Partition, Partition]:
    """A leads; B has m0-m4 (HW 5), C only m0-m2. C is elected uncleanly (epoch 1),
    and B starts again with a log that knows no epochs (an unreadable checkpoint),
    following C. Returns (B, C)."""
    clock = FakeClock()
    a, b, c = (replica(tmp_path, i, clock) for i in (1, 2, 3))
    lead(a, 0)
    follow(b, 1, 0)
    follow(c, 1, 0)
    write(a, b"m0", b"m1", b"m2")
    sync(c, a)
    write(a, b"m3", b"m4")
    sync(b, a)
    assert b.high_watermark == 5
    lead(c, 1, isr=(3,))
    return restart_without_epochs(b, 3, 1), c


def test_a_follower_whose_log_ends_past_an_unclean_leaders_cuts_it_there(tmp_path: Path) -> None:
    """B has m0-m4 and its HW is 5; C, which has only m0-m2, is elected uncleanly.
    B's log knows no epochs (an unreadable checkpoint), so its fetch from 5 is
    OFFSET_OUT_OF_RANGE: cutting to its own HW (5) would change nothing, and B would
    ask for ever. It asks C for its log end (3) and cuts there, then copies what C
    appends."""
    b, c = after_an_unclean_election(tmp_path)
    client = LeaderClient({3: c}, lambda: values(b) == values(c))
    run(fetcher_of(b, client), client)
    assert values(b) == values(c) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    write(c, b"n3")
    client = LeaderClient({3: c}, lambda: values(b) == values(c))
    run(fetcher_of(b, client), client)
    assert values(b) == [(0, b"m0"), (1, b"m1"), (2, b"m2"), (3, b"n3")]


def test_a_follower_behind_the_leaders_log_start_starts_again_from_it(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = replica(tmp_path, 1, clock), replica(tmp_path, 2, clock)
    lead(a, 0)
    write(a, *(b"m%d" % i for i in range(10)))
    assert a.log is not None
    a.log.maybe_increment_log_start_offset(6)  # retention, or DeleteRecords
    follow(b, 1, 0)
    client = LeaderClient({1: a}, lambda: values(b) == values(a))
    run(fetcher_of(b, client), client)
    assert b.log is not None
    assert b.log.log_start_offset == 6
    assert values(b) == values(a) == [(i, b"m%d" % i) for i in range(6, 10)]


def test_a_follower_without_leader_epochs_cuts_its_log_to_its_high_watermark_first(
    tmp_path: Path,
) -> None:
    """B has m0-m4 but knows only m0-m2 committed (HW 3); A dies and C, with m0-m2,
    leads and appends n3-n5. B starts again with an unreadable epoch checkpoint: it
    fetches without an epoch, so C cannot tell it that m3 and m4 are not C's.
    Fetching from its log end (5) would put n5 after them: B cuts to its HW first,
    as Kafka does, and copies n3-n5."""
    clock = FakeClock()
    a, b, c = (replica(tmp_path, i, clock) for i in (1, 2, 3))
    lead(a, 0)
    follow(b, 1, 0)
    follow(c, 1, 0)
    write(a, b"m0", b"m1", b"m2")
    sync(b, a)
    sync(c, a)
    write(a, b"m3", b"m4")
    sync(b, a, rounds=1)
    assert b.log is not None
    assert (b.log.log_end_offset, b.high_watermark) == (5, 3)
    lead(c, 1, isr=(2, 3))
    write(c, b"n3", b"n4", b"n5")
    b = restart_without_epochs(b, 3, 1)
    client = LeaderClient({3: c}, lambda: values(b) == values(c))
    run(fetcher_of(b, client), client)
    assert values(b) == values(c)
    assert values(b)[3:] == [(3, b"n3"), (4, b"n4"), (5, b"n5")]


def recovery_point_on_disk(p: Partition) -> int:
    assert p.log is not None
    return OffsetCheckpointFile(p.log.log_dir / RECOVERY_POINT_CHECKPOINT).read()[TP]


def test_a_cut_log_checkpoints_its_recovery_point_before_it_fetches_again(tmp_path: Path) -> None:
    """A flushed m0-m2 (recovery point 3, checkpointed) as leader; B led meanwhile
    and wrote n2, n3. A's fetch learns that its log diverges at 2 and cuts m2: the
    checkpoint must say 2 before A appends n2 there, or a crash would skip
    recovering the unflushed n2 (it lies below the recovery point on disk)."""
    clock = FakeClock()
    a, b = replica(tmp_path, 1, clock), replica(tmp_path, 2, clock)
    lead(a, 0)
    follow(b, 1, 0)
    write(a, b"m0", b"m1")
    sync(b, a)
    write(a, b"m2")
    assert a.log is not None
    a.log.flush()
    a.log_manager.checkpoint()
    lead(b, 1, isr=(2,))
    write(b, b"n2", b"n3")
    follow(a, 2, 1)
    client = LeaderClient({2: b}, lambda: values(a) == values(b))
    on_disk: list[int] = []
    client.on_fetch = lambda: on_disk.append(recovery_point_on_disk(a))
    run(fetcher_of(a, client), client)
    assert values(a) == [(0, b"m0"), (1, b"m1"), (2, b"n2"), (3, b"n3")]
    # The first fetch learnt of the divergence; the second brought n2 and n3.
    assert on_disk[:2] == [3, 2]


def test_an_out_of_range_answer_is_dropped_if_the_follower_became_leader_meanwhile(
    tmp_path: Path,
) -> None:
    """While B asks C for its log end, a LeaderAndIsr makes B the leader: C's answer
    must not cut B's log, now the partition's reference."""
    b, c = after_an_unclean_election(tmp_path)
    client = LeaderClient({3: c}, lambda: False)
    fetcher = fetcher_of(b, client)

    def elected() -> None:
        lead(b, 2, isr=(2,))
        fetcher.remove(TP)
        client.stop()

    client.on_list_offset = elected
    run(fetcher, client)
    assert b.is_leader
    assert values(b) == [(i, b"m%d" % i) for i in range(5)]


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
