"""A transactional id's state machine (Kafka's TransactionMetadata).

A change is prepared (`prepare_*`: the target, with the state marked pending so no
other change starts), written to __transaction_state, and only then applied
(`complete_transition_to`), so the in-memory view never runs ahead of the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NoReturn

from moldau.storage.partition_name import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue


class TransactionState(IntEnum):
    """The states, with the byte ids written to the log (TransactionLogValue's
    TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TransactionState
# state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States in which an idle transactional id may expire (transactional.id.expiration.ms).
EXPIRATION_ALLOWED: frozenset[TransactionState] = frozenset(
    {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
)


def is_valid_transition(old: TransactionState, new: TransactionState) -> bool:
    return old in VALID_PREVIOUS_STATES[new]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps MAX_EPOCH unused by clients so the coordinator can always fence."""
    return epoch >= MAX_EPOCH - 1


class InvalidTransitionError(Exception):
    """A transition that the coordinator's own logic should never attempt (Kafka's
    IllegalStateException)."""


class FencedError(Exception):
    """The producer's expected epoch is neither the current nor the previous one."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of one prepared transition: what is written to the log."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    # The state a written-but-unacknowledged transition goes to; blocks other changes.
    pending_state: TransactionState | None = None
    # A fence whose write failed bumped the epoch in memory only: the next fence must
    # not bump it again (the bumped epoch was never handed to a client).
    has_failed_epoch_fence: bool = False

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def remove_partition(self, tp: TopicPartition) -> None:
        """Its marker is written: it no longer waits for one."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise InvalidTransitionError(
                f"{self.transactional_id}: removing {tp} whose marker was sent in state "
                f"{self.state.display_name}"
            )
        self.partitions.discard(tp)

    # -- prepare ------------------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The current state as a transit, without marking anything pending."""
        return TxnTransitMetadata(
            self.producer_id, self.last_producer_id, self.producer_epoch,
            self.last_producer_epoch, self.txn_timeout_ms, self.state,
            frozenset(self.partitions), self.txn_start_timestamp, self.txn_last_update_timestamp,
        )  # fmt: skip

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        if self.producer_epoch == MAX_EPOCH:
            raise InvalidTransitionError("cannot fence a producer whose epoch is at its maximum")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
            self.txn_timeout_ms, frozenset(self.partitions), self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )  # fmt: skip

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata:
        """InitProducerId's bump. Raises FencedError when `expected_epoch` (KIP-360)
        is neither the current epoch nor the previous one."""
        if self.is_producer_epoch_exhausted:
            raise InvalidTransitionError(f"producer id {self.producer_id} has no epochs left")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_epoch):
            # The producer goes on after an error and nobody else initialised since.
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: answer the same epoch again.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise FencedError(
                f"expected epoch {expected_epoch} is neither {self.producer_epoch} "
                f"nor {self.last_producer_epoch}"
            )
        return self._prepare(
            S.EMPTY, self.producer_id, next_epoch, last_epoch, new_txn_timeout_ms,
            frozenset(), -1, now_ms,
        )  # fmt: skip

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        if self.has_pending_transaction:
            raise InvalidTransitionError("cannot rotate producer ids during a transaction")
        return self._prepare(
            S.EMPTY, new_producer_id, 0,
            self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            new_txn_timeout_ms, frozenset(), -1, now_ms,
        )  # fmt: skip

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition] | set[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        starts = self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        return self._prepare(
            S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
            self.txn_timeout_ms, frozenset(self.partitions | set(added)),
            now_ms if starts else self.txn_start_timestamp, now_ms,
        )  # fmt: skip

    def prepare_abort_or_commit(
        self, new_state: TransactionState, now_ms: int
    ) -> TxnTransitMetadata:
        return self._prepare(
            new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
            self.txn_timeout_ms, frozenset(self.partitions), self.txn_start_timestamp, now_ms,
        )  # fmt: skip

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        new_state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        # The fence's bump reached the log with the Prepare state.
        self.has_failed_epoch_fence = False
        return self._prepare(
            new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
            self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms,
        )  # fmt: skip

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(
            S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
            self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )  # fmt: skip

    def _prepare(
        self,
        new_state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        txn_timeout_ms: int,
        partitions: frozenset[TopicPartition],
        txn_start_timestamp: int,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise InvalidTransitionError(
                f"{self.transactional_id}: preparing {new_state.display_name} while "
                f"{self.pending_state.display_name} is pending"
            )
        if producer_id < 0:
            raise InvalidTransitionError(f"illegal producer id {producer_id}")
        # A new id's epoch stays -1 until its first InitProducerId, and may expire so.
        if new_state != S.DEAD and epoch < 0:
            raise InvalidTransitionError(f"illegal producer epoch {epoch}")
        if not is_valid_transition(self.state, new_state):
            raise InvalidTransitionError(
                f"{self.transactional_id}: {self.state.display_name} -> "
                f"{new_state.display_name} is not a valid transition"
            )
        self.pending_state = new_state
        return TxnTransitMetadata(
            producer_id, self.producer_id, epoch, last_epoch, txn_timeout_ms, new_state,
            partitions, txn_start_timestamp, now_ms,
        )  # fmt: skip

    # -- complete -----------------------------------------------------------------------

    def complete_transition_to(self, t: TxnTransitMetadata) -> None:
        """Apply a transition whose record is in the log."""
        to = self.pending_state
        if to is None or to != t.state:
            self._fail(t)
        if to == S.EMPTY:  # InitProducerId
            if (
                (self.producer_epoch != t.producer_epoch and not self._valid_epoch_bump(t))
                or t.partitions
                or t.txn_start_timestamp != -1
            ):
                self._fail(t)
            self.txn_timeout_ms = t.txn_timeout_ms
            self.producer_epoch = t.producer_epoch
            self.last_producer_epoch = t.last_producer_epoch
            self.producer_id = t.producer_id
            self.last_producer_id = t.last_producer_id
        elif to == S.ONGOING:  # AddPartitions / AddOffsets
            if (
                not self._same_producer(t)
                or not self.partitions <= t.partitions
                or self.txn_timeout_ms != t.txn_timeout_ms
            ):
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions |= t.partitions
        elif to in (S.PREPARE_ABORT, S.PREPARE_COMMIT):  # EndTxn
            if (
                not self._same_producer(t)
                or self.partitions != t.partitions
                or self.txn_timeout_ms != t.txn_timeout_ms
                or self.txn_start_timestamp != t.txn_start_timestamp
            ):
                self._fail(t)
        elif to in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):  # markers written
            if (
                not self._same_producer(t)
                or self.txn_timeout_ms != t.txn_timeout_ms
                or t.txn_start_timestamp == -1
            ):
                self._fail(t)
            self.txn_start_timestamp = t.txn_start_timestamp
            self.partitions.clear()
        else:
            # PrepareEpochFence is always replaced by PrepareAbort before a write, and
            # Dead ends in removal from the cache: neither is ever completed.
            self._fail(t)
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.pending_state = None
        self.state = to

    def _same_producer(self, t: TxnTransitMetadata) -> bool:
        return t.producer_epoch == self.producer_epoch and t.producer_id == self.producer_id

    def _valid_epoch_bump(self, t: TxnTransitMetadata) -> bool:
        return t.producer_epoch == self.producer_epoch + 1 or (
            t.producer_epoch == 0 and t.producer_id != self.producer_id
        )

    def _fail(self, t: TxnTransitMetadata) -> NoReturn:
        raise InvalidTransitionError(
            f"{self.transactional_id}: cannot complete the transition of {self} to {t}"
        )
