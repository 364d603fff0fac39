"""Group coordinator edges that need a fake clock: a real GroupCoordinator and
ReplicaManager, timers advanced by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator, JoinRequest
from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS
from moldau.protocol.errors import ErrorCode
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

SESSION_MS = 10_000


def test_a_restarted_static_member_that_heartbeats_is_not_expired_by_its_old_timer(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        clock = FakeClock()
        timer = ManualTimer(clock)
        replicas = ReplicaManager(
            1, LogManager([tmp_path], clock, 1), clock, timer, lambda t: LogConfig()
        )
        gc = GroupCoordinator(1, replicas, clock, timer, GroupConfig())
        for partition in range(gc.num_partitions):  # this broker leads every one
            for tell in replicas.on_leadership_change:
                tell(TopicPartition(CONSUMER_OFFSETS, partition), True)
        for _ in range(100):  # the (empty) partitions load
            if not gc.loading:
                break
            await asyncio.sleep(0)
        assert not gc.loading
        group = GroupMetadata(
            "g", state=GroupState.STABLE, protocol_type="consumer", protocol_name="range",
            generation_id=1,
        )  # fmt: skip
        old = MemberMetadata(
            "old", "instance-1", "c", "h", SESSION_MS, SESSION_MS, "consumer", [("range", b"x")]
        )
        group.add(old)
        gc.groups["g"] = group  # a stable group, as loaded from its partition
        assert gc.heartbeat("g", "old", "instance-1", 1) == ErrorCode.none

        timer.advance(5000)  # the member restarts and rejoins with its instance id
        joined = await gc.join_group(
            JoinRequest("g", "", "instance-1", "c", "h", SESSION_MS, SESSION_MS, "consumer",
                        [("range", b"x")], True)
        )  # fmt: skip
        assert joined.error == ErrorCode.none
        new_id = joined.member_id
        assert new_id != "old"
        # It heartbeats every 2 s, well past where the old id's session would end.
        for _ in range(6):
            timer.advance(2000)
            assert gc.heartbeat("g", new_id, "instance-1", 1) == ErrorCode.none
        assert list(group.members) == [new_id]
        assert group.state == GroupState.STABLE
        await gc.close()

    asyncio.run(run())


def test_a_group_lives_where_kafka_puts_it() -> None:
    """Java's String.hashCode, Kafka's Utils.abs (Integer.MIN_VALUE -> 0), modulo the
    offsets partitions: a group moved between Kafka and Moldau keeps its partition."""
    from moldau.coordinator.group_metadata_manager import java_string_hash, partition_for_group

    assert java_string_hash("hello") == 99162322
    assert java_string_hash("héllo, wörld") == int.from_bytes(
        (sum(31 ** (11 - i) * ord(c) for i, c in enumerate("héllo, wörld")) % 2**32).to_bytes(4),
        signed=True,
    )
    # The string whose hash is Integer.MIN_VALUE: abs() would overflow in Java.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
