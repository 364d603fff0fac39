"""The transaction state machine as Kafka's TransactionMetadata has it."""

from __future__ import annotations

import pytest

from moldau.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    FencedError,
    InvalidTransitionError,
    TransactionMetadata,
    TransactionState,
    is_valid_transition,
)
from moldau.storage.partition_name import TopicPartition

S = TransactionState
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)

# Kafka's table, written out pair by pair (new state: the states it may follow).
KAFKA_TABLE = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}


def test_state_ids_are_the_bytes_kafka_writes() -> None:
    assert [(s.display_name, int(s)) for s in S] == [
        ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3),
        ("CompleteCommit", 4), ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7),
    ]  # fmt: skip
    assert S.from_name("PrepareCommit") == S.PREPARE_COMMIT
    assert S.from_name("prepare_commit") is None


@pytest.mark.parametrize("old", list(S))
@pytest.mark.parametrize("new", list(S))
def test_every_transition_is_valid_exactly_when_kafka_allows_it(
    old: TransactionState, new: TransactionState
) -> None:
    allowed = old.display_name in KAFKA_TABLE[new.display_name]
    assert is_valid_transition(old, new) == allowed
    assert (old in VALID_PREVIOUS_STATES[new]) == allowed


def meta(state: TransactionState = S.EMPTY, epoch: int = 0, **kw: object) -> TransactionMetadata:
    m = TransactionMetadata("txn", 1000, producer_epoch=epoch, txn_timeout_ms=60_000,
                            state=state, txn_last_update_timestamp=5, **kw)  # type: ignore[arg-type]  # fmt: skip
    return m


def test_a_prepared_transition_blocks_another_until_completed() -> None:
    m = meta()
    t = m.prepare_add_partitions({TP0}, now_ms=10)
    assert m.pending_state == S.ONGOING
    with pytest.raises(InvalidTransitionError):
        m.prepare_add_partitions({TP1}, now_ms=11)
    assert m.state == S.EMPTY and not m.partitions  # nothing applied before the write
    m.complete_transition_to(t)
    assert (m.state, m.partitions, m.txn_start_timestamp, m.pending_state) == (
        S.ONGOING, {TP0}, 10, None,
    )  # fmt: skip


def test_an_invalid_transition_is_refused_when_prepared() -> None:
    m = meta(S.EMPTY)
    with pytest.raises(InvalidTransitionError):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, 10)
    assert m.pending_state is None


def test_a_whole_commit_round() -> None:
    m = meta()
    m.complete_transition_to(m.prepare_add_partitions({TP0, TP1}, 10))
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 20))
    assert m.state == S.PREPARE_COMMIT and m.partitions == {TP0, TP1}
    done = m.prepare_complete(30)
    assert done.state == S.COMPLETE_COMMIT and not done.partitions
    m.remove_partition(TP0)
    m.remove_partition(TP1)
    m.complete_transition_to(done)
    assert (m.state, m.partitions, m.txn_start_timestamp, m.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT, set(), 10, 30,
    )  # fmt: skip
    # The next transaction starts its own clock.
    t = m.prepare_add_partitions({TP0}, 40)
    assert t.txn_start_timestamp == 40


def test_completing_a_transit_that_is_not_the_pending_one_fails() -> None:
    m = meta()
    t = m.prepare_add_partitions({TP0}, 10)
    other = meta().prepare_increment_producer_epoch(60_000, None, 10)
    with pytest.raises(InvalidTransitionError):
        m.complete_transition_to(other)
    m.complete_transition_to(t)


def test_init_bumps_the_epoch_and_forgets_the_last_one() -> None:
    m = meta(epoch=3)
    t = m.prepare_increment_producer_epoch(30_000, None, 10)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_timeout_ms) == (
        4,
        NO_PRODUCER_EPOCH,
        30_000,
    )
    m.complete_transition_to(t)
    assert (m.producer_epoch, m.txn_timeout_ms) == (4, 30_000)


def test_kip_360_expected_epoch() -> None:
    m = meta(epoch=3)
    m.complete_transition_to(m.prepare_increment_producer_epoch(60_000, 3, 10))
    assert (m.producer_epoch, m.last_producer_epoch) == (4, 3)
    # A retry of that call (the answer was lost) gets the same epoch back.
    again = m.prepare_increment_producer_epoch(60_000, 3, 11)
    assert (again.producer_epoch, again.last_producer_epoch) == (4, 3)
    m.pending_state = None
    with pytest.raises(FencedError):
        m.prepare_increment_producer_epoch(60_000, 1, 12)


def test_a_fence_bumps_once_even_when_its_write_failed() -> None:
    m = meta(S.ONGOING, epoch=3, partitions={TP0}, txn_start_timestamp=1)
    assert m.prepare_fence_producer_epoch().producer_epoch == 4
    m.pending_state = None
    m.has_failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 3


def test_producer_id_rotation_starts_at_epoch_zero() -> None:
    m = meta(S.COMPLETE_ABORT, epoch=32766, txn_start_timestamp=1)
    assert m.is_producer_epoch_exhausted
    t = m.prepare_producer_id_rotation(2000, 60_000, 10, record_last_epoch=True)
    m.complete_transition_to(t)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id, m.last_producer_epoch) == (
        2000, 0, 1000, 32766,
    )  # fmt: skip


def test_removing_a_partition_outside_prepare_is_a_bug() -> None:
    m = meta(S.ONGOING, partitions={TP0})
    with pytest.raises(InvalidTransitionError):
        m.remove_partition(TP0)


def test_dead_is_never_completed() -> None:
    m = meta(S.COMPLETE_COMMIT, txn_start_timestamp=1)
    t = m.prepare_dead()
    with pytest.raises(InvalidTransitionError):
        m.complete_transition_to(t)
