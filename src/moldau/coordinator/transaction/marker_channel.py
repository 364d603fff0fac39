"""Sends the markers that end a transaction (Kafka's TransactionMarkerChannelManager
and TransactionMarkerRequestCompletionHandler).

Once PrepareCommit/PrepareAbort is in the log, every partition of the transaction
gets a marker from its leader: WriteTxnMarkers, one request per broker carrying what
is queued for it. What fails for a reason that passes (leader moved or unknown, too
few replicas, a timeout, a broker that cannot be reached) is sent again after a short
back-off to whoever leads then; a partition of a deleted topic is dropped. When no
partition waits any more, CompleteCommit/CompleteAbort is written. All of it stops for
a transaction whose __transaction_state partition is no longer led here in the same
coordinator epoch: the next coordinator completes it on load.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from moldau.coordinator.transaction.state import TransactionMetadata, TxnTransitMetadata
from moldau.coordinator.transaction.state_manager import (
    PendingCompletion,
    TransactionStateManager,
)
from moldau.protocol.errors import ErrorCode
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


class MarkerSender(Protocol):
    def leader_of(self, tp: TopicPartition) -> int | None:
        """The partition's leader; None: unknown now."""
        ...

    def topic_exists(self, topic: str) -> bool: ...

    async def write_txn_markers(
        self, broker_id: int, markers: list[TxnMarkerEntry]
    ) -> list[dict[TopicPartition, ErrorCode]]:
        """One dict per marker, in order. Raises ConnectionError/TimeoutError when the
        broker cannot be reached."""
        ...


# What a leader answers for a partition, and what it means for its marker
# (Kafka's TransactionMarkerRequestCompletionHandler).
RETRIABLE_MARKER_ERRORS = frozenset({
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out,
    ErrorCode.kafka_storage_error,
})  # fmt: skip
# The producer or the coordinator moved on: this transaction's markers are moot.
FENCED_MARKER_ERRORS = frozenset({
    ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_coordinator_fenced,
})  # fmt: skip
# The producer could not have written there either: the partition waits no more.
SKIPPED_MARKER_ERRORS = frozenset({
    ErrorCode.unsupported_for_message_format,
    ErrorCode.unsupported_version,
})  # fmt: skip


@dataclass(eq=False, slots=True)
class PendingCompleteTxn:
    """A transaction whose markers are being written, and the Complete transition
    (already prepared: the metadata is pending on it) to write after them."""

    transactional_id: str
    coordinator_epoch: int
    commit: bool
    metadata: TransactionMetadata
    transit: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class _Queued:
    pending: PendingCompleteTxn
    marker: TxnMarkerEntry


