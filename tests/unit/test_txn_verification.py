"""KIP-890 part 1: a leader verifies a transactional write with the transaction
coordinator before the write starts a transaction on its partition. The errors
producers are told, the batching of the leader's questions per coordinator, and the
verification against a real replica manager (the coordinator faked)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import ErrorCode
from moldau.protocol.produce import ProducePartitionResponse
from moldau.replication.replica_manager import ReplicaManager, TxnMarkerAppend
from moldau.server.add_partitions_to_txn import (
    AddPartitionsToTxnManager,
    Answer,
    Errors,
    TxnToVerify,
)
from moldau.server.txn_verification import TransactionVerifier, producer_error
from moldau.storage.partition_name import TopicPartition

from .test_txn_replication import TP, clock, plain, single_broker, txn_batch

E = ErrorCode
TP1 = TopicPartition("t", 1)
__all__ = ["clock"]  # the fixture


def txn(txn_id: str = "tx", epoch: int = 0, *tps: TopicPartition) -> TxnToVerify:
    return TxnToVerify(txn_id, 7, epoch, tps or (TP,))


# -- what the producer is told ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "version", "told"),
    [
        # Not in the transaction: clients before Produce v11 know no TRANSACTION_ABORTABLE.
        (E.transaction_abortable, 10, E.invalid_txn_state),
        (E.transaction_abortable, 11, E.transaction_abortable),
        (E.producer_fenced, 11, E.invalid_producer_epoch),
        # Retriable for the coordinator, but older clients retry a produce only on these.
        (E.concurrent_transactions, 9, E.not_enough_replicas),
        (E.coordinator_not_available, 11, E.not_enough_replicas),
        (E.not_coordinator, 11, E.not_enough_replicas),
        (E.coordinator_load_in_progress, 11, E.not_enough_replicas),
        (E.network_exception, 11, E.not_enough_replicas),
        (E.invalid_producer_id_mapping, 11, E.invalid_producer_id_mapping),
    ],
)
def test_a_failed_verification_is_told_as_kafka_tells_it(
    code: ErrorCode, version: int, told: ErrorCode
) -> None:
    assert producer_error(code, version)[0] == told


# -- the manager: one request in flight per coordinator, the rest batched ----------------


class FakeCoordinators:
    """Answers each request when the test releases it."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, list[TxnToVerify]]] = []
        self.releases: list[asyncio.Future[Answer]] = []
        self.in_flight: dict[int, int] = {}

    async def send(self, broker_id: int, txns: list[TxnToVerify]) -> Answer:
        self.in_flight[broker_id] = self.in_flight.get(broker_id, 0) + 1
        assert self.in_flight[broker_id] == 1, "two requests in flight to one broker"
        self.requests.append((broker_id, txns))
        release: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.releases.append(release)
        try:
            return await release
        finally:
            self.in_flight[broker_id] -= 1


def with_manager(
    test: Callable[[AddPartitionsToTxnManager, FakeCoordinators], Awaitable[None]],
) -> None:
    async def main() -> None:
        coordinators = FakeCoordinators()
        manager = AddPartitionsToTxnManager(coordinators.send)
        try:
            await test(manager, coordinators)
        finally:
            await manager.close()

    asyncio.run(main())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_questions_asked_while_one_is_in_flight_go_together_in_the_next_request() -> None:
    async def t(manager: AddPartitionsToTxnManager, coordinators: FakeCoordinators) -> None:
        a = manager.verify(2, txn("a"))
        await settle()
        b = manager.verify(2, txn("b"))
        c = manager.verify(2, txn("c", 0, TP, TP1))
        other = manager.verify(3, txn("d"))
        await settle()
        assert [(n, [t.transactional_id for t in ts]) for n, ts in coordinators.requests] == [
            (2, ["a"]),
            (3, ["d"]),
        ]
        coordinators.releases[0].set_result({"a": {}})
        await settle()
        assert a.result() == {}
        assert [t.transactional_id for t in coordinators.requests[2][1]] == ["b", "c"]
        coordinators.releases[2].set_result({"b": {TP: E.transaction_abortable}, "c": {}})
        coordinators.releases[1].set_result(E.coordinator_load_in_progress)
        await settle()
        assert (b.result(), c.result()) == ({TP: E.transaction_abortable}, {})
        assert other.result() == {TP: E.coordinator_load_in_progress}

    with_manager(t)


def test_one_question_per_transactional_id_the_newest_epoch_wins() -> None:
    async def t(manager: AddPartitionsToTxnManager, coordinators: FakeCoordinators) -> None:
        manager.verify(2, txn("busy"))
        await settle()  # in flight: what follows waits for the next request
        first = manager.verify(2, txn("tx", 1))
        retry = manager.verify(2, txn("tx", 1))
        assert first.result() == {TP: E.network_exception}  # the client retried
        older = manager.verify(2, txn("tx", 0))
        assert older.result() == {TP: E.invalid_producer_epoch}
        newer = manager.verify(2, txn("tx", 2))
        assert retry.result() == {TP: E.invalid_producer_epoch}  # fenced by epoch 2
        coordinators.releases[0].set_result({"busy": {}})
        await settle()
        [(_, [asked])] = coordinators.requests[1:]
        assert asked.producer_epoch == 2 and not newer.done()

    with_manager(t)


