"""Group coordinator edges that need a fake clock: a real GroupCoordinator and
ReplicaManager, timers advanced by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator, JoinRequest
from moldau.protocol.errors import ErrorCode
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager

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
        gc.owned = set(range(gc.num_partitions))
        group = GroupMetadata(
            "g", state=GroupState.STABLE, protocol_type="consumer", protocol_name="range",
            generation_id=1,
        )  # fmt: skip
        old = MemberMetadata(
            "old", "instance-1", "c", "h", SESSION_MS, SESSION_MS, "consumer", [("range", b"x")]
        )
        group.add(old)
        gc.groups["g"] = group
        gc._schedule_heartbeat(group, old)

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
