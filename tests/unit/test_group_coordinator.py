"""Group coordinator edges that need a fake clock: a real GroupCoordinator and
ReplicaManager, timers advanced by hand."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from moldau.clock import FakeClock
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_coordinator import GroupConfig, GroupCoordinator, JoinRequest
from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS, LoadedGroups
from moldau.coordinator.records import (
    GroupMetadataValue,
    OffsetAndMetadata,
    OffsetKey,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from moldau.protocol.control import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import (
    build_batch,
    build_end_txn_marker,
    compute_crc,
    iter_records,
    rebuild_batch,
)
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
        gc, timer = await _coordinator(tmp_path)
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


async def _coordinator(tmp_path: Path) -> tuple[GroupCoordinator, ManualTimer]:
    """A coordinator of one offsets partition, which it leads alone (so its group
    writes complete at once), loaded and empty."""
    clock = FakeClock()
    timer = ManualTimer(clock)
    replicas = ReplicaManager(
        1, LogManager([tmp_path], clock, 1), clock, timer, lambda t: LogConfig()
    )
    gc = GroupCoordinator(1, replicas, clock, timer, GroupConfig(num_partitions=1))
    state = LeaderAndIsrPartitionState(CONSUMER_OFFSETS, 0, 1, 1, 0, (1,), 0, (1,), is_new=True)
    replicas.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
    for _ in range(100):
        if not gc.loading:
            break
        await asyncio.sleep(0)
    assert not gc.loading
    return gc, timer


def test_a_restarted_static_leader_gets_the_group_back_without_a_rebalance(
    tmp_path: Path,
) -> None:
    """A restarted consumer's subscription bytes differ from its old ones (it owns no
    partitions now); as Kafka, the group stays stable and the leader is told to skip
    its assignor (JoinGroup v9), or before v9 not told that it leads."""

    async def run() -> None:
        gc, _ = await _coordinator(tmp_path)
        for version_9, instance in ((True, "leader-1"), (False, "leader-2")):
            group = GroupMetadata(
                instance, state=GroupState.STABLE, protocol_type="consumer",
                protocol_name="range", generation_id=4, leader_id="old",
            )  # fmt: skip
            for member_id, instance_id in (("old", instance), ("other", "follower")):
                member = MemberMetadata(
                    member_id,
                    instance_id,
                    "c",
                    "h",
                    SESSION_MS,
                    SESSION_MS,
                    "consumer",
                    [("range", b"owned partitions 0,1; generation 4")],
                )
                member.assignment = member_id.encode()
                group.add(member)
            gc.groups[instance] = group
            joined = await gc.join_group(
                JoinRequest(instance, "", instance, "c", "h", SESSION_MS, SESSION_MS,
                            "consumer", [("range", b"owns nothing")], True, version_9)
            )  # fmt: skip
            assert joined.error == ErrorCode.none
            assert (group.state, group.generation_id) == (GroupState.STABLE, 4)
            assert group.leader_id == joined.member_id
            if version_9:
                assert joined.skip_assignment
                assert joined.leader_id == joined.member_id
                assert {m for m, _, _ in joined.members} == {joined.member_id, "other"}
            else:
                assert not joined.skip_assignment
                assert (joined.leader_id, joined.members) == ("old", [])
            synced = await gc.sync_group(
                instance, 4, joined.member_id, instance, "consumer", "range", {}
            )
            assert (synced.error, synced.assignment) == (ErrorCode.none, b"old")
        await gc.close()

    asyncio.run(run())


def test_a_static_rejoin_whose_group_write_fails_keeps_the_old_member_id(
    tmp_path: Path,
) -> None:
    """The new member id is answered only once the group record naming it is written;
    if the write fails the member is told the error and the group keeps the old id,
    as Kafka reverts it, so the log and the coordinator agree on who the member is."""

    async def run() -> None:
        gc, _ = await _coordinator(tmp_path)
        group = GroupMetadata(
            "g", state=GroupState.STABLE, protocol_type="consumer", protocol_name="range",
            generation_id=3, leader_id="old",
        )  # fmt: skip
        member = MemberMetadata(
            "old", "instance-1", "c", "h", SESSION_MS, SESSION_MS, "consumer", [("range", b"x")]
        )
        member.assignment = b"p0"
        group.add(member)
        gc.groups["g"] = group
        real_append = gc.metadata_manager.append

        async def failing_append(group_id, records, on_written=None):  # type: ignore[no-untyped-def]
            if on_written is not None:
                on_written(ErrorCode.not_coordinator)
            return ErrorCode.not_coordinator

        gc.metadata_manager.append = failing_append  # type: ignore[method-assign]
        request = JoinRequest(
            "g", "", "instance-1", "c2", "h2", SESSION_MS, 2 * SESSION_MS, "consumer",
            [("range", b"y")], True, True,
        )  # fmt: skip
        joined = await gc.join_group(request)
        assert (joined.error, joined.member_id) == (ErrorCode.not_coordinator, "")
        assert list(group.members) == ["old"]
        assert group.static_member_id("instance-1") == "old"
        assert group.leader_id == "old"
        kept = group.members["old"]
        assert (kept.client_id, kept.rebalance_timeout_ms, kept.protocols) == (
            "c", SESSION_MS, [("range", b"x")],
        )  # fmt: skip
        assert gc.heartbeat("g", "old", "instance-1", 3) == ErrorCode.none

        gc.metadata_manager.append = real_append  # type: ignore[method-assign]
        joined = await gc.join_group(request)
        assert joined.error == ErrorCode.none and joined.member_id.startswith("instance-1-")
        assert list(group.members) == [joined.member_id]
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


OFFSETS_0 = TopicPartition(CONSUMER_OFFSETS, 0)
T0 = TopicPartition("t", 0)


def _offsets_partition_state(leader: int, epoch: int, isr: tuple[int, ...]) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState(
        CONSUMER_OFFSETS, 0, 1, leader, epoch, isr, epoch, (1, 2, 3), is_new=epoch == 0
    )
    return LeaderAndIsrRequest(0, 1, 1, (state,), {}, ())


def _commit(group: str, offset: int) -> tuple[bytes, bytes | None]:
    return (
        encode_offset_key(OffsetKey(group, T0.topic, T0.partition)),
        encode_offset_value(OffsetAndMetadata(offset, -1, "", 0)),
    )


def _generation(group: str, generation: int) -> tuple[bytes, bytes | None]:
    return (
        encode_group_key(group),
        encode_group_value(GroupMetadataValue("consumer", generation, None, None, 0, ())),
    )


async def _fail_over_to_broker_1(
    tmp_path: Path, batches: list[bytes], leader_hw: int
) -> GroupCoordinator:
    """Broker 1 follows broker 2 for __consumer_offsets-0 and has fetched `batches`,
    learning the high watermark `leader_hw`; then broker 2 dies and broker 1 leads,
    with broker 3 still in the ISR (so its HW stays until broker 3 fetches)."""
    clock = FakeClock()
    timer = ManualTimer(clock)
    replicas = ReplicaManager(
        1, LogManager([tmp_path], clock, 1), clock, timer, lambda t: LogConfig()
    )
    gc = GroupCoordinator(1, replicas, clock, timer, GroupConfig(num_partitions=1))
    replicas.become_leader_or_follower(_offsets_partition_state(2, 0, (1, 2, 3)))
    partition = replicas.get_partition(OFFSETS_0)
    assert partition is not None
    partition.append_records_to_follower(b"".join(batches), leader_hw, 0)
    replicas.become_leader_or_follower(_offsets_partition_state(1, 1, (1, 3)))
    assert partition.high_watermark == leader_hw  # broker 3 has not fetched yet
    for _ in range(100):
        if not gc.loading:
            break
        await asyncio.sleep(0)
    assert not gc.loading
    return gc


def test_a_new_coordinator_loads_what_its_old_one_acknowledged_above_its_hw(
    tmp_path: Path,
) -> None:
    """The old coordinator acknowledged the commit of 6 and generation 2 once every
    ISR member had them, but this follower learns the HW that covers them only on
    its next fetch, which the old leader's death prevents. The new coordinator
    answers 6 and generation 2 (Kafka loads up to the log end), not 5 and 1: its
    members would reprocess from 5 and be fenced as of an older generation."""

    async def run() -> None:
        batches = [
            build_batch([_generation("g", 1)], base_offset=0, partition_leader_epoch=0),
            build_batch([_commit("g", 5)], base_offset=1, partition_leader_epoch=0),
            build_batch([_generation("g", 2)], base_offset=2, partition_leader_epoch=0),
            build_batch([_commit("g", 6)], base_offset=3, partition_leader_epoch=0),
        ]
        gc = await _fail_over_to_broker_1(tmp_path, batches, leader_hw=2)
        error, committed = gc.fetch_offsets("g", [T0])
        assert error == ErrorCode.none
        assert committed[T0] is not None and committed[T0].offset == 6
        error, group = gc.describe_group("g")
        assert group is not None and group.generation_id == 2
        await gc.close()

    asyncio.run(run())


def test_a_batch_the_cleaner_cut_short_does_not_stall_the_load(tmp_path: Path) -> None:
    """A commit of two partitions is one batch; once the cleaner drops its last
    record (superseded by a later commit) the batch still spans both offsets, and a
    replica that fetched only that far has it at its log end. The load reads on
    from the batch's end (Kafka's nextOffset), not from after its last record:
    from inside the batch every read returned it again, for ever, and the group
    answered COORDINATOR_LOAD_IN_PROGRESS until the next failover."""

    async def run() -> None:
        t1 = TopicPartition("t", 1)
        both = build_batch(
            [_commit("g", 5), (encode_offset_key(OffsetKey("g", "t", 1)), _commit("g", 7)[1])],
            base_offset=0,
            partition_leader_epoch=0,
        )
        first_only = rebuild_batch(both, list(iter_records(both))[:1])
        gc = await _fail_over_to_broker_1(tmp_path, [first_only], leader_hw=2)
        error, committed = gc.fetch_offsets("g", [T0, t1])
        assert error == ErrorCode.none
        assert committed == {T0: OffsetAndMetadata(5, -1, "", 0), t1: None}
        await gc.close()

    asyncio.run(run())


def test_a_rebalance_completes_when_its_last_pending_member_joins(tmp_path: Path) -> None:
    """Members that start together: one of them got MEMBER_ID_REQUIRED while a
    rebalance began; the others have rejoined. Its join with the id it was given is
    the last one the rebalance waits for, and completes it at once (Kafka checks the
    join purgatory after every JoinGroup), not at the rebalance timeout of 300 s (Kafka's
    Java consumers, three starting at once, waited past a test's 20 s for it)."""

    async def run() -> None:
        gc, _ = await _coordinator(tmp_path)
        rebalance_ms = 300_000

        def join(member_id: str) -> JoinRequest:
            return JoinRequest(
                "g", member_id, None, "c", "h", rebalance_ms, SESSION_MS, "consumer",
                [("roundrobin", b"x")], True,
            )  # fmt: skip

        group = GroupMetadata(
            "g", state=GroupState.STABLE, protocol_type="consumer",
            protocol_name="roundrobin", generation_id=1, leader_id="a",
        )  # fmt: skip
        group.add(
            MemberMetadata(
                "a", None, "c", "h", rebalance_ms, SESSION_MS, "consumer", [("roundrobin", b"x")]
            )
        )
        gc.groups["g"] = group
        c_id = (await gc.join_group(join(""))).member_id  # MEMBER_ID_REQUIRED: c is pending
        b_id = (await gc.join_group(join(""))).member_id
        b = asyncio.ensure_future(gc.join_group(join(b_id)))  # a rebalance begins
        a = asyncio.ensure_future(gc.join_group(join("a")))  # a rejoins
        await asyncio.sleep(0)
        assert group.state == GroupState.PREPARING_REBALANCE and not (a.done() or b.done())
        c = asyncio.ensure_future(gc.join_group(join(c_id)))  # the last one the group awaits
        for _ in range(10):
            await asyncio.sleep(0)
        assert a.done() and b.done() and c.done(), group.state
        results = [t.result() for t in (a, b, c)]
        assert [r.error for r in results] == [ErrorCode.none] * 3
        assert {r.generation_id for r in results} == {2}
        await gc.close()

    asyncio.run(run())


def test_a_load_of_an_earlier_leadership_neither_installs_nor_ends_the_current_one(
    tmp_path: Path,
) -> None:
    """An offsets partition led here, then elsewhere, then here again while the first
    load still reads: the first load's groups (read before the others' commits) are
    not installed, and the partition stays loading until the second load is done."""

    async def run() -> None:
        gc, _ = await _coordinator(tmp_path)
        p = gc.partition_for("g")
        tp = TopicPartition(CONSUMER_OFFSETS, p)
        first_read, second_read = asyncio.Event(), asyncio.Event()
        reads: list[int] = []

        def offsets(n: int) -> LoadedGroups:
            return LoadedGroups({"g": {TopicPartition("t", 0): OffsetAndMetadata(n, -1, "", 0)}})

        async def read_groups(partition: int) -> LoadedGroups:
            reads.append(partition)
            if len(reads) == 1:
                await first_read.wait()
                return offsets(5)  # what the log held before the other leader's commits
            await second_read.wait()
            return offsets(9)

        gc.metadata_manager.read_groups = read_groups  # type: ignore[method-assign,assignment]
        gc._on_leadership_change(tp, False)
        gc._on_leadership_change(tp, True)  # load 1 starts
        await asyncio.sleep(0)
        gc._on_leadership_change(tp, False)  # led elsewhere: commits offset 9 there
        gc._on_leadership_change(tp, True)  # load 2 starts
        await asyncio.sleep(0)
        first_read.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert "g" not in gc.groups, "the first load installed what it read"
        assert p in gc.loading, "the first load ended the second's loading"
        second_read.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert p not in gc.loading
        assert gc.groups["g"].offsets[TopicPartition("t", 0)].offset == 9
        await gc.close()

    asyncio.run(run())


def test_the_load_skips_transaction_markers(tmp_path: Path) -> None:
    """A transaction's commit marker (a control batch, written to __consumer_offsets
    when a transaction committed offsets) is not a group record: its key is a control
    key, which read as an offset key broke the load. It is passed over, as Kafka's
    loader does (and step 9 will act on it)."""

    async def run() -> None:
        marker = bytearray(
            build_batch(
                [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],  # COMMIT, epoch 0
                base_offset=1,
                producer_id=7,
                producer_epoch=0,
                partition_leader_epoch=0,
            )
        )
        attributes = struct.unpack_from(">h", marker, 21)[0] | 0x10 | 0x20  # txn, control
        struct.pack_into(">h", marker, 21, attributes)
        struct.pack_into(">I", marker, 17, compute_crc(marker))
        batches = [
            build_batch([_commit("g", 5)], base_offset=0, partition_leader_epoch=0),
            bytes(marker),
            build_batch([_commit("g", 6)], base_offset=2, partition_leader_epoch=0),
        ]
        gc = await _fail_over_to_broker_1(tmp_path, batches, leader_hw=3)
        error, committed = gc.fetch_offsets("g", [T0])
        assert error == ErrorCode.none
        assert committed[T0] is not None and committed[T0].offset == 6
        await gc.close()

    asyncio.run(run())


def _txn_commit(group: str, offset: int, producer_id: int, base_offset: int) -> bytes:
    return build_batch(
        [_commit(group, offset)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=0,
        partition_leader_epoch=0,
        transactional=True,
    )


def _marker(producer_id: int, commit: bool, base_offset: int) -> bytes:
    marker = bytearray(build_end_txn_marker(producer_id, 0, 0, commit, timestamp=0))
    struct.pack_into(">q", marker, 0, base_offset)
    struct.pack_into(">i", marker, 12, 0)  # partition leader epoch: outside the CRC
    return bytes(marker)


def test_offsets_of_transactions_count_from_their_commit_marker_on_load(tmp_path: Path) -> None:
    """What a new coordinator reads: offsets committed in a transaction count once its
    commit marker is in, never if it aborted, and stay pending (a consumer that
    requires stable offsets waits) while its end is not in the log; a plain commit
    written after a transaction's offsets wins over them."""

    async def run() -> None:
        t1, t2 = TopicPartition("t", 1), TopicPartition("t", 2)

        def commit_of(tp: TopicPartition, offset: int) -> tuple[bytes, bytes]:
            return (
                encode_offset_key(OffsetKey("g", tp.topic, tp.partition)),
                _commit("g", offset)[1],
            )

        batches = [
            _txn_commit("g", 10, producer_id=7, base_offset=0),  # T0 = 10 in txn 7
            _txn_commit("g", 20, producer_id=8, base_offset=1),  # T0 = 20 in txn 8
            build_batch([commit_of(t1, 3)], base_offset=2, partition_leader_epoch=0),
            build_batch(
                [commit_of(t2, 30)],
                base_offset=3,
                producer_id=9,
                producer_epoch=0,
                partition_leader_epoch=0,
                transactional=True,
            ),
            _marker(7, commit=True, base_offset=4),
            _marker(8, commit=False, base_offset=5),
        ]
        gc = await _fail_over_to_broker_1(tmp_path, batches, leader_hw=6)
        error, committed = gc.fetch_offsets("g", [T0, t1, t2])
        assert error == ErrorCode.none
        assert committed[T0] is not None and committed[T0].offset == 10  # 8 aborted
        assert committed[t1] is not None and committed[t1].offset == 3
        assert committed[t2] is None  # txn 9 has not ended
        assert gc.unstable_offsets("g", [T0, t1, t2]) == {t2}
        gc.on_transaction_completed(9, [0], committed=True)
        _, committed = gc.fetch_offsets("g", [t2])
        assert committed[t2] is not None and committed[t2].offset == 30
        assert gc.unstable_offsets("g", [T0, t1, t2]) == set()
        await gc.close()

    asyncio.run(run())


def test_a_transaction_committed_after_a_plain_commit_does_not_undo_a_later_one() -> None:
    """Kafka's rule, by position in the log: a transaction's offset replaces the
    committed one only if its record was written after it."""
    group = GroupMetadata("g")
    value = OffsetAndMetadata
    entries = group.prepare_txn_offset_commit(7, {T0: value(10, -1, "", 0)})
    group.on_txn_offset_commit_append(7, entries, position=5)
    group.complete_offset_commit({T0: value(11, -1, "", 0)}, written=True, position=6)
    group.complete_txn_offset_commit(7, committed=True)
    assert group.offsets[T0].offset == 11
    entries = group.prepare_txn_offset_commit(8, {T0: value(12, -1, "", 0)})
    group.on_txn_offset_commit_append(8, entries, position=7)
    assert group.has_pending_offset_commit(T0)
    group.complete_txn_offset_commit(8, committed=True)
    assert group.offsets[T0].offset == 12 and not group.has_pending_offset_commit(T0)
    failed = group.prepare_txn_offset_commit(9, {T0: value(13, -1, "", 0)})
    group.on_txn_offset_commit_append(9, failed, position=-1)  # the append failed
    assert not group.pending_txn_offsets and not group.has_pending_offset_commit(T0)
