"""Transactions through a partition and the replica manager: the last stable offset
(what read_committed consumers see), aborted lists on read_committed reads, markers
written by the coordinator (fencing, acks=all, not-leader), waiting read_committed
fetches answered when the LSO moves; and the cleaner never lets an aborted value
win a key."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.control import (
    AlterPartitionItem,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
)
from moldau.protocol.errors import ErrorCode, NotLeaderOrFollowerError
from moldau.protocol.produce import ProducePartitionResponse
from moldau.protocol.records import (
    BatchHeader,
    ControlRecordType,
    build_batch,
    iter_records,
    read_end_txn_marker,
    split_batches,
)
from moldau.replication.partition import LATEST_TIMESTAMP, FetchIsolation, Partition
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import (
    FetchParams,
    FetchPartitionRead,
    ReplicaManager,
    TxnMarkerAppend,
)
from moldau.storage.cleaner import CleanResult, clean
from moldau.storage.log import FetchDataInfo, Log
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.segment import FileRecords
from moldau.storage.txn_index import AbortedTxn

TP = TopicPartition("t", 0)
LEADER = 1
NOW = FakeClock().milliseconds()  # records of the clock's time: no segment rolls by age


class NoController:
    def submit(
        self, item: AlterPartitionItem, on_result: object
    ) -> None:  # ISR changes are not under test
        pass


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def txn_batch(pid: int, seq: int, n: int = 2, key: bytes = b"k") -> memoryview:
    return memoryview(
        build_batch(
            [(key, b"txn%d" % i) for i in range(n)],
            timestamp=NOW,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
    )


def plain(key: bytes = b"k", value: bytes = b"v") -> memoryview:
    return memoryview(build_batch([(key, value)], timestamp=NOW))


def offsets_of(data: FetchDataInfo) -> list[int]:
    raw = data.records.read() if isinstance(data.records, FileRecords) else data.records
    return [r.offset for b in split_batches(raw) for r in iter_records(b)]


def leader_of_two(tmp_path: Path, clock: FakeClock) -> Partition:
    p = Partition(
        TP, LEADER, LogManager([tmp_path], clock, LEADER), lambda _: LogConfig(), clock,
        10_000, NoController(),
    )  # fmt: skip
    p.make_leader(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, (1, 2), 0, (1, 2), is_new=True),
        None,
        None,
    )
    return p


def latest(p: Partition) -> int:
    """ListOffsets LATEST for a read_committed consumer."""
    found = p.fetch_offset_for_timestamp(LATEST_TIMESTAMP, FetchIsolation.TXN_COMMITTED, -1, True)
    assert found is not None
    return found[1]


def test_read_committed_stops_at_the_lso_and_gets_the_aborted_list(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = leader_of_two(tmp_path, clock)
    p.append_records_to_leader(plain(), -1)  # 0
    p.append_records_to_leader(txn_batch(7, 0), -1)  # 1-2
    p.append_records_to_leader(plain(), -1)  # 3
    p.update_follower_fetch_state(2, 4, 0, clock.monotonic_ms())
    assert (p.high_watermark, p.last_stable_offset) == (4, 1)

    def read(isolation: FetchIsolation) -> tuple[list[int], list[AbortedTxn] | None, int]:
        info = p.read_records(0, -1, 1 << 20, isolation, True, True)
        return offsets_of(info.data), info.aborted_transactions, info.last_stable_offset

    assert read(FetchIsolation.TXN_COMMITTED) == ([0], [], 1)
    assert read(FetchIsolation.HIGH_WATERMARK) == ([0, 1, 2, 3], None, 1)
    assert latest(p) == 1

    info = p.append_end_txn_marker(7, 0, 0, commit=False)
    assert info.first_offset == 4
    # Decided, but the follower does not have the marker yet: still unstable.
    p.update_follower_fetch_state(2, 4, 0, clock.monotonic_ms())
    assert p.last_stable_offset == 1
    p.update_follower_fetch_state(2, 5, 0, clock.monotonic_ms())
    assert (p.high_watermark, p.last_stable_offset) == (5, 5)
    assert read(FetchIsolation.TXN_COMMITTED) == ([0, 1, 2, 3, 4], [AbortedTxn(7, 1, 4, 5)], 5)
    assert latest(p) == 5


def test_a_follower_serves_the_same_lso_and_aborted_list(tmp_path: Path, clock: FakeClock) -> None:
    leader = leader_of_two(tmp_path / "1", clock)
    leader.append_records_to_leader(txn_batch(7, 0), -1)
    leader.append_end_txn_marker(7, 0, 0, commit=False)
    leader.append_records_to_leader(txn_batch(8, 0), -1)  # 3-4, open
    follower = Partition(
        TP, 2, LogManager([tmp_path / "2"], clock, 2), lambda _: LogConfig(), clock
    )
    follower.make_follower(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, (1, 2), 0, (1, 2), is_new=True),
        None,
        None,
    )
    assert leader.log is not None
    for raw in leader.log.read_batches(0, leader.log.log_end_offset):
        follower.append_records_to_follower(raw, 5, 0)
    assert (follower.high_watermark, follower.last_stable_offset) == (5, 3)
    info = follower.read_records(0, -1, 1 << 20, FetchIsolation.TXN_COMMITTED, False, True)
    assert info.aborted_transactions == [AbortedTxn(7, 0, 2, 3)]
    assert offsets_of(info.data) == [0, 1, 2]


def test_only_a_leader_writes_markers(tmp_path: Path, clock: FakeClock) -> None:
    p = Partition(TP, 2, LogManager([tmp_path], clock, 2), lambda _: LogConfig(), clock)
    p.make_follower(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, (1, 2), 0, (1, 2), is_new=True),
        None,
        None,
    )
    with pytest.raises(NotLeaderOrFollowerError):
        p.append_end_txn_marker(7, 0, 0, commit=True)


# -- the replica manager ---------------------------------------------------------------


def single_broker(tmp_path: Path, clock: FakeClock) -> ReplicaManager:
    logs = LogManager([tmp_path], clock, 1)
    logs.startup(lambda _: LogConfig(), "cluster")
    rm = ReplicaManager(1, logs, clock, ManualTimer(clock), lambda _: LogConfig())
    rm.startup()
    state = LeaderAndIsrPartitionState("t", 0, 1, 1, 0, (1,), 0, (1,), is_new=True)
    rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
    return rm


def test_markers_are_written_with_each_partitions_error(tmp_path: Path, clock: FakeClock) -> None:
    rm = single_broker(tmp_path, clock)
    rm.append_records(-1, 1000, {TP: txn_batch(7, 0)}, lambda _: None)
    answers: list[dict[TopicPartition, ErrorCode]] = []
    missing = TopicPartition("nope", 0)
    rm.append_end_txn_markers(
        1000, {TP: TxnMarkerAppend(7, 0, 3, False), missing: TxnMarkerAppend(7, 0, 3, False)},
        answers.append,
    )  # fmt: skip
    assert answers == [{TP: ErrorCode.none, missing: ErrorCode.unknown_topic_or_partition}]
    rm.append_end_txn_markers(1000, {TP: TxnMarkerAppend(7, 0, 2, True)}, answers.append)
    assert answers[-1] == {TP: ErrorCode.transaction_coordinator_fenced}
    rm.append_end_txn_markers(1000, {TP: TxnMarkerAppend(7, -1, 3, True)}, answers.append)
    assert answers[-1] == {TP: ErrorCode.invalid_producer_epoch}
    lg = rm.partitions[TP].log
    assert lg is not None
    [marker] = lg.read_batches(2, 3)
    assert read_end_txn_marker(marker) == (ControlRecordType.ABORT, 3)


def test_a_waiting_read_committed_fetch_answers_when_the_lso_moves(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    rm.append_records(-1, 1000, {TP: txn_batch(7, 0)}, lambda _: None)
    assert rm.last_stable_offset(TP) == 0
    answered: list[list[FetchPartitionRead]] = []
    params = FetchParams(-1, 10_000, 1, 1 << 20, FetchIsolation.TXN_COMMITTED)
    rm.fetch_messages(params, [FetchPartitionRead(TP, 0, -1, 1 << 20)], answered.append)
    assert answered == []  # nothing committed to read yet
    rm.append_end_txn_markers(1000, {TP: TxnMarkerAppend(7, 0, 0, True)}, lambda _: None)
    [[read]] = answered
    assert read.info is not None
    assert read.info.last_stable_offset == 3
    assert offsets_of(read.info.data) == [0, 1, 2]
    assert read.info.aborted_transactions == []


# -- the cleaner -----------------------------------------------------------------------


def run(steps: Generator[None, None, CleanResult | None]) -> CleanResult | None:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def test_a_committed_value_survives_an_aborted_overwrite(tmp_path: Path, clock: FakeClock) -> None:
    config = LogConfig(compact=True, delete=False, segment_bytes=400)
    log = Log.open(tmp_path, TP, config, clock, had_clean_shutdown=True)
    log.append_as_leader(plain(b"k", b"committed"), 0)  # 0
    log.append_as_leader(txn_batch(7, 0, n=1, key=b"k"), 0)  # 1: aborted below
    log.append_end_txn_marker(7, 0, 0, False, 0)  # 2
    for i in range(12):
        log.append_as_leader(plain(b"f%d" % (i % 3), b"filler"), 0)
    assert len(log.segments) > 2
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    stable = log.first_unstable_offset or log.log_end_offset
    result = run(clean(log, 0, stable, clock.milliseconds()))
    assert result is not None and result.records_removed > 0
    values: dict[bytes, list[bytes | None]] = {}
    kinds = []
    for raw in log.read_batches(0, log.log_end_offset):
        if BatchHeader.parse(raw).is_control:
            kinds.append(read_end_txn_marker(raw))
            continue
        for r in iter_records(raw):
            assert r.key is not None
            values.setdefault(r.key, []).append(r.value)
    assert values[b"k"] == [b"committed"]
    # The marker stays, and so does its transaction's index entry.
    assert kinds == [(ControlRecordType.ABORT, 0)]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(7, 1, 2, 3)]


def test_a_produce_with_verification_needs_the_guard_it_started(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    got: dict[TopicPartition, ProducePartitionResponse] = {}
    entries: dict[TopicPartition, memoryview | None] = {TP: txn_batch(7, 0)}
    rm.append_records(1, 1000, entries, got.update, verification_guards={})
    assert got[TP].error_code == ErrorCode.invalid_txn_state
    guards = rm.start_transaction_verification(entries)
    assert set(guards) == {TP}
    # (The coordinator confirmed the partition is in the transaction.)
    rm.append_records(1, 1000, entries, got.update, verification_guards=guards)
    assert (got[TP].error_code, got[TP].base_offset) == (ErrorCode.none, 0)
    # Plain batches need none.
    assert rm.start_transaction_verification({TP: plain()}) == {}
