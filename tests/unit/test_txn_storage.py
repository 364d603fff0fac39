"""Transactions in storage: markers, producer state (open and unreplicated
transactions, the first unstable offset, fencing), snapshots, the aborted-transaction
index (write, read, truncate, rebuild after a crash), across segments."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from moldau.protocol.records import (
    BatchHeader,
    ControlRecordType,
    build_batch,
    build_end_txn_marker,
    read_end_txn_marker,
    validate_replicated_batch,
)
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
    snapshot_name,
)
from moldau.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

TP = TopicPartition("t", 0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def open_log(path: Path, clock: FakeClock, clean: bool = True, **config: object) -> Log:
    return Log.open(path, TP, LogConfig(**config), clock, had_clean_shutdown=clean)  # type: ignore[arg-type]


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, ts: int = 0) -> memoryview:
    return memoryview(
        build_batch(
            [(b"k%d" % i, b"v%d" % i) for i in range(n)],
            timestamp=ts,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
    )


def plain_batch(pid: int, seq: int, epoch: int = 0) -> memoryview:
    return memoryview(
        build_batch([(b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    )


# -- markers ---------------------------------------------------------------------------


def test_an_end_txn_marker_is_a_transactional_control_batch_of_one_record() -> None:
    raw = build_end_txn_marker(7, 3, 12, commit=False, timestamp=55, partition_leader_epoch=4)
    h = validate_replicated_batch(memoryview(raw))
    assert (h.is_control, h.is_transactional) == (True, True)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, -1)
    assert (h.records_count, h.partition_leader_epoch, h.max_timestamp) == (1, 4, 55)
    assert read_end_txn_marker(raw) == (ControlRecordType.ABORT, 12)
    commit = build_end_txn_marker(7, 3, 12, commit=True, timestamp=55)
    assert read_end_txn_marker(commit) == (ControlRecordType.COMMIT, 12)


def test_a_batch_that_is_not_a_marker_is_refused() -> None:
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(build_batch([(b"k", b"v")]))
    raw = bytearray(build_end_txn_marker(7, 3, 12, commit=True, timestamp=0))
    # A control batch whose key names type 5 (not a marker).
    raw = bytearray(build_batch([(struct.pack(">hh", 0, 5), struct.pack(">hi", 0, 1))]))
    struct.pack_into(">h", raw, 21, 0x30)
    with pytest.raises(InvalidRecordError):
        read_end_txn_marker(bytes(raw))


# -- producer state --------------------------------------------------------------------


def header_of(batch: bytes | memoryview, base: int) -> BatchHeader:
    raw = bytearray(batch)
    struct.pack_into(">q", raw, 0, base)
    return BatchHeader.parse(raw)


def marker_header(pid: int, epoch: int, base: int, commit: bool) -> BatchHeader:
    return header_of(build_end_txn_marker(pid, epoch, 0, commit, 0), base)


def test_a_transaction_is_unstable_until_its_marker_is_below_the_high_watermark(
    tmp_path: Path,
) -> None:
    ps = ProducerStateManager(tmp_path)
    assert ps.first_unstable_offset() is None
    ps.update(header_of(txn_batch(1, 0), 10), 10, 11, 0)
    ps.update(header_of(txn_batch(1, 2), 12), 12, 13, 0)
    assert ps.producers[1].current_txn_first_offset == 10
    assert ps.first_unstable_offset() == 10
    assert ps.has_ongoing_transaction(1, 0) and not ps.has_ongoing_transaction(1, 1)
    done = ps.update(marker_header(1, 0, 14, commit=False), 14, 14, 0, (ControlRecordType.ABORT, 0))
    assert done == CompletedTxn(1, 10, 14, is_aborted=True)
    assert ps.producers[1].current_txn_first_offset == -1
    assert ps.last_stable_offset(done) == 15
    ps.complete_txn(done)
    # Decided, but its marker is not replicated yet.
    assert ps.first_unstable_offset() == 10
    ps.on_high_watermark_updated(14)
    assert ps.first_unstable_offset() == 10
    ps.on_high_watermark_updated(15)
    assert ps.first_unstable_offset() is None
    assert ps.ongoing_transactions() == {}


def test_the_lso_a_marker_leaves_is_the_oldest_other_open_transaction(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(header_of(txn_batch(1, 0), 0), 0, 1, 0)
    ps.update(header_of(txn_batch(2, 0), 2), 2, 3, 0)
    done = ps.update(marker_header(1, 0, 4, True), 4, 4, 0, (ControlRecordType.COMMIT, 0))
    assert done is not None and not done.is_aborted
    assert ps.last_stable_offset(done) == 2
    ps.complete_txn(done)
    ps.on_high_watermark_updated(100)
    assert ps.first_unstable_offset() == 2
    assert set(ps.ongoing_transactions()) == {2}


def test_a_marker_without_data_ends_nothing(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    assert ps.update(marker_header(1, 0, 0, True), 0, 0, 0, (ControlRecordType.COMMIT, 3)) is None
    assert ps.producers[1].coordinator_epoch == 3
    assert ps.first_unstable_offset() is None


def test_markers_of_an_older_epoch_or_coordinator_are_fenced(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(header_of(txn_batch(1, 0, epoch=2), 0), 0, 1, 0)
    ps.update(marker_header(1, 2, 2, True), 2, 2, 0, (ControlRecordType.COMMIT, 5))
    with pytest.raises(InvalidProducerEpochError):
        ps.check_marker(1, 1, 5)
    with pytest.raises(TransactionCoordinatorFencedError):
        ps.check_marker(1, 2, 4)
    ps.check_marker(1, 3, 5)  # a bumped epoch, the same coordinator: fine
    ps.check_marker(9, 0, 0)  # an unknown producer: fine


def test_a_plain_batch_during_an_open_transaction_is_invalid_txn_state(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    h = header_of(txn_batch(1, 0), 0)
    ps.check(h)
    ps.update(h, 0, 1, 0)
    with pytest.raises(InvalidTxnStateError):
        ps.check(header_of(plain_batch(1, 2), 2))
    # Even in a new epoch: the coordinator must end the transaction first.
    with pytest.raises(InvalidTxnStateError):
        ps.check(header_of(plain_batch(1, 0, epoch=1), 2))
    ps.check(header_of(txn_batch(1, 2), 2))


def test_expiry_keeps_a_producer_with_an_open_transaction(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(header_of(txn_batch(1, 0), 0), 0, 1, 0)
    ps.update(header_of(plain_batch(2, 0), 2), 2, 2, 0)
    assert ps.remove_expired_producers(10_000, 1000) == 1
    assert set(ps.producers) == {1}


def test_a_snapshot_keeps_open_transactions_and_coordinator_epochs(tmp_path: Path) -> None:
    ps = ProducerStateManager(tmp_path)
    ps.update(header_of(txn_batch(1, 0), 0), 0, 1, 7)
    ps.update(marker_header(2, 0, 2, True), 2, 2, 8, (ControlRecordType.COMMIT, 9))
    ps.take_snapshot()
    again = ProducerStateManager(tmp_path)
    again.load_latest_snapshot(100)
    assert again.map_end_offset == 3
    assert again.producers[1].current_txn_first_offset == 0
    assert again.producers[2].coordinator_epoch == 9
    assert again.producers[1].last_seq == 1
    assert again.first_unstable_offset() == 0
    # The open transaction can still be ended after the reload.
    done = again.update(marker_header(1, 0, 3, False), 3, 3, 0, (ControlRecordType.ABORT, 9))
    assert done == CompletedTxn(1, 0, 3, is_aborted=True)


def test_a_version_1_snapshot_still_loads(tmp_path: Path) -> None:
    body = struct.pack(">4shi", b"MPSS", 1, 1)
    body += struct.pack(">qhqB", 42, 3, 1000, 1)
    body += struct.pack(">iiqqq", 0, 4, 10, 14, 1000)
    body += struct.pack(">I", crc32c.crc32c(body))
    (tmp_path / snapshot_name(15)).write_bytes(body)
    ps = ProducerStateManager(tmp_path)
    ps.load_latest_snapshot(100)
    entry = ps.producers[42]
    assert (entry.epoch, entry.last_seq, entry.last_timestamp) == (3, 4, 1000)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, -1)
    assert ps.map_end_offset == 15


# -- the transaction index -------------------------------------------------------------


def test_the_txn_index_file_is_kafkas_format_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, exists=False)
    assert index.collect_aborted_txns(0, 100) == ([], False)
    assert not path.exists()
    txns = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(1, 12, 20, 21)]
    for t in txns:
        index.append(t)
    data = path.read_bytes()
    assert len(data) == 3 * ENTRY_SIZE == 102
    assert struct.unpack_from(">hqqqq", data, ENTRY_SIZE) == (0, 2, 3, 9, 10)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 0, 20, 21))  # must end after the last one
    # Overlapping [6, 12): the second (ends at 9) and the third (starts at 12: no).
    assert index.collect_aborted_txns(6, 12) == ([txns[1]], True)
    assert index.collect_aborted_txns(6, 13) == ([txns[1], txns[2]], True)
    assert index.collect_aborted_txns(0, 50) == (txns, False)
    index.truncate_to(9)
    index.close()
    reread = TransactionIndex(path)
    assert reread.all_aborted_txns() == txns[:1]
    assert len(path.read_bytes()) == ENTRY_SIZE


# -- the log ---------------------------------------------------------------------------


def abort_in(log: Log, pid: int, seq: int = 0, n_batches: int = 1, commit: bool = False) -> int:
    """Write a transaction of `n_batches` and its marker; returns its first offset."""
    first = log.log_end_offset
    for i in range(n_batches):
        log.append_as_leader(txn_batch(pid, seq + 2 * i), 0)
    log.append_end_txn_marker(pid, 0, 0, commit, 0)
    return first


def test_an_abort_marker_is_indexed_a_commit_is_not(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn_batch(1, 0), 0)  # 0-1
    log.append_as_leader(txn_batch(2, 0), 0)  # 2-3
    assert log.first_unstable_offset == 0
    info = log.append_end_txn_marker(1, 0, 0, False, 0)  # 4
    assert (info.first_offset, info.last_offset) == (4, 4)
    log.append_end_txn_marker(2, 0, 0, True, 0)  # 5
    # Decided, but the markers are not below the high watermark yet.
    assert log.first_unstable_offset == 0
    log.producer_state.on_high_watermark_updated(6)
    assert log.first_unstable_offset is None
    # Producer 2's transaction was open when 1's aborted: the LSO it left was 2.
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_transactions(5, 6) == []
    [marker] = log.read_batches(4, 5)
    assert read_end_txn_marker(marker) == (ControlRecordType.ABORT, 0)


def test_a_client_may_not_write_a_marker(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(memoryview(build_end_txn_marker(1, 0, 0, True, 0)), 0)


def test_log_markers_are_fenced(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append_as_leader(txn_batch(1, 0, epoch=3), 0)
    log.append_end_txn_marker(1, 3, 2, True, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_end_txn_marker(1, 2, 2, True, 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_end_txn_marker(1, 3, 1, True, 0)
    assert log.log_end_offset == 3


def test_aborted_transactions_are_collected_across_segments(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    firsts = [abort_in(log, pid, n_batches=2) for pid in (1, 2, 3, 4)]
    assert len(log.segments) > 2
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    everything = log.collect_aborted_transactions(0, log.log_end_offset)
    assert [(t.producer_id, t.first_offset) for t in everything] == list(
        zip((1, 2, 3, 4), firsts, strict=True)
    )
    # Each marker's entry is in the segment holding the marker.
    for t in everything:
        holder = log.segments[log._segment_for(t.last_offset)]
        assert t in holder.txn_index.all_aborted_txns()
    # From inside the third transaction on, up to the fourth's start: only the third.
    assert [t.producer_id for t in log.collect_aborted_transactions(firsts[2] + 1, firsts[3])] == [
        3
    ]


def test_a_follower_indexes_the_markers_it_copies(tmp_path: Path, clock: FakeClock) -> None:
    leader = open_log(tmp_path / "leader", clock)
    abort_in(leader, 1)
    follower = open_log(tmp_path / "follower", clock)
    for raw in leader.read_batches(0, leader.log_end_offset):
        follower.append_as_follower(memoryview(raw))
    assert follower.collect_aborted_transactions(0, 10) == [AbortedTxn(1, 0, 2, 3)]
    assert follower.producer_state.producers[1].current_txn_first_offset == -1


def test_truncation_cuts_the_entries_of_markers_it_removes(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    abort_in(log, 1)  # 0-1, marker 2
    abort_in(log, 2)  # 3-4, marker 5
    log.truncate_to(5)
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 10)] == [1]
    # Producer 2's transaction is open again, as its data is still there (1's is
    # unstable until the high watermark passes its marker).
    assert log.first_unstable_offset == 0
    log.producer_state.on_high_watermark_updated(3)
    assert log.first_unstable_offset == 3
    log.close()
    log = open_log(tmp_path, clock)
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 10)] == [1]
    log.producer_state.on_high_watermark_updated(3)
    assert log.first_unstable_offset == 3


def test_a_crash_rebuilds_the_txn_index_of_recovered_segments(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    for pid in (1, 2, 3, 4, 5):
        abort_in(log, pid, n_batches=2)
        log.append_as_leader(txn_batch(pid + 10, 0), 0)
        log.append_end_txn_marker(pid + 10, 0, 0, True, 0)
    end = log.log_end_offset
    before = log.collect_aborted_transactions(0, end)
    assert len(before) == 5
    # A crash: nothing closed, every transaction index lost.
    for seg in log.segments:
        seg.txn_index.close()
        seg.txn_index.path.unlink(missing_ok=True)
    log = Log.open(tmp_path, TP, LogConfig(segment_bytes=300), clock, recovery_point=0)
    assert log.log_end_offset == end
    assert log.collect_aborted_transactions(0, end) == before
    log.close()
    # And a clean reopen reads them from the files.
    log = open_log(tmp_path, clock, segment_bytes=300)
    assert log.collect_aborted_transactions(0, end) == before


def test_opening_a_log_looks_for_no_txn_index_it_has_none_of(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    for i in range(20):
        log.append_as_leader(plain_batch(1, i), 0)
    log.close()
    log = open_log(tmp_path, clock, segment_bytes=300)
    assert not list(tmp_path.glob("*.txnindex"))
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert not list(tmp_path.glob("*.txnindex"))


# -- coordinator appends and KIP-890 verification --------------------------------------


def test_a_coordinators_batches_are_not_taken_for_retries(tmp_path: Path, clock: FakeClock) -> None:
    """A transactional offset commit: every batch the group coordinator writes for the
    producer has base sequence 0 (Kafka's), yet each is appended."""
    log = open_log(tmp_path, clock)
    first = log.append_as_leader(txn_batch(1, 0, n=1), 0, AppendOrigin.COORDINATOR)
    again = log.append_as_leader(txn_batch(1, 0, n=1), 0, AppendOrigin.COORDINATOR)
    assert (first.duplicate, again.duplicate) == (False, False)
    assert again.first_offset == 1
    # Its epoch is still checked.
    log.append_end_txn_marker(1, 2, 0, True, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn_batch(1, 0, n=1), 0, AppendOrigin.COORDINATOR)


def test_a_transactional_write_needs_its_verification_guard(
    tmp_path: Path, clock: FakeClock
) -> None:
    log = open_log(tmp_path, clock)
    sentinel = VerificationGuard.SENTINEL
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 0), 0, verification_guard=sentinel)
    guard = log.maybe_start_transaction_verification(1, 0, 0)
    assert guard is not sentinel
    assert log.maybe_start_transaction_verification(1, 0, 0) is guard  # still pending
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 0), 0, verification_guard=VerificationGuard())
    log.append_as_leader(txn_batch(1, 0), 0, verification_guard=guard)
    # Open now: no verification needed for the rest of the transaction.
    assert log.maybe_start_transaction_verification(1, 2, 0) is sentinel
    log.append_as_leader(txn_batch(1, 2), 0, verification_guard=sentinel)
    # A guard handed out before a marker ends the transaction is stale after it.
    log.append_end_txn_marker(1, 0, 0, True, 0)
    stale = log.maybe_start_transaction_verification(1, 4, 0)
    log.append_end_txn_marker(1, 0, 0, False, 0)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 4), 0, verification_guard=stale)
    # Without verification (None), as before.
    log.append_as_leader(txn_batch(1, 4), 0)
