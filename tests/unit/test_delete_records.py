"""DeleteRecords on the leader (Kafka's deleteRecordsOnLeader, DelayedDeleteRecords,
lowWatermarkIfLeader) and DescribeLogDirs (describeLogDirs): a ReplicaManager whose
followers are played by fetches carrying their log start offsets, on a fake clock."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.control import LeaderAndIsrPartitionState, LeaderAndIsrRequest
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.replication.delayed import DeleteRecordsPartitionStatus
from moldau.replication.partition import FetchIsolation
from moldau.replication.purgatory import ManualTimer
from moldau.replication.replica_manager import (
    FetchParams,
    FetchPartitionRead,
    LogDirPartition,
    ReplicaManager,
)
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

A0, B0 = TopicPartition("a", 0), TopicPartition("b", 0)
COMPACTED = "compacted"
Result = dict[TopicPartition, tuple[ErrorCode, int]]


class Setup:
    def __init__(self, tmp_path: Path, replicas: tuple[int, ...] = (1, 2, 3)) -> None:
        self.clock = FakeClock()
        self.timer = ManualTimer(self.clock)
        self.alive = set(replicas)

        def config(topic: str) -> LogConfig:
            if topic == COMPACTED:
                return LogConfig(compact=True, delete=False)
            return LogConfig(segment_bytes=200)

        self.logs = LogManager([tmp_path / "one", tmp_path / "two"], self.clock, 1)
        self.logs.startup(config, "cluster")
        self.rm = ReplicaManager(
            1, self.logs, self.clock, self.timer, config, is_broker_alive=self.alive.__contains__
        )
        self.rm.startup()
        self.replicas = replicas

    def lead(self, *tps: TopicPartition) -> None:
        states = tuple(
            LeaderAndIsrPartitionState(
                tp.topic, tp.partition, 1, 1, 0, self.replicas, 0, self.replicas, is_new=True
            )
            for tp in tps
        )
        self.rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, states, {}, ()))

    def produce(self, tp: TopicPartition, n: int) -> None:
        for _ in range(n):
            got: dict[TopicPartition, object] = {}
            batch = build_batch([(b"k", b"v" * 50)], timestamp=self.clock.milliseconds())
            self.rm.append_records(1, 1000, {tp: memoryview(batch)}, got.update)

    def follower_fetch(self, replica: int, tp: TopicPartition, log_start: int) -> None:
        """Follower `replica` fetches from the leader's log end with its log start."""
        end = self.rm.partitions[tp].log.log_end_offset  # type: ignore[union-attr]
        params = FetchParams(replica, 0, 1, 1 << 20, FetchIsolation.LOG_END)
        read = FetchPartitionRead(tp, end, -1, 1 << 20, log_start_offset=log_start)
        self.rm.fetch_messages(params, [read], lambda _: None)

    def delete(self, offsets: dict[TopicPartition, int], timeout_ms: int = 1000) -> list[Result]:
        """Answers land in the returned list (empty while the request waits)."""
        answers: list[Result] = []

        def respond(status: dict[TopicPartition, DeleteRecordsPartitionStatus]) -> None:
            answers.append({tp: (s.error, s.low_watermark) for tp, s in status.items()})

        self.rm.delete_records(timeout_ms, offsets, respond)
        return answers


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def caught_up(s: Setup, tp: TopicPartition, log_start: int = 0) -> None:
    """Both followers fetch to the leader's end: the HW reaches it."""
    s.follower_fetch(2, tp, log_start)
    s.follower_fetch(3, tp, log_start)


def test_the_answer_waits_until_every_live_follower_has_moved_its_log_start(
    setup: Setup,
) -> None:
    s = setup
    s.lead(A0)
    s.produce(A0, 10)
    caught_up(s, A0)
    assert s.rm.partitions[A0].high_watermark == 10

    answers = s.delete({A0: 6})
    assert answers == []  # the followers still start at 0
    lg = s.rm.partitions[A0].log
    assert lg is not None and lg.log_start_offset == 6  # the leader's moved at once
    s.follower_fetch(2, A0, 6)
    assert answers == []
    s.follower_fetch(3, A0, 6)
    assert answers == [{A0: (ErrorCode.none, 6)}]


def test_a_follower_that_does_not_catch_up_times_the_request_out_with_the_leaders_start(
    setup: Setup,
) -> None:
    s = setup
    s.lead(A0)
    s.produce(A0, 10)
    caught_up(s, A0)
    answers = s.delete({A0: 4}, timeout_ms=500)
    s.follower_fetch(2, A0, 4)
    s.timer.advance(499)
    assert answers == []
    s.timer.advance(1)
    # Kafka answers REQUEST_TIMED_OUT with the low watermark of its own deletion.
    assert answers == [{A0: (ErrorCode.request_timed_out, 0)}]
    assert s.rm.delete_records_purgatory.watched() == 0


def test_a_dead_followers_log_start_does_not_count(setup: Setup) -> None:
    s = setup
    s.lead(A0)
    s.produce(A0, 10)
    caught_up(s, A0)
    s.alive.discard(3)
    s.follower_fetch(2, A0, 0)
    answers = s.delete({A0: 5})
    assert answers == []
    s.follower_fetch(2, A0, 5)
    assert answers == [{A0: (ErrorCode.none, 5)}]


