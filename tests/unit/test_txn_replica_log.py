"""The transaction coordinator over a real ReplicaManager: __transaction_state is an
ordinary log, the coordinator epoch is the partition's leader epoch, and a new
leadership reloads what the log holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.transaction.config import TransactionConfig
from moldau.coordinator.transaction.coordinator import TransactionCoordinator
from moldau.coordinator.transaction.log import TRANSACTION_STATE_TOPIC
from moldau.coordinator.transaction.state import TransactionState
from moldau.protocol.control import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from moldau.protocol.errors import ErrorCode
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

from .test_txn_fakes import FakeMarkerSender, FakeProducerIds, offsets_partition_for, until

TP = TopicPartition("orders", 0)


def _lead(leader: int, epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState(
        TRANSACTION_STATE_TOPIC, 0, 1, leader, epoch, (1, 2) if leader == 2 else (1,), epoch,
        (1, 2), is_new=epoch == 0,
    )  # fmt: skip
    return LeaderAndIsrRequest(0, 1, 1, (state,), {}, ())


def test_commit_through_the_replica_manager_and_reload(tmp_path: Path) -> None:
    async def run() -> None:
        clock = FakeClock()
        timer = ManualTimer(clock)
        replicas = ReplicaManager(
            1, LogManager([tmp_path], clock, 1), clock, timer, lambda t: LogConfig()
        )
        sender = FakeMarkerSender()
        c = TransactionCoordinator(
            1, replicas, FakeProducerIds(), sender, offsets_partition_for, clock,
            TransactionConfig(num_partitions=1, marker_retry_backoff_ms=1),
        )  # fmt: skip
        c.start()
        replicas.become_leader_or_follower(_lead(1, 4))
        await until(lambda: c.is_coordinator_for("tx") == ErrorCode.none)
        r = await c.handle_init_producer_id("tx", 60_000)
        assert r.error == ErrorCode.none
        assert await c.handle_add_partitions("tx", r.producer_id, 0, [TP]) == {TP: ErrorCode.none}
        assert await c.handle_end_txn("tx", r.producer_id, 0, commit=True) == ErrorCode.none
        await until(lambda: c.describe_transactions(["tx"])[0].state == "CompleteCommit")
        [(_, marker)] = sender.marked()
        assert marker.coordinator_epoch == 4  # the state partition's leader epoch

        # Another broker leads for a while, then this one again: it reloads.
        replicas.become_leader_or_follower(_lead(2, 5))
        assert c.is_coordinator_for("tx") == ErrorCode.not_coordinator
        replicas.become_leader_or_follower(_lead(1, 6))
        await until(lambda: c.is_coordinator_for("tx") == ErrorCode.none)
        _, entry = c.state_manager.get_transaction_state("tx")
        assert entry is not None and entry.coordinator_epoch == 6
        m = entry.metadata
        assert (m.state, m.producer_id, m.producer_epoch) == (
            TransactionState.COMPLETE_COMMIT, r.producer_id, 0,
        )  # fmt: skip
        await c.close()
        replicas.shutdown()

    asyncio.run(run())
