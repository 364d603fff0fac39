"""ReplicaManager when a log directory fails (Kafka's handleLogDirFailure): its
partitions answer KAFKA_STORAGE_ERROR, waiting requests answer at once, the other
directory's partitions keep serving, and a LeaderAndIsr for a partition whose log
was there is refused rather than given a new empty log elsewhere. And a log is
known by its topic id: one of a deleted topic is never served as a new topic's."""

from __future__ import annotations

import errno
import uuid
from functools import partial
from pathlib import Path

from moldau.clock import FakeClock
from moldau.protocol.control import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from moldau.protocol.errors import ErrorCode
from moldau.protocol.produce import ProducePartitionResponse
from moldau.protocol.records import build_batch
from moldau.replication.partition import FetchIsolation
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import FetchParams, FetchPartitionRead, ReplicaManager
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from moldau.storage.partition_name import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def leader_and_isr(
    *tps: TopicPartition,
    is_new: bool = True,
    leader_epoch: int = 0,
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> LeaderAndIsrRequest:
    states = tuple(
        LeaderAndIsrPartitionState(
            tp.topic, tp.partition, 1, 1, leader_epoch, (1,), 0, (1,), is_new=is_new
        )
        for tp in tps
    )
    return LeaderAndIsrRequest(0, 1, 1, states, topic_ids or {}, ())


def produce(rm: ReplicaManager, tp: TopicPartition) -> ProducePartitionResponse:
    got: dict[TopicPartition, ProducePartitionResponse] = {}
    rm.append_records(1, 1000, {tp: memoryview(build_batch([(b"k", b"v")]))}, got.update)
    return got[tp]


def test_a_failed_directory_takes_only_its_partitions_offline(tmp_path: Path) -> None:
    clock = FakeClock()
    dirs = [tmp_path / "one", tmp_path / "two"]
    logs = LogManager(dirs, clock, 1)
    logs.startup(lambda _: LogConfig(), "cluster")
    rm = ReplicaManager(1, logs, clock, ManualTimer(clock), lambda _: LogConfig())
    rm.startup()
    # Each new log goes to the directory with the fewest: find where each went.
    rm.become_leader_or_follower(leader_and_isr(A0, A1, B0))
    where = {tp: logs.logs[tp].log_dir for tp in (A0, A1, B0)}
    failed = where[A0]
    on_failed = {tp for tp, d in where.items() if d == failed}
    healthy = next(tp for tp, d in where.items() if d != failed)

    # A consumer waits on every partition; the failed directory's come first, the
    # one taken offline last listed first.
    answered: list[list[FetchPartitionRead]] = []
    params = FetchParams(-1, 10_000, 1 << 20, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    order = [tp for tp in (A0, A1, B0) if tp in on_failed]
    reads = [FetchPartitionRead(tp, 0, -1, 1 << 20) for tp in [*reversed(order), healthy]]
    rm.fetch_messages(params, reads, answered.append)
    assert answered == []

    logs.failure_channel.fail(failed, "a test", OSError(errno.EIO, "Input/output error"))
    assert set(rm.handle_log_dir_failure(failed)) == on_failed
    # The waiting fetch answered at once, with Kafka's code for the failed ones.
    [got] = answered
    assert {r.tp: r.error for r in got} == {
        **{tp: ErrorCode.kafka_storage_error for tp in on_failed},
        healthy: ErrorCode.none,
    }
    for tp in on_failed:
        assert produce(rm, tp).error_code == ErrorCode.kafka_storage_error
    assert produce(rm, healthy).error_code == ErrorCode.none
    # The controller asks again (a LeaderAndIsr probe): refused per partition, and
    # no new log is made for them in the healthy directory.
    response = rm.become_leader_or_follower(leader_and_isr(*on_failed, healthy, is_new=False))
    codes = {(e.topic, e.partition): e.error_code for e in response.partition_errors}
    assert codes == {
        **{(tp.topic, tp.partition): ErrorCode.kafka_storage_error for tp in on_failed},
        (healthy.topic, healthy.partition): ErrorCode.none,
    }
    assert set(logs.logs) == {healthy}
    logs.shutdown()


def test_a_directory_failing_after_a_log_was_created_in_it_leaves_the_others_synced(
    tmp_path: Path,
) -> None:
    # A LeaderAndIsr creates logs in both directories, then one fails (out of file
    # descriptors, say) before the new logs are synced: the sync skips it.
    logs = LogManager([tmp_path / "one", tmp_path / "two"], FakeClock(), 1)
    logs.startup(lambda _: LogConfig(), "cluster")
    a0, a1 = (logs.get_or_create_log(tp, LogConfig()) for tp in (A0, A1))
    assert a0.log_dir != a1.log_dir
    logs.failure_channel.fail(a0.log_dir, "a test", OSError(errno.EMFILE, "Too many open files"))
    logs.sync_created_logs()
    assert not logs.failure_channel.is_offline(a1.log_dir)
    logs.shutdown()


def test_work_in_a_directory_already_offline_is_skipped_not_an_error(tmp_path: Path) -> None:
    # Checkpoints, deleted logs' removal and the shutdown marker all go through
    # io_or_offline; on a directory that failed earlier each failed the caller with
    # "generator didn't yield" instead of leaving that directory alone.
    logs = LogManager([tmp_path / "one", tmp_path / "two"], FakeClock(), 1)
    logs.startup(lambda _: LogConfig(), "cluster")
    a0, a1 = (logs.get_or_create_log(tp, LogConfig()) for tp in (A0, A1))
    logs.failure_channel.fail(a0.log_dir, "a test", OSError(errno.EIO, "Input/output error"))
    ran: list[Path] = []
    for d in (a0.log_dir, a1.log_dir):
        logs.io_or_offline(d, "a test", partial(ran.append, d))
    assert ran == [a1.log_dir]
    logs.shutdown()
    assert (a1.log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not (a0.log_dir / CLEAN_SHUTDOWN_FILE).exists()


def test_a_log_of_a_deleted_topic_of_the_same_name_is_set_aside(tmp_path: Path) -> None:
    # Topic "a" (id OLD) led in epoch 5 has records; its StopReplica never came. The
    # controller now names this broker leader of a new topic "a" (id NEW, epoch 0).
    old, new = uuid.uuid4(), uuid.uuid4()
    clock = FakeClock()

    def start() -> tuple[LogManager, ReplicaManager]:
        logs = LogManager([tmp_path], clock, 1)
        logs.startup(lambda _: LogConfig(), "cluster")
        rm = ReplicaManager(1, logs, clock, ManualTimer(clock), lambda _: LogConfig())
        rm.startup()
        return logs, rm

    def leads(rm: ReplicaManager, topic_id: uuid.UUID, epoch: int) -> list[ErrorCode]:
        request = leader_and_isr(A0, leader_epoch=epoch, topic_ids={"a": topic_id})
        return [e.error_code for e in rm.become_leader_or_follower(request).partition_errors]

    def strays() -> list[Path]:
        return [p for p in tmp_path.iterdir() if p.name.endswith("-stray")]

    # While the broker runs: the new topic's epoch 0 is not taken for a stale one.
    logs, rm = start()
    assert leads(rm, old, 5) == [ErrorCode.none]
    logs.checkpoint()  # the broker's periodic checkpoint writes the topic id too
    assert (tmp_path / "a-0" / "partition.metadata").read_text().startswith("version: 0\n")
    assert [produce(rm, A0).base_offset for _ in range(3)] == [0, 1, 2]
    assert leads(rm, new, 0) == [ErrorCode.none]
    assert produce(rm, A0).base_offset == 0
    assert logs.logs[A0].topic_id == new
    assert len(strays()) == 1
    logs.shutdown()

    # After a restart, from what partition.metadata says: the old log is known as
    # such, the new one as new.
    logs, rm = start()
    assert logs.logs[A0].topic_id == new
    assert leads(rm, new, 0) == [ErrorCode.none]
    assert produce(rm, A0).base_offset == 1
    assert leads(rm, old, 7) == [ErrorCode.none]  # and back: the same rule
    assert produce(rm, A0).base_offset == 0
    assert len(strays()) == 2
    logs.shutdown()


def test_waiting_acks_all_produces_answer_when_a_leader_and_isr_meets_a_failed_dir(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    logs = LogManager([tmp_path], clock, 1)
    logs.startup(lambda _: LogConfig(), "cluster")
    rm = ReplicaManager(1, logs, clock, ManualTimer(clock), lambda _: LogConfig())
    rm.startup()
    state = LeaderAndIsrPartitionState("a", 0, 1, 1, 0, (1, 2), 0, (1, 2), is_new=True)
    rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
    answered: list[dict[TopicPartition, ProducePartitionResponse]] = []
    batch = memoryview(build_batch([(b"k", b"v")]))
    rm.append_records(-1, 30_000, {A0: batch}, answered.append)
    assert answered == []  # waiting for broker 2
    # The directory fails; before the broker has handled it, the controller's next
    # LeaderAndIsr meets the failure.
    logs.failure_channel.fail(tmp_path, "a test", OSError(errno.EIO, "Input/output error"))
    later = LeaderAndIsrPartitionState("a", 0, 1, 1, 1, (1, 2), 1, (1, 2))
    response = rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (later,), {}, ()))
    assert [e.error_code for e in response.partition_errors] == [ErrorCode.kafka_storage_error]
    [got] = answered
    assert got[A0].error_code == ErrorCode.kafka_storage_error
