"""The transaction coordinator (Kafka's TransactionCoordinator, transaction version
1: the epoch is bumped by InitProducerId and by fencing, not by every transaction).

A transactional id belongs to partition abs(hashCode(id)) % partitions of
__transaction_state; the leader of that partition coordinates it. Every request
prepares a transition of the id's metadata, writes it to that partition (acks=all)
and applies it once written (state_manager.py). EndTxn answers once PrepareCommit or
PrepareAbort is written; the markers and the Complete state follow in the background
(marker_channel.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from moldau.clock import Clock
from moldau.coordinator.transaction.config import TransactionConfig
from moldau.coordinator.transaction.marker_channel import (
    MarkerSender,
    TransactionMarkerChannelManager,
)
from moldau.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    FencedError,
    InvalidTransitionError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from moldau.coordinator.transaction.state_manager import (
    EpochAndMetadata,
    ReplicaManagerTxnLog,
    TransactionStateManager,
    TxnLog,
)
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.partition_name import TopicPartition, by_topic
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

CONSUMER_OFFSETS = "__consumer_offsets"
S = TransactionState


class ProducerIdGenerator(Protocol):
    async def generate(self) -> int: ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class DescribedTxn:
    """One DescribeTransactions entry."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    # topic -> partitions, in the transaction
    topics: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ListedTxn:
    """One ListTransactions entry."""

    transactional_id: str
    producer_id: int
    state: str


