"""Offset retention (offsets.retention.minutes) as Kafka applies it, on a real
GroupCoordinator and ReplicaManager with a fake clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator, OffsetCommitEntry
from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS
from moldau.coordinator.records import OffsetAndMetadata
from moldau.protocol.control import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from moldau.protocol.errors import ErrorCode
from moldau.replication.partition import FetchIsolation
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import FetchParams, FetchPartitionRead, ReplicaManager
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

RETENTION_MS = 60_000


def coordinator(tmp_path: Path, clock: FakeClock) -> GroupCoordinator:
    logs = LogManager([tmp_path], clock, 1)
    replicas = ReplicaManager(1, logs, clock, ManualTimer(clock), lambda topic: LogConfig())
    gc = GroupCoordinator(
        1, replicas, clock, ManualTimer(clock), GroupConfig(offsets_retention_ms=RETENTION_MS)
    )
    gc.owned = set(range(gc.num_partitions))
    return gc


def offset(committed_at: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(10, -1, "", committed_at)


def subscription(*topics: str) -> bytes:
    out = b"\x00\x00" + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out


def test_offsets_expire_as_kafka_expires_them(tmp_path: Path) -> None:
    clock = FakeClock()
    gc = coordinator(tmp_path, clock)
    now = clock.milliseconds()
    a, b = TopicPartition("a", 0), TopicPartition("b", 0)
    # A standalone consumer's offsets (no protocol): by commit time each.
    standalone = GroupMetadata(
        "standalone", offsets={a: offset(now - 70_000), b: offset(now - 1000)}
    )
    # An empty consumer group: all offsets, once the group has been empty long enough.
    empty = GroupMetadata(
        "empty", protocol_type="consumer", current_state_timestamp_ms=now - 70_000,
        offsets={a: offset(now - 1000)},
    )  # fmt: skip
    recently_empty = GroupMetadata(
        "recent", protocol_type="consumer", current_state_timestamp_ms=now - 1000,
        offsets={a: offset(now - 70_000)},
    )  # fmt: skip
    # A stable group: only offsets of topics it no longer subscribes to.
    stable = GroupMetadata(
        "stable", state=GroupState.STABLE, protocol_type="consumer", protocol_name="range",
        offsets={a: offset(now - 70_000), b: offset(now - 70_000)},
    )  # fmt: skip
    stable.add(
        MemberMetadata(
            "m", None, "c", "h", 1000, 10_000, "consumer", [("range", subscription("a"))]
        )
    )
    for g in (standalone, empty, recently_empty, stable):
        gc.groups[g.group_id] = g
    tombstones = dict(gc.cleanup_expired_offsets())
    assert set(standalone.offsets) == {b}
    assert "empty" not in gc.groups and empty.state == GroupState.DEAD  # no offsets left: dead
    assert len(tombstones["empty"]) == 2  # its offset and its group metadata
    assert set(recently_empty.offsets) == {a}
    assert set(stable.offsets) == {a}
    assert "recent" not in tombstones
    assert len(tombstones["standalone"]) == 1 and len(tombstones["stable"]) == 1


def test_expiry_leaves_alone_a_commit_still_waiting_for_its_acks(tmp_path: Path) -> None:
    """Expiry runs while a commit waits for acks=all (Kafka skips partitions in
    pendingOffsetCommits). `old` holds an offset past retention and commits 20 for
    it; `new` makes its first commit. Expiry wrote a tombstone for `old` after the
    commit, so the commit was acknowledged yet the log's last word (what the next
    coordinator loads) deleted it; and it killed `new` (empty, no offsets yet), so
    its acknowledged commit was not even served by this coordinator."""

    async def run() -> None:
        clock = FakeClock()
        timer = ManualTimer(clock)
        logs = LogManager([tmp_path], clock, 1)
        replicas = ReplicaManager(1, logs, clock, timer, lambda topic: LogConfig())
        config = GroupConfig(num_partitions=1, offsets_retention_ms=RETENTION_MS)
        gc = GroupCoordinator(1, replicas, clock, timer, config)
        # Broker 1 leads __consumer_offsets-0 with broker 2 in its ISR.
        state = LeaderAndIsrPartitionState(
            CONSUMER_OFFSETS, 0, 1, 1, 0, (1, 2), 0, (1, 2), is_new=True
        )
        replicas.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
        for _ in range(100):
            if not gc.loading:
                break
            await asyncio.sleep(0)
        assert not gc.loading
        offsets_0 = TopicPartition(CONSUMER_OFFSETS, 0)
        a = TopicPartition("a", 0)

        def follower_fetches() -> None:
            log = replicas.leader_partition_or_error(offsets_0).log
            assert log is not None
            leo = log.log_end_offset
            params = FetchParams(2, 0, 1, 1 << 20, FetchIsolation.LOG_END)
            read = FetchPartitionRead(offsets_0, leo, 0, 1 << 20)
            replicas.fetch_messages(params, [read], lambda _: None)

        async def commit(group: str, offset: int) -> ErrorCode:
            results = await gc.commit_offsets(group, -1, {a: OffsetCommitEntry(offset, -1, "")})
            return results[a]

        first = asyncio.ensure_future(commit("old", 10))
        await asyncio.sleep(0)
        follower_fetches()
        assert await first == ErrorCode.none
        clock.advance(RETENTION_MS + 1)

        # Both commits are appended and wait for broker 2.
        pending = [
            asyncio.ensure_future(commit("old", 20)),
            asyncio.ensure_future(commit("new", 5)),
        ]
        await asyncio.sleep(0)
        assert not any(p.done() for p in pending)
        expiry = asyncio.ensure_future(gc.expire_offsets())
        # Broker 2 fetches until the commits and whatever expiry appends (one group
        # after another, behind the commits) are acknowledged.
        for _ in range(10):
            await asyncio.sleep(0)
            follower_fetches()
            if expiry.done():
                break
        assert [await p for p in pending] == [ErrorCode.none, ErrorCode.none]
        written = await expiry

        # What this coordinator answers, and what the next one loads from the log.
        served = {g: gc.fetch_offsets(g, [a])[1][a] for g in ("old", "new")}
        assert {g: o.offset if o else None for g, o in served.items()} == {"old": 20, "new": 5}
        loaded = await gc.metadata_manager.read_groups(0)
        offsets = loaded.offsets
        assert {g: {tp: o.offset for tp, o in offs.items()} for g, offs in offsets.items()} == {
            "old": {a: 20},
            "new": {a: 5},
        }
        assert loaded.metadata == {}
        assert written == 0  # nothing had expired but the partition being committed
        await gc.close()

    asyncio.run(run())
