"""KIP-890 part 1 on the produce path (Kafka's ReplicaManager.handleProduceAppend):
before a transactional batch starts a transaction on a partition this broker leads,
the transaction coordinator is asked whether the partition is in the producer's
transaction, and the batch is appended only if it is, carrying the guard the
verification started with (a marker written meanwhile voids it; see
storage.producer_state.VerificationGuard).

A produce whose transaction is already open on every partition, and any produce
without a transactional id, costs nothing but a header parse per partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from moldau.controller.admin import TRANSACTION_STATE_TOPIC
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import HEADER_SIZE, BatchHeader
from moldau.server.add_partitions_to_txn import AddPartitionsToTxnManager, Errors, TxnToVerify
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import VerificationGuard

if TYPE_CHECKING:
    from moldau.server.broker import Broker

# Produce v11 (KIP-890) is the first whose clients know TRANSACTION_ABORTABLE.
TRANSACTION_ABORTABLE_SINCE = 11

# Retriable failures to verify that older clients do not retry a produce on: told as
# NOT_ENOUGH_REPLICAS, which they retry without refreshing metadata (as Kafka).
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)

# A partition's error for its producer: the code and the message (None: the code's).
Failure = tuple[ErrorCode, str | None]


def producer_error(code: ErrorCode, produce_version: int) -> Failure:
    """What a producer is told when its partition failed verification with `code`
    (the coordinator's, or the leader's own when it could not ask)."""
    if code == ErrorCode.producer_fenced:
        code = ErrorCode.invalid_producer_epoch  # what producers handle here
    elif code == ErrorCode.transaction_abortable and produce_version < TRANSACTION_ABORTABLE_SINCE:
        code = ErrorCode.invalid_txn_state
    if code == ErrorCode.invalid_txn_state:
        return code, "the partition is not in the producer's transaction"
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return (
            ErrorCode.not_enough_replicas,
            f"could not verify that the partition is in the transaction: {code.name.upper()}",
        )
    return code, None


class GuardSource(Protocol):
    """ReplicaManager's side: a guard per transactional partition led here
    (SENTINEL where the producer's transaction is already open)."""

    def start_transaction_verification(
        self, entries: dict[TopicPartition, memoryview | None]
    ) -> dict[TopicPartition, VerificationGuard]: ...


class TransactionVerifier:
    """Verifies a produce's transactional partitions with their coordinator: in
    process when this broker is the coordinator, else through the manager."""

    def __init__(
        self,
        broker_id: int,
        guards: GuardSource,
        coordinator_of: Callable[[str], int | None],
        verify_locally: Callable[[TxnToVerify], Awaitable[Errors]],
        manager: AddPartitionsToTxnManager,
    ) -> None:
        self._broker_id = broker_id
        self._guards = guards
        self._coordinator_of = coordinator_of
        self._verify_locally = verify_locally
        self._manager = manager

    async def verify(
        self,
        transactional_id: str,
        entries: dict[TopicPartition, memoryview | None],
        produce_version: int,
    ) -> tuple[dict[TopicPartition, Failure], dict[TopicPartition, VerificationGuard]]:
        """The partitions that must not be appended, with their error, and the
        guards the others are appended with."""
        producers = set()
        for batch in entries.values():
            if batch is None or len(batch) < HEADER_SIZE:
                continue  # the append reports it
            header = BatchHeader.parse(batch)
            if header.is_transactional and header.producer_id >= 0:
                producers.add((header.producer_id, header.producer_epoch))
        if not producers:
            return {}, {}
        if len(producers) > 1:
            failure = (
                ErrorCode.invalid_producer_id_mapping,
                "transactional batches of more than one producer in one request",
            )
            return dict.fromkeys(entries, failure), {}
        ((producer_id, producer_epoch),) = producers
        guards = {
            tp: g
            for tp, g in self._guards.start_transaction_verification(entries).items()
            if g is not VerificationGuard.SENTINEL
        }
        if not guards:
            return {}, {}  # every transaction is open already
        txn = TxnToVerify(transactional_id, producer_id, producer_epoch, tuple(guards))
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            errors = txn.failed(ErrorCode.coordinator_not_available)
        elif coordinator == self._broker_id:
            errors = await self._verify_locally(txn)
        else:
            errors = await self._manager.verify(coordinator, txn)
        failures = {
            tp: producer_error(code, produce_version)
            for tp, code in errors.items()
            if code != ErrorCode.none and tp in guards
        }
        return failures, guards


def broker_verifier(broker: Broker, manager: AddPartitionsToTxnManager) -> TransactionVerifier:
    """The verifier of `broker`: its replica manager's guards; the coordinator is
    the leader of the transactional id's __transaction_state partition, as this
    broker's metadata cache knows it (Kafka's getTransactionCoordinator)."""
    listener = broker.inter_broker_listener.name
    cache = broker.metadata_cache

    def coordinator_of(transactional_id: str) -> int | None:
        partition = broker.txn_coordinator.partition_for(transactional_id)
        state = cache.partition_state(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        if state is None or state.leader < 0 or state.leader not in cache.brokers:
            return None
        leader = int(state.leader)
        if leader != broker.broker_id and cache.endpoint(leader, listener) is None:
            return None
        return leader

    async def verify_locally(txn: TxnToVerify) -> Errors:
        return await broker.txn_coordinator.handle_add_partitions(
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.partitions,
            verify_only=True,
        )

    return TransactionVerifier(
        broker.broker_id, broker.replica_manager, coordinator_of, verify_locally, manager
    )
