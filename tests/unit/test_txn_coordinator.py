"""The transaction coordinator against an in-memory __transaction_state and marker
sender: what producers, admin clients and partition leaders would see."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from moldau.coordinator.transaction.coordinator import TransactionCoordinator
from moldau.coordinator.transaction.log import encode_key, encode_value
from moldau.coordinator.transaction.state import TransactionState, TxnTransitMetadata
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.storage.partition_name import TopicPartition

from .test_txn_fakes import (
    FakeMarkerSender,
    FakeTxnLog,
    make_coordinator,
    offsets_partition_for,
    until,
)

S = TransactionState
E = ErrorCode
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TP2 = TopicPartition("payments", 0)
TIMEOUT = 60_000


def run(
    test: Callable[[TransactionCoordinator, FakeTxnLog, FakeMarkerSender], Awaitable[None]],
    **config: int,
) -> None:
    async def main() -> None:
        c, txn_log, sender, _ = make_coordinator(**config)
        c.start()
        try:
            await test(c, txn_log, sender)
        finally:
            await c.close()

    asyncio.run(main())


async def lead(c: TransactionCoordinator, txn_log: FakeTxnLog, txn_id: str, epoch: int = 5) -> None:
    txn_log.elect(c.partition_for(txn_id), True, epoch)
    await until(lambda: c.is_coordinator_for(txn_id) == E.none)


async def init(c: TransactionCoordinator, txn_id: str = "tx") -> tuple[int, int]:
    r = await c.handle_init_producer_id(txn_id, TIMEOUT)
    assert r.error == E.none, r
    return r.producer_id, r.producer_epoch


def state_of(c: TransactionCoordinator, txn_id: str = "tx") -> TransactionState:
    _, entry = c.state_manager.get_transaction_state(txn_id)
    assert entry is not None
    return entry.metadata.state


async def completed(c: TransactionCoordinator, txn_id: str = "tx") -> None:
    await until(
        lambda: (
            state_of(c, txn_id) in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
            and c.state_manager.get_transaction_state(txn_id)[1].metadata.pending_state is None
        )  # type: ignore[union-attr]
    )


# -- InitProducerId -------------------------------------------------------------------------


def test_idempotent_producer_gets_a_new_id_each_time() -> None:
    async def t(c: TransactionCoordinator, *_: object) -> None:
        a = await c.handle_init_producer_id(None, TIMEOUT)
        b = await c.handle_init_producer_id(None, TIMEOUT)
        assert (a.error, a.producer_epoch, b.error, b.producer_epoch) == (E.none, 0, E.none, 0)
        assert a.producer_id != b.producer_id

    run(t)


def test_init_new_then_bump() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        assert epoch == 0
        written = txn_log.last("tx")
        assert written is not None
        assert (written.producer_id, written.producer_epoch, written.state) == (pid, 0, S.EMPTY)
        assert await init(c) == (pid, 1)  # a restarted producer fences its old self
        assert txn_log.last("tx").producer_epoch == 1  # type: ignore[union-attr]

    run(t)


def test_init_errors() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        assert (await c.handle_init_producer_id("tx", TIMEOUT)).error == E.not_coordinator
        await lead(c, txn_log, "tx")
        assert (
            await c.handle_init_producer_id("tx", 900_001)
        ).error == E.invalid_transaction_timeout
        assert (await c.handle_init_producer_id("tx", 0)).error == E.invalid_transaction_timeout
        assert (await c.handle_init_producer_id("", TIMEOUT)).error == E.invalid_request
        assert (await c.handle_init_producer_id("tx", TIMEOUT, 5, -1)).error == E.invalid_request
        pid, epoch = await init(c)
        # KIP-360: a producer that expects another id is a zombie.
        r = await c.handle_init_producer_id("tx", TIMEOUT, pid + 7, epoch)
        assert r.error == E.producer_fenced
        # ... and one that expects its own id and epoch gets the next epoch.
        r = await c.handle_init_producer_id("tx", TIMEOUT, pid, epoch)
        assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 1)
        # A retry of that (its answer lost) gets the same epoch again.
        r = await c.handle_init_producer_id("tx", TIMEOUT, pid, epoch)
        assert (r.error, r.producer_epoch) == (E.none, epoch + 1)
        # An epoch older than both is fenced.
        await init(c)
        r = await c.handle_init_producer_id("tx", TIMEOUT, pid, epoch)
        assert r.error == E.producer_fenced

    run(t)


def test_load_in_progress() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        txn_log.hold_reads = asyncio.Event()
        txn_log.elect(c.partition_for("tx"), True, 1)
        await asyncio.sleep(0.001)
        assert c.is_coordinator_for("tx") == E.coordinator_load_in_progress
        assert (await c.handle_init_producer_id("tx", TIMEOUT)).error == (
            E.coordinator_load_in_progress
        )
        assert c.partitions_loading == 1
        txn_log.hold_reads.set()
        await until(lambda: c.is_coordinator_for("tx") == E.none)
        assert (c.partitions_loading, c.partitions_owned) == (0, 1)

    run(t)


def test_exhausted_epoch_moves_to_a_new_producer_id() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, _ = await init(c)
        c.state_manager.get_transaction_state("tx")[1].metadata.producer_epoch = 32766  # type: ignore[union-attr]
        new_pid, epoch = await init(c)
        assert new_pid != pid and epoch == 0

    run(t)


# -- AddPartitions, EndTxn, markers ---------------------------------------------------------


def test_add_partitions_and_errors() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        assert await c.handle_add_partitions("tx", 1, 0, [TP0]) == {
            TP0: E.invalid_producer_id_mapping
        }
        pid, epoch = await init(c)
        assert await c.handle_add_partitions("tx", pid + 1, epoch, [TP0]) == {
            TP0: E.invalid_producer_id_mapping
        }
        assert await c.handle_add_partitions("tx", pid, epoch + 1, [TP0]) == {
            TP0: E.producer_fenced
        }
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0, TP1]) == {
            TP0: E.none,
            TP1: E.none,
        }
        assert state_of(c) == S.ONGOING
        written = txn_log.last("tx")
        assert written is not None and written.state == S.ONGOING
        assert written.partitions == {TP0, TP1}
        n = len(txn_log.records(c.partition_for("tx")))
        # Already in the transaction: answered without a write.
        assert await c.handle_add_partitions("tx", pid, epoch, [TP1]) == {TP1: E.none}
        assert len(txn_log.records(c.partition_for("tx"))) == n
        # KIP-890 verification from a partition leader.
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0, TP2], verify_only=True) == {
            TP0: E.none, TP2: E.transaction_abortable,
        }  # fmt: skip
        assert await c.handle_add_partitions("tx", pid, epoch + 3, [TP0], verify_only=True) == {
            TP0: E.producer_fenced
        }

    run(t)


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        assert await c.handle_add_offsets("tx", pid, epoch, "my-group") == E.none
        offsets_tp = TopicPartition("__consumer_offsets", offsets_partition_for("my-group"))
        assert txn_log.last("tx").partitions == {offsets_tp}  # type: ignore[union-attr]

    run(t)


def test_commit_sends_markers_per_broker_then_writes_complete() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        sender.leaders = {TP0: 1, TP1: 2, TP2: 2}
        await lead(c, txn_log, "tx", epoch=7)
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0, TP1, TP2])
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        await completed(c)
        assert txn_log.last("tx").state == S.COMPLETE_COMMIT  # type: ignore[union-attr]
        states = [m.state for t, m in txn_log.records(c.partition_for("tx")) if m is not None]
        assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        by_broker = {b: m for b, m in sender.marked()}
        assert set(by_broker) == {1, 2}
        assert by_broker[1].partitions == (TP0,)
        assert set(by_broker[2].partitions) == {TP1, TP2}
        for m in by_broker.values():
            assert (m.producer_id, m.producer_epoch, m.coordinator_epoch, m.commit) == (
                pid, epoch, 7, True,
            )  # fmt: skip
        # Retrying the commit is fine; aborting it is not.
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        assert await c.handle_end_txn("tx", pid, epoch, commit=False) == E.invalid_txn_state
        # The next transaction starts from CompleteCommit.
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0]) == {TP0: E.none}

    run(t)


def test_end_txn_errors() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.invalid_txn_state
        assert await c.handle_end_txn("nope", pid, epoch, commit=True) in (
            E.invalid_producer_id_mapping, E.not_coordinator,
        )  # fmt: skip
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        assert await c.handle_end_txn("tx", pid, epoch - 1, True) == E.producer_fenced
        assert await c.handle_end_txn("tx", pid + 1, epoch, True) == E.invalid_producer_id_mapping
        sender.script[1] = [ConnectionError("down")] * 5  # markers take a while
        assert await c.handle_end_txn("tx", pid, epoch, commit=False) == E.none
        # While the markers go out: a retried abort waits, a commit is wrong, and
        # nothing new may start.
        assert await c.handle_end_txn("tx", pid, epoch, commit=False) == E.concurrent_transactions
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.concurrent_transactions
        assert await c.handle_add_partitions("tx", pid, epoch, [TP1]) == {
            TP1: E.concurrent_transactions
        }
        assert (await c.handle_init_producer_id("tx", TIMEOUT)).error == E.concurrent_transactions
        await completed(c)
        assert state_of(c) == S.COMPLETE_ABORT

    run(t)


def test_a_marker_that_fails_is_sent_again_to_the_new_leader() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        sender.leaders = {TP0: 1, TP1: 1}
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0, TP1])
        # Broker 1 cannot be reached once, then says it no longer leads TP1, which
        # has moved to broker 3 meanwhile; TP1's leader is unknown for a moment.
        sender.script[1] = [TimeoutError(), {TP1: E.not_leader_or_follower}]
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        await until(lambda: len(sender.sent) >= 2)
        sender.leaders[TP1] = None
        await asyncio.sleep(0.01)
        assert state_of(c) == S.PREPARE_COMMIT
        sender.leaders[TP1] = 3
        await completed(c)
        assert state_of(c) == S.COMPLETE_COMMIT
        done = [(b, m.partitions) for b, m in sender.marked()]
        assert done[-1] == (3, (TP1,))
        assert (1, (TP0, TP1)) in done
        assert txn_log.last("tx").state == S.COMPLETE_COMMIT  # type: ignore[union-attr]

    run(t)


def test_a_deleted_topics_partition_is_dropped_from_the_markers() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0, TP2])
        sender.deleted_topics.add("payments")
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        await completed(c)
        assert [m.partitions for _, m in sender.marked()] == [(TP0,)]

    run(t)


def test_a_fenced_marker_ends_the_sending() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        sender.script[1] = [{TP0: E.invalid_producer_epoch}]
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        await until(lambda: len(sender.sent) == 1)
        await asyncio.sleep(0.01)
        assert len(sender.sent) == 1
        assert c.marker_channel.num_txns_with_pending_markers == 0
        assert txn_log.last("tx").state == S.PREPARE_COMMIT  # type: ignore[union-attr]

    run(t)


def test_fencing_an_ongoing_transaction_aborts_it() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx", epoch=3)
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        # A new instance of the producer: the old one's transaction is aborted first.
        r = await c.handle_init_producer_id("tx", TIMEOUT)
        assert r.error == E.concurrent_transactions
        await completed(c)
        assert state_of(c) == S.COMPLETE_ABORT
        [(_, marker)] = sender.marked()
        assert (marker.commit, marker.producer_epoch, marker.coordinator_epoch) == (
            False, epoch + 1, 3,
        )  # fmt: skip
        # The zombie is fenced; the new producer's retry gets a fresh epoch.
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.producer_fenced
        assert await c.handle_add_partitions("tx", pid, epoch, [TP1]) == {TP1: E.producer_fenced}
        assert await init(c) == (pid, epoch + 2)

    run(t)


# -- state log writes -----------------------------------------------------------------------


def test_a_failed_write_leaves_the_state_as_it_was() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        txn_log.fail_next = [E.not_enough_replicas]
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0]) == {
            TP0: E.coordinator_not_available
        }
        txn_log.fail_next = [E.not_leader_or_follower]
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0]) == {TP0: E.not_coordinator}
        _, entry = c.state_manager.get_transaction_state("tx")
        assert entry is not None
        assert (entry.metadata.state, entry.metadata.partitions) == (S.EMPTY, set())
        assert entry.metadata.pending_state is None
        assert await c.handle_add_partitions("tx", pid, epoch, [TP0]) == {TP0: E.none}

    run(t)


def test_a_failed_complete_write_is_retried() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        # The Prepare write succeeded; the Complete write fails twice, then succeeds.
        txn_log.fail_next = [E.request_timed_out, E.not_enough_replicas]
        await completed(c)
        assert txn_log.last("tx").state == S.COMPLETE_COMMIT  # type: ignore[union-attr]

    run(t)


def test_losing_the_partition_stops_the_markers_and_the_new_leader_finishes() -> None:
    async def main() -> None:
        c, txn_log, sender, clock = make_coordinator()
        c.start()
        await lead(c, txn_log, "tx", epoch=1)
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        sender.script[1] = [ConnectionError()] * 1000  # the leader of TP0 is down
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.none
        await until(lambda: len(sender.sent) >= 2)
        txn_log.elect(c.partition_for("tx"), False)
        assert c.is_coordinator_for("tx") == E.not_coordinator
        await asyncio.sleep(0.01)
        assert c.marker_channel.num_txns_with_pending_markers == 0
        sent = len(sender.sent)
        await asyncio.sleep(0.01)
        assert len(sender.sent) == sent  # no more retries
        await c.close()

        # Another broker loads the partition (the same log): it finishes the commit.
        sender2 = FakeMarkerSender()
        c2, _, _, _ = make_coordinator(txn_log=txn_log, sender=sender2, clock=clock)
        c2.start()
        txn_log.listeners = txn_log.listeners[-1:]
        await lead(c2, txn_log, "tx", epoch=2)
        await completed(c2)
        [(_, marker)] = sender2.marked()
        assert (marker.commit, marker.coordinator_epoch, marker.partitions) == (True, 2, (TP0,))
        assert txn_log.last("tx").state == S.COMPLETE_COMMIT  # type: ignore[union-attr]
        await c2.close()

    asyncio.run(main())


def test_a_loaded_prepare_commit_is_completed() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        # What a coordinator killed in the middle of a commit left in the log.
        prepared = TxnTransitMetadata(
            4242, -1, 3, -1, TIMEOUT, S.PREPARE_COMMIT, frozenset({TP0, TP2}), 100, 200
        )
        batch = build_batch([(encode_key("tx"), encode_value(prepared))], timestamp=200)
        txn_log.batches[c.partition_for("tx")] = [batch]
        await lead(c, txn_log, "tx", epoch=9)
        await completed(c)
        assert state_of(c) == S.COMPLETE_COMMIT
        markers = [m for _, m in sender.marked()]
        assert {tp for m in markers for tp in m.partitions} == {TP0, TP2}
        assert {
            (m.producer_id, m.producer_epoch, m.coordinator_epoch, m.commit) for m in markers
        } == {(4242, 3, 9, True)}
        assert txn_log.last("tx").state == S.COMPLETE_COMMIT  # type: ignore[union-attr]
        # The producer goes on with the same epoch.
        assert await c.handle_add_partitions("tx", 4242, 3, [TP1]) == {TP1: E.none}

    run(t)


def test_a_load_that_fails_gives_up_the_partition() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        txn_log.batches[c.partition_for("tx")] = [
            build_batch([(encode_key("tx"), b"\x00\x07garbage")], timestamp=1)
        ]
        txn_log.elect(c.partition_for("tx"), True, 1)
        await until(lambda: c.is_coordinator_for("tx") != E.coordinator_load_in_progress)
        assert c.is_coordinator_for("tx") == E.not_coordinator

    run(t)


# -- timers ---------------------------------------------------------------------------------


def test_a_transaction_open_past_its_timeout_is_aborted_with_a_bumped_epoch() -> None:
    async def main() -> None:
        c, txn_log, sender, clock = make_coordinator()
        c.start()
        await lead(c, txn_log, "tx")
        r = await c.handle_init_producer_id("tx", 10_000)
        pid, epoch = r.producer_id, r.producer_epoch
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        clock.advance(10_000)
        assert c.abort_timed_out_transactions() == 0  # not past it yet
        clock.advance(1)
        assert c.abort_timed_out_transactions() == 1
        await completed(c)
        assert state_of(c) == S.COMPLETE_ABORT
        [(_, marker)] = sender.marked()
        assert (marker.commit, marker.producer_epoch) == (False, epoch + 1)
        written = txn_log.last("tx")
        assert written is not None and written.producer_epoch == epoch + 1
        # The producer that went quiet finds itself fenced.
        assert await c.handle_end_txn("tx", pid, epoch, commit=True) == E.producer_fenced
        assert c.abort_timed_out_transactions() == 0
        await c.close()

    asyncio.run(main())


def test_idle_transactional_ids_expire() -> None:
    async def main() -> None:
        c, txn_log, _, clock = make_coordinator(transactional_id_expiration_ms=1000)
        c.start()
        await lead(c, txn_log, "tx")
        await lead(c, txn_log, "busy")
        await init(c)
        pid, epoch = await init(c, "busy")
        clock.advance(1000)
        await c.handle_add_partitions("busy", pid, epoch, [TP0])  # Ongoing: never expires
        assert c.state_manager.remove_expired_transactional_ids() == 1
        await until(lambda: c.state_manager.get_transaction_state("tx")[1] is None)
        assert txn_log.last("tx") is None  # a tombstone
        [described] = c.describe_transactions(["tx"])
        assert described.error == E.transactional_id_not_found
        assert state_of(c, "busy") == S.ONGOING
        # The id can be used again from scratch.
        r = await c.handle_init_producer_id("tx", TIMEOUT)
        assert (r.error, r.producer_epoch) == (E.none, 0)
        await c.close()

    asyncio.run(main())


# -- Describe/ListTransactions ------------------------------------------------------------


def test_describe_and_list() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, _: FakeMarkerSender) -> None:
        await lead(c, txn_log, "a")
        await lead(c, txn_log, "b")
        pa, ea = await init(c, "a")
        pb, _ = await init(c, "b")
        await c.handle_add_partitions("a", pa, ea, [TP1, TP0, TP2])
        da, dn = c.describe_transactions(["a", "nobody"])
        assert (da.error, da.state, da.producer_id, da.producer_epoch) == (
            E.none,
            "Ongoing",
            pa,
            ea,
        )
        assert da.topics == {"orders": [0, 1], "payments": [0]}
        assert da.transaction_timeout_ms == TIMEOUT and da.transaction_start_time_ms > 0
        assert dn.error in (E.transactional_id_not_found, E.not_coordinator)
        err, listed, unknown = c.list_transactions(set(), set(), -1)
        assert err == E.none and unknown == []
        assert sorted((x.transactional_id, x.producer_id, x.state) for x in listed) == [
            ("a", pa, "Ongoing"), ("b", pb, "Empty"),
        ]  # fmt: skip
        err, listed, unknown = c.list_transactions({"Ongoing", "Bogus"}, set(), -1)
        assert [x.transactional_id for x in listed] == ["a"] and unknown == ["Bogus"]
        _, listed, _ = c.list_transactions(set(), {pb}, -1)
        assert [x.transactional_id for x in listed] == ["b"]
        counts = c.txn_counts_by_state()
        assert (counts["Ongoing"], counts["Empty"], counts["PrepareCommit"]) == (1, 1, 0)

    run(t)


def test_describe_before_start_is_not_available() -> None:
    async def main() -> None:
        c, *_ = make_coordinator()
        [d] = c.describe_transactions(["x"])
        assert d.error == E.coordinator_not_available
        assert c.list_transactions(set(), set(), -1)[0] == E.coordinator_not_available
        await c.close()

    asyncio.run(main())


def test_markers_of_transactions_ending_together_share_a_request() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "a")
        await lead(c, txn_log, "b")
        pa, ea = await init(c, "a")
        pb, eb = await init(c, "b")
        await c.handle_add_partitions("a", pa, ea, [TP0])
        await c.handle_add_partitions("b", pb, eb, [TP1])
        # An answer the channel cannot use (a bug in a broker) is retried like a lost one.
        sender.script[1] = [RuntimeError("garbled")]
        ends = await asyncio.gather(
            c.handle_end_txn("a", pa, ea, commit=True), c.handle_end_txn("b", pb, eb, commit=False)
        )
        assert ends == [E.none, E.none]
        await completed(c, "a")
        await completed(c, "b")
        assert (state_of(c, "a"), state_of(c, "b")) == (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        assert len(sender.sent[0][1]) == 2  # both in the first request

    run(t)


def test_a_request_whose_client_hung_up_still_applies_what_it_wrote() -> None:
    async def t(c: TransactionCoordinator, txn_log: FakeTxnLog, sender: FakeMarkerSender) -> None:
        await lead(c, txn_log, "tx")
        pid, epoch = await init(c)
        await c.handle_add_partitions("tx", pid, epoch, [TP0])
        txn_log.hold_acks = asyncio.Event()
        request = asyncio.create_task(c.handle_end_txn("tx", pid, epoch, commit=True))
        await asyncio.sleep(0.001)
        request.cancel()  # the connection closed while PrepareCommit was replicating
        txn_log.hold_acks.set()
        # The log says PrepareCommit: the coordinator must go on to the markers.
        await completed(c)
        assert state_of(c) == S.COMPLETE_COMMIT
        assert [m.partitions for _, m in sender.marked()] == [(TP0,)]

    run(t)
