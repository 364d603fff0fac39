"""The log side of the transaction coordinator (Kafka's TransactionStateManager):
which __transaction_state partitions this broker leads, the metadata of their
transactional ids loaded from the log, and every transition written there (acks=all)
before the in-memory metadata takes it."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from moldau.clock import Clock
from moldau.coordinator.transaction.config import TransactionConfig
from moldau.coordinator.transaction.log import (
    TRANSACTION_STATE_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from moldau.coordinator.transaction.state import (
    EXPIRATION_ALLOWED,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.protocol.produce import ProducePartitionResponse
from moldau.protocol.records import BatchHeader, NewRecord, build_batch, iter_records
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# How many batches of the state log are read before yielding to other work.
_LOAD_BATCHES_PER_STEP = 500
# Tombstones per batch when expiring ids: keeps a batch well under max.message.bytes.
_TOMBSTONES_PER_BATCH = 1000

LeadershipListener = Callable[[int, bool, int], None]  # (partition, is leader, leader epoch)


class TxnLog(Protocol):
    """__transaction_state as the coordinator uses it."""

    def append(
        self, partition: int, batch: bytes, timeout_ms: int, done: Callable[[ErrorCode], None]
    ) -> None:
        """Append `batch` with acks=all; `done` gets the append's error code. The
        append starts before this returns, and `done` runs even if whoever asked has
        gone, so the log and the in-memory state never disagree."""
        ...

    def read_batches(self, partition: int) -> AsyncIterator[Sequence[bytes]]:
        """The partition's batches from its log start to its log end, a chunk at a time."""
        ...

    def subscribe(self, listener: LeadershipListener) -> None:
        """Be told when this broker becomes or stops being a partition's leader, with
        the leader epoch it leads in (the partition's coordinator epoch)."""
        ...