def test_minus_one_means_the_high_watermark_and_a_lone_replica_answers_at_once(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path, replicas=(1,))
    s.lead(A0)
    s.produce(A0, 7)
    assert s.delete({A0: -1}) == [{A0: (ErrorCode.none, 7)}]
    # Nothing below the new start can be read, and ListOffsets' earliest answers it.
    lg = s.rm.partitions[A0].log
    assert lg is not None and lg.log_start_offset == 7
    params = FetchParams(-1, 0, 1, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    [read] = s.rm.read_from_local_log(params, [FetchPartitionRead(A0, 3, -1, 1 << 20)])
    assert read.error == ErrorCode.offset_out_of_range
    found = s.rm.partitions[A0].fetch_offset_for_timestamp(
        -2, FetchIsolation.HIGH_WATERMARK, -1, True
    )
    assert found is not None and found[1] == 7
    # Deleting below the start again moves nothing and answers the current start.
    assert s.delete({A0: 2}) == [{A0: (ErrorCode.none, 7)}]


def test_bad_offsets_policy_and_leadership_are_answered_per_partition(tmp_path: Path) -> None:
    s = Setup(tmp_path, replicas=(1,))
    c0 = TopicPartition(COMPACTED, 0)
    s.lead(A0, B0, c0)
    s.produce(A0, 5)
    s.produce(B0, 5)
    follower = TopicPartition("f", 0)
    state = LeaderAndIsrPartitionState("f", 0, 1, 2, 0, (1, 2), 0, (1, 2), is_new=True)
    s.rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
    answers = s.delete(
        {
            A0: 6,  # above the HW (5)
            B0: -2,  # below 0 and not -1
            c0: 0,  # cleanup.policy=compact only
            follower: 0,  # led by broker 2
            TopicPartition("missing", 0): 0,  # no replica here
        }
    )
    assert answers == [
        {
            A0: (ErrorCode.offset_out_of_range, -1),
            B0: (ErrorCode.offset_out_of_range, -1),
            c0: (ErrorCode.policy_violation, -1),
            follower: (ErrorCode.not_leader_or_follower, -1),
            TopicPartition("missing", 0): (ErrorCode.not_leader_or_follower, -1),
        }
    ]
    for tp in (A0, B0):
        lg = s.rm.partitions[tp].log
        assert lg is not None and lg.log_start_offset == 0


def test_losing_leadership_while_waiting_answers_not_leader(setup: Setup) -> None:
    s = setup
    s.lead(A0)
    s.produce(A0, 10)
    caught_up(s, A0)
    answers = s.delete({A0: 3})
    state = LeaderAndIsrPartitionState("a", 0, 1, 2, 1, (1, 2, 3), 1, (1, 2, 3))
    s.rm.become_leader_or_follower(LeaderAndIsrRequest(0, 1, 1, (state,), {}, ()))
    assert answers == [{A0: (ErrorCode.not_leader_or_follower, -1)}]


def test_segments_wholly_below_the_new_start_go_at_the_next_retention_check(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path, replicas=(1,))
    s.lead(A0)
    s.produce(A0, 12)  # about 120 bytes a batch, 200-byte segments: one batch each
    lg = s.rm.partitions[A0].log
    assert lg is not None
    bases = [seg.base_offset for seg in lg.segments]
    assert len(bases) > 5
    size_before = lg.size_in_bytes()
    assert s.delete({A0: 5}) == [{A0: (ErrorCode.none, 5)}]
    assert [seg.base_offset for seg in lg.segments] == bases  # not yet
    s.logs.cleanup_logs(s.rm.high_watermark)
    assert lg.segments[0].base_offset == max(b for b in bases if b <= 5)
    assert lg.size_in_bytes() < size_before
    # The log start offset checkpoint carries the new start across a restart.
    s.logs.shutdown()
    again = LogManager([tmp_path / "one", tmp_path / "two"], s.clock, 1)
    again.startup(lambda _: LogConfig(segment_bytes=200), "cluster")
    assert again.logs[A0].log_start_offset == 5
    again.shutdown()


def test_describe_log_dirs_tells_each_dir_its_partitions_sizes_and_space(setup: Setup) -> None:
    s = setup
    s.lead(A0, B0)
    s.produce(A0, 3)
    s.produce(B0, 1)
    dirs = s.rm.describe_log_dirs(None)
    assert [d.path for d in dirs] == s.logs.log_dirs
    assert all(d.error == ErrorCode.none and d.total_bytes >= d.usable_bytes > 0 for d in dirs)
    found = {(d.path, topic): parts for d in dirs for topic, parts in d.topics.items()}
    for tp in (A0, B0):
        lg = s.logs.logs[tp]
        assert found[(lg.log_dir, tp.topic)] == [
            LogDirPartition(tp.partition, lg.size_in_bytes(), 0)
        ]
    assert s.logs.logs[A0].size_in_bytes() > s.logs.logs[B0].size_in_bytes() > 0

    # A filter leaves out other partitions and topics with none left.
    only = s.rm.describe_log_dirs({A0, TopicPartition("a", 7)})
    assert [list(d.topics) for d in only if d.topics] == [["a"]]
    assert sum(len(d.topics) for d in only) == 1

    # A failed directory answers KAFKA_STORAGE_ERROR and nothing else.
    failed = s.logs.logs[A0].log_dir
    s.logs.failure_channel.fail(failed, "a test", OSError(errno.EIO, "Input/output error"))
    s.rm.handle_log_dir_failure(failed)
    after = {d.path: d for d in s.rm.describe_log_dirs(None)}
    assert after[failed].error == ErrorCode.kafka_storage_error
    assert after[failed].topics == {} and after[failed].total_bytes == -1
    assert all(d.error == ErrorCode.none for p, d in after.items() if p != failed)