def test_a_coordinator_that_cannot_be_reached_fails_the_questions_as_retriable() -> None:
    async def unreachable(broker_id: int, txns: list[TxnToVerify]) -> Answer:
        raise ConnectionError("refused")

    async def old_coordinator(broker_id: int, txns: list[TxnToVerify]) -> Answer:
        return E.unsupported_version

    async def main() -> None:
        manager = AddPartitionsToTxnManager(unreachable)
        assert await manager.verify(2, txn()) == {TP: E.network_exception}
        await manager.close()
        # A coordinator that cannot verify lets the write go ahead (as Kafka).
        manager = AddPartitionsToTxnManager(old_coordinator)
        assert await manager.verify(2, txn()) == {}
        await manager.close()

    asyncio.run(main())


def test_questions_still_waiting_at_shutdown_are_told_to_retry() -> None:
    async def t(manager: AddPartitionsToTxnManager, coordinators: FakeCoordinators) -> None:
        in_flight = manager.verify(2, txn("a"))
        await settle()
        queued = manager.verify(2, txn("b"))
        await manager.close()
        assert in_flight.result() == queued.result() == {TP: E.network_exception}
        assert manager.verify(2, txn("c")).result() == {TP: E.network_exception}

    with_manager(t)


# -- against a replica manager ------------------------------------------------------------


class Coordinator:
    """What the fake transaction coordinator knows: the partitions in the
    transaction; `meanwhile` runs while it answers."""

    def __init__(self) -> None:
        self.added: set[TopicPartition] = set()
        self.asked: list[TxnToVerify] = []
        self.meanwhile: Callable[[], None] = lambda: None

    async def verify(self, t: TxnToVerify) -> Errors:
        self.asked.append(t)
        self.meanwhile()
        return {tp: E.transaction_abortable for tp in t.partitions if tp not in self.added}


def produce(
    rm: ReplicaManager,
    coordinator: Coordinator,
    entries: dict[TopicPartition, memoryview | None],
    version: int = 11,
    coordinator_id: int | None = 1,
) -> dict[TopicPartition, ProducePartitionResponse]:
    """The produce handler's steps: verify, then append what passed."""

    async def main() -> dict[TopicPartition, ProducePartitionResponse]:
        manager = AddPartitionsToTxnManager(lambda *_: asyncio.sleep(0, {}))
        verifier = TransactionVerifier(1, rm, lambda _: coordinator_id, coordinator.verify, manager)
        try:
            failed, guards = await verifier.verify("tx", entries, version)
        finally:
            await manager.close()
        got = {
            tp: ProducePartitionResponse(tp.partition, code, error_message=message)
            for tp, (code, message) in failed.items()
        }
        rest = {tp: b for tp, b in entries.items() if tp not in failed}
        rm.append_records(1, 1000, rest, got.update, verification_guards=guards)
        return got

    return asyncio.run(main())


def test_a_batch_for_a_partition_not_in_the_transaction_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    coordinator = Coordinator()
    got = produce(rm, coordinator, {TP: txn_batch(7, 0)}, version=9)
    assert got[TP].error_code == E.invalid_txn_state
    assert [(t.producer_id, t.partitions) for t in coordinator.asked] == [(7, (TP,))]
    got = produce(rm, coordinator, {TP: txn_batch(7, 0)}, version=11)
    assert got[TP].error_code == E.transaction_abortable
    log = rm.partitions[TP].log
    assert log is not None and log.log_end_offset == 0


def test_once_added_the_batch_is_appended_and_the_rest_of_the_transaction_is_not_asked_about(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    coordinator = Coordinator()
    coordinator.added.add(TP)
    got = produce(rm, coordinator, {TP: txn_batch(7, 0)})
    assert (got[TP].error_code, got[TP].base_offset) == (E.none, 0)
    got = produce(rm, coordinator, {TP: txn_batch(7, 2)})
    assert (got[TP].error_code, got[TP].base_offset) == (E.none, 2)
    assert len(coordinator.asked) == 1  # the transaction is open here now
    # Plain batches are never asked about.
    got = produce(rm, coordinator, {TP: plain()})
    assert got[TP].error_code == E.none and len(coordinator.asked) == 1


def test_a_marker_written_while_the_coordinator_answers_voids_the_verification(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    coordinator = Coordinator()
    coordinator.added.add(TP)
    # The verified answer is stale: the transaction it is about ended meanwhile
    # (KIP-890's ABA case), so the batch must not start a new one.
    coordinator.meanwhile = lambda: rm.append_end_txn_markers(
        1000, {TP: TxnMarkerAppend(7, 0, 0, False)}, lambda _: None
    )
    got = produce(rm, coordinator, {TP: txn_batch(7, 0)})
    assert got[TP].error_code == E.invalid_txn_state
    log = rm.partitions[TP].log
    assert log is not None and log.log_end_offset == 1  # the marker alone


def test_without_a_coordinator_the_producer_retries(tmp_path: Path, clock: FakeClock) -> None:
    rm = single_broker(tmp_path, clock)
    got = produce(rm, Coordinator(), {TP: txn_batch(7, 0)}, coordinator_id=None)
    assert got[TP].error_code == E.not_enough_replicas


def test_batches_of_two_producers_in_one_request_are_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    rm = single_broker(tmp_path, clock)
    coordinator = Coordinator()
    coordinator.added.add(TP)
    got = produce(rm, coordinator, {TP: txn_batch(7, 0), TP1: txn_batch(8, 0)})
    assert {tp: r.error_code for tp, r in got.items()} == {
        TP: E.invalid_producer_id_mapping,
        TP1: E.invalid_producer_id_mapping,
    }
    assert coordinator.asked == []
