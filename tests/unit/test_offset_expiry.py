"""Offset retention (offsets.retention.minutes) as Kafka applies it, on a real
GroupCoordinator and ReplicaManager with a fake clock."""

from __future__ import annotations

from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from moldau.coordinator.records import OffsetAndMetadata
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import ReplicaManager
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