class _NeedProducerId(Exception):
    """The epoch is exhausted: InitProducerId needs a new producer id first."""


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager | None,
        producer_ids: ProducerIdGenerator,
        marker_sender: MarkerSender,
        offsets_partition_for: Callable[[str], int],
        clock: Clock,
        config: TransactionConfig,
        *,
        txn_log: TxnLog | None = None,
    ) -> None:
        """`txn_log` stands in for __transaction_state on `replica_manager` (tests)."""
        if txn_log is None:
            if replica_manager is None:
                raise ValueError("a replica manager or a transaction log is needed")
            txn_log = ReplicaManagerTxnLog(replica_manager)
        self.broker_id = broker_id
        self.producer_ids = producer_ids
        self.offsets_partition_for = offsets_partition_for
        self.clock = clock
        self.config = config
        self.state_manager = TransactionStateManager(broker_id, txn_log, clock, config)
        self.marker_channel = TransactionMarkerChannelManager(
            self.state_manager, marker_sender, config.marker_retry_backoff_ms
        )
        self.state_manager.on_loaded = self.marker_channel.add_completions
        self.state_manager.on_unloaded = self.marker_channel.remove_markers_for_txn_partition
        self._active = False
        self._tasks = TaskOwner("txn-coordinator")

    def _now(self) -> int:
        return self.clock.milliseconds()

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._tasks.spawn(
            self._every(
                self.config.abort_timed_out_transaction_cleanup_interval_ms,
                self.abort_timed_out_transactions,
            ),
            "abort-timed-out",
        )
        self._tasks.spawn(
            self._every(
                self.config.remove_expired_transaction_cleanup_interval_ms,
                self.state_manager.remove_expired_transactional_ids,
            ),
            "expire-transactional-ids",
        )
        self._active = True

    async def close(self) -> None:
        self._active = False
        await self._tasks.close()
        await self.marker_channel.close()
        await self.state_manager.close()

    async def _every(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                job()
            except Exception:
                log.exception("transaction coordinator job %s failed", job)

    # -- routing ------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return self.state_manager.partition_for(transactional_id)

    def is_coordinator_for(self, transactional_id: str) -> ErrorCode:
        return self.state_manager.is_coordinator_for(transactional_id)

    # -- InitProducerId -----------------------------------------------------------------

    async def handle_init_producer_id(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitProducerIdResult:
        if transactional_id is None:
            # An idempotent producer: a new id every time.
            pid = await self._generate_producer_id()
            if isinstance(pid, ErrorCode):
                return InitProducerIdResult(pid)
            return InitProducerIdResult(ErrorCode.none, pid, 0)
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(ErrorCode.invalid_request)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if not self.state_manager.validate_transaction_timeout_ms(txn_timeout_ms):
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)

        new_producer_id: int | None = None
        while True:
            err, entry = self.state_manager.get_transaction_state(transactional_id)
            if err != ErrorCode.none:
                return InitProducerIdResult(err)
            if entry is None:
                pid = await self._generate_producer_id()
                if isinstance(pid, ErrorCode):
                    return InitProducerIdResult(pid)
                created = TransactionMetadata(
                    transactional_id, pid, txn_timeout_ms=txn_timeout_ms,
                    txn_last_update_timestamp=self._now(),
                )  # fmt: skip
                err, entry = self.state_manager.put_transaction_state_if_not_exists(created)
                if err != ErrorCode.none or entry is None:
                    return InitProducerIdResult(err)
            try:
                result = self._prepare_init_transit(
                    entry.metadata, txn_timeout_ms, expected, new_producer_id
                )
            except _NeedProducerId:
                # Fetched outside the checks (it may wait); they run again after it.
                generated = await self._generate_producer_id()
                if isinstance(generated, ErrorCode):
                    return InitProducerIdResult(generated)
                new_producer_id = generated
                continue
            break
        if isinstance(result, ErrorCode):
            return InitProducerIdResult(result)
        coordinator_epoch, transit = entry.coordinator_epoch, result
        if transit.state == S.PREPARE_EPOCH_FENCE:
            # An open transaction of the old epoch is aborted first; the client
            # retries, and that InitProducerId bumps the epoch again.
            error = await self._end_transaction(
                transactional_id, transit.producer_id, transit.producer_epoch, commit=False,
                from_client=False,
            )  # fmt: skip
            return InitProducerIdResult(
                ErrorCode.concurrent_transactions if error == ErrorCode.none else error
            )
        error = await self._append(transactional_id, coordinator_epoch, transit)
        if error != ErrorCode.none:
            log.info("InitProducerId of %s: %s", transactional_id, error.name)
            return InitProducerIdResult(error)
        log.info("initialized transactional id %s with producer id %d and epoch %d",
                 transactional_id, transit.producer_id, transit.producer_epoch)  # fmt: skip
        return InitProducerIdResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)

    async def _generate_producer_id(self) -> int | ErrorCode:
        try:
            return await self.producer_ids.generate()
        except KafkaError as e:
            return e.code
        except Exception:
            # Kafka answers what the id block's claim failed with (its store's error).
            log.exception("cannot allocate a producer id")
            return ErrorCode.unknown_server_error

    def _prepare_init_transit(
        self,
        m: TransactionMetadata,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        new_producer_id: int | None,
    ) -> ErrorCode | TxnTransitMetadata:
        if m.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None and not (
            # Just created; or the same producer id (its epoch is checked below); or a
            # retry of a rotation to a new producer id whose answer was lost.
            m.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == m.producer_id
            or (expected[0] == m.last_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return ErrorCode.producer_fenced
        if m.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions
        if m.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if m.is_producer_epoch_exhausted and (
                expected is None or expected[1] == m.producer_epoch
            ):
                if new_producer_id is None:
                    raise _NeedProducerId
                return m.prepare_producer_id_rotation(
                    new_producer_id, txn_timeout_ms, self._now(), expected is not None
                )
            try:
                return m.prepare_increment_producer_epoch(
                    txn_timeout_ms, None if expected is None else expected[1], self._now()
                )
            except FencedError as e:
                log.info("InitProducerId of %s fenced: %s", m.transactional_id, e)
                return ErrorCode.producer_fenced
        if m.state == S.ONGOING:
            # The bumped epoch is never handed out: the client is told to retry, and
            # its retry bumps again (to a new producer id if this one ran out).
            return m.prepare_fence_producer_epoch()
        raise InvalidTransitionError(
            f"transactional id {m.transactional_id} found in state {m.state.display_name}"
        )

    # -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------

    async def handle_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
        verify_only: bool = False,
    ) -> dict[TopicPartition, ErrorCode]:
        if verify_only:
            return self._verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        error = await self._add_partitions(
            transactional_id, producer_id, producer_epoch, frozenset(partitions)
        )
        return dict.fromkeys(partitions, error)

    async def handle_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        tp = TopicPartition(CONSUMER_OFFSETS, self.offsets_partition_for(group_id))
        return await self._add_partitions(
            transactional_id, producer_id, producer_epoch, frozenset({tp})
        )

    def _producers_entry(
        self, transactional_id: str, producer_id: int
    ) -> ErrorCode | EpochAndMetadata:
        """The id's metadata if this broker coordinates it and `producer_id` is its
        producer; else the error to answer (Kafka's checks before every transition)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        err, entry = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.none:
            return err
        if entry is None or entry.metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        return entry

    async def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> ErrorCode:
        entry = self._producers_entry(transactional_id, producer_id)
        if isinstance(entry, ErrorCode):
            return entry
        m = entry.metadata
        if m.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if m.pending_transition_in_progress or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if m.state == S.ONGOING and partitions <= m.partitions:
            return ErrorCode.none  # already in: nothing to write
        transit = m.prepare_add_partitions(partitions, self._now())
        return await self._append(transactional_id, entry.coordinator_epoch, transit)

    def _verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890: a leader asks whether a transactional write's partition was added."""
        entry = self._producers_entry(transactional_id, producer_id)
        if isinstance(entry, ErrorCode):
            return dict.fromkeys(partitions, entry)
        if entry.metadata.producer_epoch != producer_epoch:
            return dict.fromkeys(partitions, ErrorCode.producer_fenced)
        if entry.metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(partitions, ErrorCode.concurrent_transactions)
        added = entry.metadata.partitions
        return {
            tp: ErrorCode.none if tp in added else ErrorCode.transaction_abortable
            for tp in partitions
        }

    # -- EndTxn -------------------------------------------------------------------------

    async def handle_end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        return await self._end_transaction(
            transactional_id, producer_id, producer_epoch, commit, from_client=True
        )

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
    ) -> asyncio.Future[ErrorCode]:
        """Write PrepareCommit/PrepareAbort, then hand the markers to the channel.
        Everything up to the write starts now, and what follows it runs when the
        write completes, whether or not anyone still awaits the answer."""
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        result = self._prepare_end(transactional_id, producer_id, producer_epoch, commit,
                                   from_client)  # fmt: skip
        if isinstance(result, ErrorCode):
            answer.set_result(result)
            return answer
        coordinator_epoch, transit, is_epoch_fence = result

        def written(error: ErrorCode) -> None:
            if error == ErrorCode.none:
                error = self._start_markers(
                    transactional_id, producer_id, producer_epoch, commit, coordinator_epoch
                )
            elif is_epoch_fence:
                _, entry = self.state_manager.get_transaction_state(transactional_id)
                if entry is not None and entry.coordinator_epoch == coordinator_epoch:
                    # Its bumped epoch stays in memory; the next fence must not bump again.
                    entry.metadata.has_failed_epoch_fence = True
                    log.warning("fencing %s failed (%s); epoch %d was not handed out",
                                transactional_id, error.name, transit.producer_epoch)  # fmt: skip
            if not answer.done():
                answer.set_result(error)

        self.state_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit, written
        )
        return answer

    def _prepare_end(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        from_client: bool,
    ) -> ErrorCode | tuple[int, TxnTransitMetadata, bool]:
        entry = self._producers_entry(transactional_id, producer_id)
        if isinstance(entry, ErrorCode):
            return entry
        m = entry.metadata
        # A client's epoch must match; the coordinator's own abort carries a bumped one.
        if (
            from_client and producer_epoch != m.producer_epoch
        ) or producer_epoch < m.producer_epoch:
            return ErrorCode.producer_fenced
        if m.pending_state is not None and m.pending_state != S.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        if m.state == S.ONGOING:
            is_epoch_fence = False
            if not commit and m.pending_state == S.PREPARE_EPOCH_FENCE:
                # The fence becomes this abort, written with the bumped epoch.
                is_epoch_fence = True
                m.pending_state = None
                m.producer_epoch = producer_epoch
                m.last_producer_epoch = NO_PRODUCER_EPOCH
            new_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            transit = m.prepare_abort_or_commit(new_state, self._now())
            return entry.coordinator_epoch, transit, is_epoch_fence
        if m.state == S.COMPLETE_COMMIT:
            return ErrorCode.none if commit else self._invalid_state(m, commit)
        if m.state == S.COMPLETE_ABORT:
            return ErrorCode.none if not commit else self._invalid_state(m, commit)
        if m.state == S.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else self._invalid_state(m, commit)
        if m.state == S.PREPARE_ABORT:
            return (
                ErrorCode.concurrent_transactions if not commit else self._invalid_state(m, commit)
            )
        if m.state == S.EMPTY:
            return self._invalid_state(m, commit)
        raise InvalidTransitionError(
            f"transactional id {transactional_id} found in state {m.state.display_name}"
        )

    @staticmethod
    def _invalid_state(m: TransactionMetadata, commit: bool) -> ErrorCode:
        log.debug("%s is %s: cannot %s", m.transactional_id, m.state.display_name,
                  "commit" if commit else "abort")  # fmt: skip
        return ErrorCode.invalid_txn_state

    def _start_markers(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> ErrorCode:
        """Prepare is written: prepare Complete and send the markers."""
        err, entry = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.none:
            return err
        if entry is None:
            raise InvalidTransitionError(f"{transactional_id} vanished while led here")
        if entry.coordinator_epoch != coordinator_epoch:
            return ErrorCode.not_coordinator
        m = entry.metadata
        if m.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if m.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if m.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        expected = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if m.state != expected:
            return self._invalid_state(m, commit)
        transit = m.prepare_complete(self._now())
        self.marker_channel.add_txn_markers_to_send(coordinator_epoch, commit, m, transit)
        return ErrorCode.none

    def _append(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> asyncio.Future[ErrorCode]:
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()

        def written(error: ErrorCode) -> None:
            if not answer.done():
                answer.set_result(error)

        self.state_manager.append_transaction_to_log(
            transactional_id, coordinator_epoch, transit, written
        )
        return answer

    # -- timers -------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort every transaction open past its timeout; returns how many
        aborts were started."""
        started = 0
        for t in self.state_manager.timed_out_transactions():
            err, entry = self.state_manager.get_transaction_state(t.transactional_id)
            if err != ErrorCode.none or entry is None:
                continue
            m = entry.metadata
            if m.producer_id != t.producer_id or m.pending_transition_in_progress:
                continue
            transit = m.prepare_fence_producer_epoch()
            log.info("aborting transaction of %s (producer id %d): open longer than %d ms",
                     t.transactional_id, m.producer_id, m.txn_timeout_ms)  # fmt: skip
            done = self._end_transaction(
                t.transactional_id, transit.producer_id, transit.producer_epoch, commit=False,
                from_client=False,
            )  # fmt: skip
            done.add_done_callback(functools.partial(_log_timeout_abort, t.transactional_id))
            started += 1
        return started

    # -- DescribeTransactions, ListTransactions -----------------------------------------

    def describe_transactions(self, ids: list[str]) -> list[DescribedTxn]:
        return [self._describe(txn_id) for txn_id in ids]

    def _describe(self, transactional_id: str) -> DescribedTxn:
        if not self._active:
            return DescribedTxn(transactional_id, ErrorCode.coordinator_not_available)
        if not transactional_id:
            return DescribedTxn(transactional_id, ErrorCode.invalid_request)
        err, entry = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.none:
            return DescribedTxn(transactional_id, err)
        if entry is None or entry.metadata.state == S.DEAD:
            return DescribedTxn(transactional_id, ErrorCode.transactional_id_not_found)
        m = entry.metadata
        topics = by_topic(sorted(m.partitions))
        return DescribedTxn(
            transactional_id, ErrorCode.none, m.state.display_name, m.producer_id,
            m.producer_epoch, m.txn_timeout_ms, m.txn_start_timestamp, topics,
        )  # fmt: skip

    def list_transactions(
        self, states: set[str], producer_ids: set[int], min_duration_ms: int
    ) -> tuple[ErrorCode, list[ListedTxn], list[str]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, [], []
        err, found, unknown = self.state_manager.list_transaction_states(
            producer_ids, states, min_duration_ms
        )
        listed = [ListedTxn(m.transactional_id, m.producer_id, m.state.display_name) for m in found]
        return err, listed, unknown

    # -- counts, for metrics ------------------------------------------------------------

    @property
    def partitions_loading(self) -> int:
        return self.state_manager.partitions_loading

    @property
    def partitions_owned(self) -> int:
        return self.state_manager.partitions_owned

    def txn_counts_by_state(self) -> dict[str, int]:
        return self.state_manager.txn_counts_by_state()


def _log_timeout_abort(transactional_id: str, done: asyncio.Future[ErrorCode]) -> None:
    error = done.result()
    if error == ErrorCode.none:
        log.info("rolled back the timed-out transaction of %s", transactional_id)
    elif error in (
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.producer_fenced,
        ErrorCode.concurrent_transactions,
    ):
        log.debug("rollback of %s's timed-out transaction cancelled: %s", transactional_id,
                  error.name)  # fmt: skip
    else:
        log.warning("rollback of %s's timed-out transaction failed: %s", transactional_id,
                    error.name)  # fmt: skip