class ReplicaManagerTxnLog:
    """TxnLog over this broker's replicas."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def append(
        self, partition: int, batch: bytes, timeout_ms: int, done: Callable[[ErrorCode], None]
    ) -> None:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)

        def respond(responses: dict[TopicPartition, ProducePartitionResponse]) -> None:
            done(ErrorCode(responses[tp].error_code))

        self.replica_manager.append_records(-1, timeout_ms, {tp: memoryview(batch)}, respond)

    async def read_batches(self, partition: int) -> AsyncIterator[Sequence[bytes]]:
        # Up to the log end, not the high watermark: see GroupMetadataManager.read_groups.
        p = self.replica_manager.get_partition(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        if p is None or p.log is None:
            return
        lg = p.log
        position = lg.log_start_offset
        while position < lg.log_end_offset:
            batches = lg.read_batches(position, lg.log_end_offset, _LOAD_BATCHES_PER_STEP)
            if not batches:
                break
            # Past the batch, not its last record: the cleaner may have emptied its end.
            position = BatchHeader.parse(batches[-1]).last_offset + 1
            yield batches
            await asyncio.sleep(0)

    def subscribe(self, listener: LeadershipListener) -> None:
        def changed(tp: TopicPartition, is_leader: bool) -> None:
            if tp.topic != TRANSACTION_STATE_TOPIC:
                return
            p = self.replica_manager.get_partition(tp)
            listener(tp.partition, is_leader, p.leader_epoch if p is not None else -1)

        self.replica_manager.on_leadership_change.append(changed)


@dataclass(slots=True)
class TxnPartitionCache:
    coordinator_epoch: int
    txns: dict[str, TransactionMetadata]


@dataclass(frozen=True, slots=True)
class EpochAndMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclass(frozen=True, slots=True)
class PendingCompletion:
    """A transaction found prepared on load: its markers are to be (re)sent."""

    coordinator_epoch: int
    commit: bool
    metadata: TransactionMetadata
    transit: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class TimedOutTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int


def append_error(code: ErrorCode) -> ErrorCode:
    """What a failed write to the state log means to the coordinator's client
    (Kafka's appendTransactionToLog)."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return code


def _no_completions(_: list[PendingCompletion]) -> None:
    pass


def _no_unload(_: int) -> None:
    pass


class TransactionStateManager:
    def __init__(
        self, broker_id: int, txn_log: TxnLog, clock: Clock, config: TransactionConfig
    ) -> None:
        self.broker_id = broker_id
        self.txn_log = txn_log
        self.clock = clock
        self.config = config
        self.num_partitions = config.num_partitions
        # Partitions loaded and led here, with the transactional ids they hold.
        self.cache: dict[int, TxnPartitionCache] = {}
        # Partitions being loaded -> the coordinator epoch the load is for.
        self.loading: dict[int, int] = {}
        # Per partition, how many times its leadership changed here: a load acts only
        # while the leadership it was started for is the current one.
        self._leadership_changes: dict[int, int] = {}
        # Set by the coordinator: prepared transactions found on load, whose markers
        # must be sent; a partition that is no longer led here (its queued markers go).
        self.on_loaded: Callable[[list[PendingCompletion]], None] = _no_completions
        self.on_unloaded: Callable[[int], None] = _no_unload
        self._tasks = TaskOwner("txn-state-manager")
        self._closed = False
        txn_log.subscribe(self.on_leadership_change)

    async def close(self) -> None:
        self._closed = True
        await self._tasks.close()
        self.loading.clear()
        self.cache.clear()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.config.max_timeout_ms

    # -- counts, for metrics ------------------------------------------------------------

    @property
    def partitions_loading(self) -> int:
        return len(self.loading)

    @property
    def partitions_owned(self) -> int:
        return len(self.cache)

    def txn_counts_by_state(self) -> dict[str, int]:
        """Transactional ids per state name (every state, zeros included)."""
        counts = Counter(m.state for c in self.cache.values() for m in c.txns.values())
        return {s.display_name: counts.get(s, 0) for s in TransactionState}

    # -- leadership, loading ------------------------------------------------------------

    def on_leadership_change(self, partition: int, is_leader: bool, coordinator_epoch: int) -> None:
        if self._closed:
            return  # shutting down: nothing is served any more
        count = self._leadership_changes.get(partition, 0) + 1
        self._leadership_changes[partition] = count
        # Whatever the previous leadership left (cache, queued markers) goes first.
        self.cache.pop(partition, None)
        self.on_unloaded(partition)
        if is_leader:
            self.loading[partition] = coordinator_epoch
            self._tasks.spawn(self._load(partition, count, coordinator_epoch), f"load-{partition}")
        else:
            self.loading.pop(partition, None)

    async def _load(self, partition: int, leadership: int, coordinator_epoch: int) -> None:
        try:
            loaded = await self._read(partition)
            if self._leadership_changes.get(partition) != leadership:
                return  # superseded: that leadership's load counts
            self.cache[partition] = TxnPartitionCache(coordinator_epoch, loaded)
            now = self.clock.milliseconds()
            pending = []
            for metadata in loaded.values():
                if metadata.state in (
                    TransactionState.PREPARE_COMMIT,
                    TransactionState.PREPARE_ABORT,
                ):
                    commit = metadata.state == TransactionState.PREPARE_COMMIT
                    transit = metadata.prepare_complete(now)
                    pending.append(PendingCompletion(coordinator_epoch, commit, metadata, transit))
            # Served from here on: the completions' writes must not find it loading.
            self.loading.pop(partition, None)
            log.info(
                "loaded %d transactional ids from %s-%d at coordinator epoch %d "
                "(%d transactions to complete)",
                len(loaded), TRANSACTION_STATE_TOPIC, partition, coordinator_epoch, len(pending),
            )  # fmt: skip
            if pending:
                self.on_loaded(pending)
        except Exception as e:
            if self._leadership_changes.get(partition) != leadership:
                return
            # Serving these ids as if they had no state would let zombies in and lose
            # prepared transactions: stop leading them; clients find the coordinator again.
            log.error("cannot load the transactions of %s-%d: %s", TRANSACTION_STATE_TOPIC,
                      partition, e, exc_info=not isinstance(e, KafkaError))  # fmt: skip
            self.on_leadership_change(partition, False, -1)
        finally:
            if self._leadership_changes.get(partition) == leadership:
                self.loading.pop(partition, None)

    async def _read(self, partition: int) -> dict[str, TransactionMetadata]:
        loaded: dict[str, TransactionMetadata] = {}
        async for batches in self.txn_log.read_batches(partition):
            for batch in batches:
                if BatchHeader.parse(batch).is_control:
                    continue
                for record in iter_records(batch):
                    if record.key is None:
                        raise ValueError("a transaction state record without a key")
                    txn_id = decode_key(record.key)
                    if txn_id is None:
                        log.warning("skipping a record of an unknown key version in %s-%d",
                                    TRANSACTION_STATE_TOPIC, partition)  # fmt: skip
                        continue
                    metadata = decode_value(txn_id, record.value)
                    if metadata is None:
                        loaded.pop(txn_id, None)
                    else:
                        loaded[txn_id] = metadata
        return loaded

    # -- lookups ------------------------------------------------------------------------

    def get_transaction_state(
        self, transactional_id: str
    ) -> tuple[ErrorCode, EpochAndMetadata | None]:
        """(NONE, the id's metadata or None if it has none), or why this broker cannot
        answer for it."""
        return self._get_or_put(transactional_id, None)

    def put_transaction_state_if_not_exists(
        self, metadata: TransactionMetadata
    ) -> tuple[ErrorCode, EpochAndMetadata | None]:
        return self._get_or_put(metadata.transactional_id, metadata)

    def _get_or_put(
        self, transactional_id: str, created: TransactionMetadata | None
    ) -> tuple[ErrorCode, EpochAndMetadata | None]:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress, None
        entry = self.cache.get(partition)
        if entry is None:
            return ErrorCode.not_coordinator, None
        metadata = entry.txns.get(transactional_id)
        if metadata is None and created is not None:
            metadata = entry.txns[transactional_id] = created
        if metadata is None:
            return ErrorCode.none, None
        return ErrorCode.none, EpochAndMetadata(entry.coordinator_epoch, metadata)

    def is_coordinator_for(self, transactional_id: str) -> ErrorCode:
        return self.get_transaction_state(transactional_id)[0]

    def all_transactions(self) -> list[TransactionMetadata]:
        return [m for c in self.cache.values() for m in c.txns.values()]

    def timed_out_transactions(self) -> list[TimedOutTxn]:
        """Ongoing transactions open longer than their timeout (best effort: the
        abort checks again)."""
        now = self.clock.milliseconds()
        return [
            TimedOutTxn(m.transactional_id, m.producer_id, m.producer_epoch)
            for m in self.all_transactions()
            if m.pending_state is None
            and m.state == TransactionState.ONGOING
            and m.txn_start_timestamp + m.txn_timeout_ms < now
        ]

    def list_transaction_states(
        self, producer_ids: Collection[int], state_names: Collection[str], min_duration_ms: int
    ) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
        """ListTransactions: (error, matching ids' metadata, state filters not known)."""
        if self.loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        now = self.clock.milliseconds()
        out = [
            m
            for m in self.all_transactions()
            # Dead: being expired, about to go.
            if m.state != TransactionState.DEAD
            and (not producer_ids or m.producer_id in producer_ids)
            and (not state_names or m.state in states)
            and (min_duration_ms < 0 or now - m.txn_start_timestamp > min_duration_ms)
        ]
        return ErrorCode.none, out, unknown

    # -- writes -------------------------------------------------------------------------

    def append_transaction_to_log(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        transit: TxnTransitMetadata,
        done: Callable[[ErrorCode], None],
        retry_on_error: Callable[[ErrorCode], bool] = lambda _: False,
    ) -> None:
        """Write `transit` for the id; once written, apply it to the cached metadata
        (if the coordinator epoch is still the one it was prepared under) and tell
        `done`. On failure the pending state is cleared (unless the caller will retry)
        and the metadata stays as it was."""
        err, entry = self.get_transaction_state(transactional_id)
        if err != ErrorCode.none:
            done(err)
            return
        if entry is None or entry.coordinator_epoch != coordinator_epoch:
            done(ErrorCode.not_coordinator)
            return
        record: NewRecord = (
            encode_key(transactional_id),
            encode_value(transit, self.config.flexible_records),
        )
        batch = build_batch([record], timestamp=self.clock.milliseconds())

        def written(code: ErrorCode) -> None:
            error = append_error(code)
            err, entry = self.get_transaction_state(transactional_id)
            if error == ErrorCode.none:
                if err != ErrorCode.none:
                    error = err
                elif entry is None or entry.coordinator_epoch != coordinator_epoch:
                    # Led elsewhere (or again here) meanwhile: the client must look
                    # for the coordinator again.
                    error = ErrorCode.not_coordinator
                else:
                    entry.metadata.complete_transition_to(transit)
            elif (
                err == ErrorCode.none
                and entry is not None
                and entry.coordinator_epoch == coordinator_epoch
                and not retry_on_error(error)
            ):
                log.info("writing %s of %s failed (%s): transition abandoned",
                         transit.state.display_name, transactional_id, error.name)  # fmt: skip
                entry.metadata.pending_state = None
            done(error)

        self.txn_log.append(
            self.partition_for(transactional_id), batch, transit.txn_timeout_ms, written
        )

    def remove_expired_transactional_ids(self) -> int:
        """Write tombstones for ids idle past transactional.id.expiration.ms and drop
        them from the cache once written. Returns how many are being expired."""
        now = self.clock.milliseconds()
        started = 0
        for partition, entry in list(self.cache.items()):
            expired: list[tuple[TransactionMetadata, TxnTransitMetadata]] = []
            for m in entry.txns.values():
                if (
                    m.pending_state is None
                    and m.state in EXPIRATION_ALLOWED
                    and m.txn_last_update_timestamp
                    <= now - self.config.transactional_id_expiration_ms
                ):
                    expired.append((m, m.prepare_dead()))
            for i in range(0, len(expired), _TOMBSTONES_PER_BATCH):
                chunk = expired[i : i + _TOMBSTONES_PER_BATCH]
                self._write_tombstones(partition, entry.coordinator_epoch, chunk, now)
            started += len(expired)
        return started

    def _write_tombstones(
        self,
        partition: int,
        coordinator_epoch: int,
        expired: list[tuple[TransactionMetadata, TxnTransitMetadata]],
        now: int,
    ) -> None:
        records: list[NewRecord] = [(encode_key(m.transactional_id), None) for m, _ in expired]
        batch = build_batch(records, timestamp=now)

        def written(code: ErrorCode) -> None:
            entry = self.cache.get(partition)
            for m, transit in expired:
                if (
                    code == ErrorCode.none
                    and entry is not None
                    and entry.coordinator_epoch == coordinator_epoch
                    and m.pending_state == TransactionState.DEAD
                    and m.producer_epoch == transit.producer_epoch
                    and entry.txns.get(m.transactional_id) is m
                ):
                    del entry.txns[m.transactional_id]
                else:
                    log.warning("could not expire transactional id %s (%s)", m.transactional_id,
                                code.name)  # fmt: skip
                    m.pending_state = None

        self.txn_log.append(partition, batch, self.config.request_timeout_ms, written)