class TransactionMarkerChannelManager:
    def __init__(
        self,
        state_manager: TransactionStateManager,
        sender: MarkerSender,
        retry_backoff_ms: int = 100,
    ) -> None:
        self.state_manager = state_manager
        self.sender = sender
        self.retry_backoff_s = retry_backoff_ms / 1000
        # transactional id -> its transaction whose markers are on their way
        self.pending: dict[str, PendingCompleteTxn] = {}
        self._queues: dict[int, list[_Queued]] = {}
        self._wakeups: dict[int, asyncio.Event] = {}
        self._senders: set[int] = set()
        self._append_retries = 0
        self._tasks = TaskOwner("txn-marker-channel")
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        await self._tasks.close()
        self._queues.clear()
        self.pending.clear()

    # -- counts, for metrics ------------------------------------------------------------

    @property
    def num_txns_with_pending_markers(self) -> int:
        return len(self.pending)

    @property
    def num_queued_markers(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def log_append_retries(self) -> int:
        """Complete writes waiting to be tried again."""
        return self._append_retries

    # -- adding and removing ------------------------------------------------------------

    def add_txn_markers_to_send(
        self,
        coordinator_epoch: int,
        commit: bool,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
    ) -> None:
        """Send the markers of `metadata`'s prepared transaction, then write `transit`."""
        txn_id = metadata.transactional_id
        pending = PendingCompleteTxn(txn_id, coordinator_epoch, commit, metadata, transit)
        if txn_id in self.pending:
            log.info("replacing the markers pending for %s", txn_id)
        self.pending[txn_id] = pending
        self._enqueue(pending, metadata.producer_id, metadata.producer_epoch, metadata.partitions)
        self.maybe_write_txn_completion(txn_id)

    def add_completions(self, completions: list[PendingCompletion]) -> None:
        """Transactions found prepared when a partition was loaded."""
        for c in completions:
            self.add_txn_markers_to_send(c.coordinator_epoch, c.commit, c.metadata, c.transit)

    def remove_markers_for_txn_partition(self, partition: int) -> None:
        """The state partition is no longer led here (or is led anew): its queued
        markers go; the next load decides what is still to be done."""
        for broker, queue in self._queues.items():
            self._queues[broker] = [q for q in queue if self._txn_partition(q.pending) != partition]
        for txn_id, pending in list(self.pending.items()):
            if self._txn_partition(pending) == partition:
                del self.pending[txn_id]

    def remove_markers_for_txn(self, pending: PendingCompleteTxn) -> None:
        if self.pending.get(pending.transactional_id) is pending:
            del self.pending[pending.transactional_id]

    def _txn_partition(self, pending: PendingCompleteTxn) -> int:
        return self.state_manager.partition_for(pending.transactional_id)

    def _still_current(self, pending: PendingCompleteTxn) -> bool:
        """Whether this broker still coordinates the transaction in the epoch its
        markers were prepared in; drops it otherwise."""
        if self.pending.get(pending.transactional_id) is not pending:
            return False
        err, entry = self.state_manager.get_transaction_state(pending.transactional_id)
        if err != ErrorCode.none or entry is None:
            # Not led here, or being loaded: the load sends the markers again.
            log.info("no longer the coordinator of %s in epoch %d (%s): its markers are "
                     "dropped", pending.transactional_id, pending.coordinator_epoch,
                     err.name)  # fmt: skip
            self.remove_markers_for_txn(pending)
            return False
        if entry.coordinator_epoch != pending.coordinator_epoch:
            log.info("the coordinator epoch of %s moved from %d to %d: its markers are dropped",
                     pending.transactional_id, pending.coordinator_epoch,
                     entry.coordinator_epoch)  # fmt: skip
            self.remove_markers_for_txn(pending)
            return False
        return True

    # -- routing ------------------------------------------------------------------------

    def _enqueue(
        self,
        pending: PendingCompleteTxn,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> None:
        by_broker: dict[int, list[TopicPartition]] = {}
        unknown: list[TopicPartition] = []
        deleted: list[TopicPartition] = []
        for tp in partitions:
            leader = self.sender.leader_of(tp)
            if leader is not None:
                by_broker.setdefault(leader, []).append(tp)
            elif self.sender.topic_exists(tp.topic):
                unknown.append(tp)
            else:
                deleted.append(tp)
        for broker, tps in by_broker.items():
            marker = TxnMarkerEntry(
                producer_id, producer_epoch, pending.coordinator_epoch, pending.commit,
                tuple(sorted(tps)),
            )  # fmt: skip
            self._queues.setdefault(broker, []).append(_Queued(pending, marker))
            self._wake(broker)
        if unknown:
            self._retry_later(pending, producer_id, producer_epoch, unknown)
        if deleted and self._still_current(pending):
            # No producer can write there any more: nothing to mark.
            log.info("%s: partitions %s are gone; no markers for them",
                     pending.transactional_id, sorted(deleted))  # fmt: skip
            for tp in deleted:
                pending.metadata.remove_partition(tp)
            self.maybe_write_txn_completion(pending.transactional_id)

    def _retry_later(
        self,
        pending: PendingCompleteTxn,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
    ) -> None:
        async def retry() -> None:
            await asyncio.sleep(self.retry_backoff_s)
            if self._still_current(pending):
                self._enqueue(pending, producer_id, producer_epoch, partitions)

        self._spawn(retry(), f"retry-{pending.transactional_id}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        if self._closed:
            coro.close()  # shutting down: the next coordinator finishes the transaction
            return
        self._tasks.spawn(coro, name)

    def _wake(self, broker: int) -> None:
        event = self._wakeups.get(broker)
        if event is None:
            event = self._wakeups[broker] = asyncio.Event()
        event.set()
        if broker not in self._senders:
            self._senders.add(broker)
            self._spawn(self._send_loop(broker, event), f"send-to-{broker}")

    # -- sending ------------------------------------------------------------------------

    async def _send_loop(self, broker: int, event: asyncio.Event) -> None:
        """One request at a time to `broker`, carrying every marker queued for it."""
        try:
            while True:
                await event.wait()
                event.clear()
                queued = self._queues.pop(broker, [])
                queued = [q for q in queued if self.pending.get(q.pending.transactional_id)
                          is q.pending]  # fmt: skip
                if queued:
                    await self._send(broker, queued)
        finally:
            self._senders.discard(broker)

    async def _send(self, broker: int, queued: list[_Queued]) -> None:
        try:
            results = await self.sender.write_txn_markers(broker, [q.marker for q in queued])
            if len(results) != len(queued):
                raise ValueError(f"{len(results)} answers to {len(queued)} markers")
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed (%s); retrying", broker, e)
            self._retry_all(queued)
            return
        except Exception:
            # Whatever went wrong, these transactions must not stay prepared for good.
            log.exception("WriteTxnMarkers to broker %d failed; retrying", broker)
            self._retry_all(queued)
            return
        for q, errors in zip(queued, results, strict=True):
            self._on_marker_result(q, errors)

    def _retry_all(self, queued: list[_Queued]) -> None:
        for q in queued:
            if self._still_current(q.pending):
                m = q.marker
                self._retry_later(q.pending, m.producer_id, m.producer_epoch, list(m.partitions))

    def _on_marker_result(self, q: _Queued, errors: dict[TopicPartition, ErrorCode]) -> None:
        pending, marker = q.pending, q.marker
        txn_id = pending.transactional_id
        if not self._still_current(pending):
            return
        retry: list[TopicPartition] = []
        fenced = False
        for tp in marker.partitions:
            code = errors.get(tp, ErrorCode.request_timed_out)  # not answered: try again
            if code == ErrorCode.none or code in SKIPPED_MARKER_ERRORS:
                if code != ErrorCode.none:
                    log.info("%s: marker for %s failed with %s; the partition waits no more",
                             txn_id, tp, code.name)  # fmt: skip
                pending.metadata.remove_partition(tp)
            elif code in RETRIABLE_MARKER_ERRORS:
                log.debug("%s: marker for %s failed with %s; retrying", txn_id, tp, code.name)
                retry.append(tp)
            elif code in FENCED_MARKER_ERRORS:
                log.info("%s: marker for %s failed with %s; no more markers for this "
                         "transaction", txn_id, tp, code.name)  # fmt: skip
                fenced = True
            else:
                # Kafka treats these (corrupt message, too large, ...) as fatal: the
                # transaction stays prepared until the partition is loaded again.
                log.error("%s: marker for %s failed with %s; giving up on this transaction",
                          txn_id, tp, code.name)  # fmt: skip
                fenced = True
        if fenced:
            self.remove_markers_for_txn(pending)
        elif retry:
            self._retry_later(pending, marker.producer_id, marker.producer_epoch, retry)
        else:
            self.maybe_write_txn_completion(txn_id)

    # -- completing ---------------------------------------------------------------------

    def maybe_write_txn_completion(self, transactional_id: str) -> None:
        pending = self.pending.get(transactional_id)
        if pending is None or pending.metadata.partitions:
            return
        del self.pending[transactional_id]
        err, entry = self.state_manager.get_transaction_state(transactional_id)
        if err != ErrorCode.none or entry is None:
            log.info("%s: not completing (%s); its partition's next load will", transactional_id,
                     err.name)  # fmt: skip
            return
        if entry.coordinator_epoch != pending.coordinator_epoch:
            log.info("%s: coordinator epoch moved on; not completing", transactional_id)
            return
        self._try_append(pending)

    def _try_append(self, pending: PendingCompleteTxn) -> None:
        def written(error: ErrorCode) -> None:
            if error == ErrorCode.coordinator_not_available:
                # Too few replicas, or a timeout: the metadata stays pending; try again.
                self._spawn(self._retry_append(pending), f"complete-{pending.transactional_id}")
            elif error not in (
                ErrorCode.none,
                ErrorCode.not_coordinator,
                ErrorCode.coordinator_load_in_progress,
            ):
                log.error("writing %s for %s failed: %s", pending.transit.state.display_name,
                          pending.transactional_id, error.name)  # fmt: skip

        self.state_manager.append_transaction_to_log(
            pending.transactional_id, pending.coordinator_epoch, pending.transit, written,
            retry_on_error=lambda e: e == ErrorCode.coordinator_not_available,
        )  # fmt: skip

    async def _retry_append(self, pending: PendingCompleteTxn) -> None:
        self._append_retries += 1
        try:
            await asyncio.sleep(self.retry_backoff_s)
        finally:
            self._append_retries -= 1
        self._try_append(pending)
