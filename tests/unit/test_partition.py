"""The leader's ISR and high-watermark rules (Kafka's Partition), on a fake clock:
the HW is the minimum log end over the maximal ISR and never moves back; a follower
that keeps fetching under steady load stays in the ISR, one that stops leaves it
after replica.lag.time.max.ms; a caught-up follower joins; ISR changes take effect
when the controller confirms them (AlterPartition), and its refusals are handled as
Kafka handles them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.control import (
    AlterPartitionItem,
    AlterPartitionResult,
    LeaderAndIsrPartitionState,
)
from moldau.protocol.errors import ErrorCode, NotEnoughReplicasError
from moldau.protocol.records import build_batch
from moldau.replication.isr import (
    CommittedIsr,
    PendingExpandIsr,
    PendingShrinkIsr,
)
from moldau.replication.partition import Partition
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

TP = TopicPartition("t", 0)
LAG_MS = 10_000
LEADER = 1


class Controller:
    """Stands in for the controller's side of AlterPartition: records proposals;
    the test answers them."""

    def __init__(self) -> None:
        self.proposals: list[tuple[AlterPartitionItem, Callable[[AlterPartitionResult], None]]] = []

    def submit(
        self, item: AlterPartitionItem, on_result: Callable[[AlterPartitionResult], None]
    ) -> None:
        self.proposals.append((item, on_result))

    def accept(self) -> AlterPartitionItem:
        item, on_result = self.proposals.pop(0)
        result = AlterPartitionResult(
            "t", 0, ErrorCode.none, LEADER, item.leader_epoch, item.new_isr,
            item.partition_epoch + 1,
        )  # fmt: skip
        on_result(result)
        return item

    def refuse(self, error: ErrorCode) -> None:
        _, on_result = self.proposals.pop(0)
        on_result(AlterPartitionResult("t", 0, error))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def controller() -> Controller:
    return Controller()


def leader(
    tmp_path: Path,
    clock: FakeClock,
    controller: Controller,
    isr: tuple[int, ...] = (1, 2, 3),
    min_isr: int = 1,
) -> Partition:
    p = Partition(
        TP, LEADER, LogManager([tmp_path], clock, LEADER),
        lambda _: LogConfig(min_insync_replicas=min_isr), clock, LAG_MS, controller,
    )  # fmt: skip
    moved: list[Partition] = []
    p.on_high_watermark_moved = moved.append
    p.make_leader(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, isr, 0, (1, 2, 3), is_new=True),
        None,
        None,
    )
    return p


def append(p: Partition, n: int = 1) -> int:
    """n batches of 2 records; returns the leader's log end offset."""
    for _ in range(n):
        p.append_records_to_leader(memoryview(build_batch([(b"k", b"v")] * 2)), 1)
    assert p.log is not None
    return p.log.log_end_offset


def fetch(p: Partition, replica: int, offset: int, clock: FakeClock) -> bool:
    return p.update_follower_fetch_state(replica, offset, 0, clock.monotonic_ms())


def test_the_hw_is_the_lowest_log_end_in_the_isr_and_never_moves_back(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller)
    leo = append(p, 3)
    assert p.high_watermark == 0  # followers not heard from in this epoch
    assert fetch(p, 2, leo, clock) is False
    assert fetch(p, 3, 2, clock) is True and p.high_watermark == 2
    assert fetch(p, 3, leo, clock) is True and p.high_watermark == leo
    # A follower that comes back from further behind (it restarted) does not pull
    # the HW back.
    assert fetch(p, 3, 2, clock) is False and p.high_watermark == leo


def test_a_follower_fetching_under_steady_load_stays_in_the_isr(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    """The leader's log end moves between every two fetches, so the follower is
    never exactly at it; it fetched at least to where the log end was at its
    previous fetch, and that is caught up (Kafka's lastFetchLeaderLogEndOffset)."""
    p = leader(tmp_path, clock, controller, isr=(1, 2))
    previous_leo = append(p)
    for _ in range(50):
        leo = append(p)  # produce lands between the follower's fetches
        fetch(p, 2, previous_leo, clock)
        previous_leo = leo
        clock.advance(LAG_MS // 4)
        p.maybe_shrink_isr()
    assert controller.proposals == []
    assert p.isr == {1, 2}


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller)
    leo = append(p, 2)
    fetch(p, 2, leo, clock)
    fetch(p, 3, leo, clock)
    assert p.high_watermark == leo
    leo = append(p)
    clock.advance(LAG_MS)
    fetch(p, 2, leo, clock)
    p.maybe_shrink_isr()
    assert controller.proposals == []  # exactly the lag time: still in
    clock.advance(1)
    p.maybe_shrink_isr()
    [(item, _)] = controller.proposals
    assert (item.new_isr, item.leader_epoch, item.partition_epoch) == ((1, 2), 1, 0)
    # Until the controller confirms, the leaving follower still holds the HW back
    # and nothing else is proposed.
    assert isinstance(p.isr_state, PendingShrinkIsr) and p.isr == {1, 2, 3}
    assert p.high_watermark < leo
    p.maybe_shrink_isr()
    assert len(controller.proposals) == 1
    moved: list[Partition] = []
    p.on_high_watermark_moved = moved.append
    controller.accept()
    assert p.isr_state == CommittedIsr(frozenset({1, 2})) and p.partition_epoch == 1
    assert p.high_watermark == leo and moved == [p]


def test_a_follower_that_catches_up_joins_and_counts_at_once(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller, isr=(1, 2))
    leo = append(p, 2)
    fetch(p, 2, leo, clock)
    assert p.high_watermark == leo
    fetch(p, 3, leo - 2, clock)  # below the HW: not in sync yet
    assert controller.proposals == []
    fetch(p, 3, leo, clock)
    [(item, _)] = controller.proposals
    assert item.new_isr == (1, 2, 3)
    assert isinstance(p.isr_state, PendingExpandIsr)
    # While the expansion is in flight the new member already counts for the HW.
    new_leo = append(p)
    fetch(p, 2, new_leo, clock)
    assert p.high_watermark == leo
    controller.accept()
    assert p.isr == {1, 2, 3}
    assert fetch(p, 3, new_leo, clock) and p.high_watermark == new_leo


def test_a_caught_up_follower_outside_the_isr_joins_under_steady_load(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    """Follower 3 fetches up to where the log ended at its previous fetch, as a
    healthy follower under load does, while follower 2 keeps the HW at the log end.
    The HW waits for 3 (it is caught up), so 3 reaches it and joins; without the
    wait 3 would trail the HW by one produce for as long as the load lasts, and
    acks=all would be answered by fewer replicas than there are."""
    p = leader(tmp_path, clock, controller, isr=(1, 2))
    clock.advance(2 * LAG_MS)
    leo = append(p)
    fetch(p, 2, leo, clock)
    fetch(p, 3, 0, clock)  # far behind at first: not caught up, holds nothing back
    leo = append(p)
    fetch(p, 2, leo, clock)
    assert p.high_watermark == leo
    for _ in range(5):
        previous_leo, leo = leo, append(p)
        fetch(p, 2, leo, clock)
        fetch(p, 3, previous_leo, clock)
        clock.advance(100)
        if controller.proposals:
            break
    [(item, _)] = controller.proposals
    assert item.new_isr == (1, 2, 3)
    assert p.high_watermark == previous_leo < leo


def test_a_follower_of_a_dead_broker_outside_the_isr_does_not_hold_the_hw(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller, isr=(1, 2))
    p.is_broker_alive = lambda broker_id: broker_id != 3
    clock.advance(2 * LAG_MS)
    leo = append(p)
    fetch(p, 2, leo, clock)
    fetch(p, 3, 0, clock)
    for _ in range(3):
        previous_leo, leo = p.high_watermark, append(p)
        fetch(p, 3, previous_leo, clock)
        fetch(p, 2, leo, clock)
        assert p.high_watermark == leo
    assert controller.proposals == []


def test_a_follower_joins_only_with_everything_from_before_this_leader_epoch(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller, isr=(1,))
    assert p.log is not None
    append(p, 3)
    # A new leader epoch starts at the current log end.
    p.make_leader(LeaderAndIsrPartitionState("t", 0, 1, LEADER, 2, (1,), 1, (1, 2, 3)), None, None)
    start = p.leader_epoch_start_offset
    assert start == p.log.log_end_offset == p.high_watermark
    fetch(p, 2, start - 1, clock)
    assert controller.proposals == []
    fetch(p, 2, start, clock)
    assert [i.new_isr for i, _ in controller.proposals] == [(1, 2)]


@pytest.mark.parametrize(
    ("error", "reverted"),
    [
        (ErrorCode.operation_not_attempted, True),
        (ErrorCode.ineligible_replica, True),
        (ErrorCode.fenced_leader_epoch, False),
        (ErrorCode.invalid_update_version, False),
    ],
)
def test_a_refused_isr_change_is_handled_as_kafka_does(
    tmp_path: Path, clock: FakeClock, controller: Controller, error: ErrorCode, reverted: bool
) -> None:
    p = leader(tmp_path, clock, controller)
    clock.advance(LAG_MS + 1)
    p.maybe_shrink_isr()
    controller.refuse(error)
    # Refused without being applied: the committed ISR stands and may be proposed
    # again; a stale epoch: wait for the LeaderAndIsr that brings the newer state.
    assert isinstance(p.isr_state, CommittedIsr) == reverted
    assert p.isr == {1, 2, 3}
    p.maybe_shrink_isr()
    assert len(controller.proposals) == (1 if reverted else 0)


def test_an_answer_to_a_proposal_a_leader_and_isr_replaced_is_ignored(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller)
    clock.advance(LAG_MS + 1)
    p.maybe_shrink_isr()
    p.make_leader(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 2, (1, 2, 3), 5, (1, 2, 3)), None, None
    )
    controller.accept()
    assert p.isr_state == CommittedIsr(frozenset({1, 2, 3})) and p.partition_epoch == 5


def test_a_confirmed_change_outlives_a_leader_and_isr_of_an_older_partition_epoch(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    """A new controller sends every leader a LeaderAndIsr built from what it read at
    its failover, then writes the shrink the leader had proposed (sent to the old
    one, retried). The leader must take the confirmed ISR: with the LeaderAndIsr's it
    counted the follower in for good, never asked to add it back, and the cluster's
    metadata showed it out of sync (seen in the chaos test)."""
    p = leader(tmp_path, clock, controller)
    clock.advance(LAG_MS + 1)
    fetch(p, 2, 0, clock)
    p.maybe_shrink_isr()
    [(item, _)] = controller.proposals
    assert item.new_isr == (1, 2)
    p.make_leader(
        LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, (1, 2, 3), 0, (1, 2, 3)), None, None
    )
    controller.accept()
    assert p.isr_state == CommittedIsr(frozenset({1, 2})) and p.partition_epoch == 1
    # So follower 3, back and caught up, is proposed again.
    fetch(p, 3, p.high_watermark, clock)
    [(item, _)] = controller.proposals
    assert item.new_isr == (1, 2, 3)


def test_acks_all_needs_min_insync_replicas_in_the_committed_isr(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    p = leader(tmp_path, clock, controller, isr=(1, 2), min_isr=2)
    leo = append(p)
    assert p.check_enough_replicas_reached(leo) == (False, ErrorCode.none)
    fetch(p, 2, leo, clock)
    assert p.check_enough_replicas_reached(leo) == (True, ErrorCode.none)
    append(p)  # follower 2 never fetches this one
    clock.advance(LAG_MS + 1)
    p.maybe_shrink_isr()
    controller.accept()
    with pytest.raises(NotEnoughReplicasError):
        p.append_records_to_leader(memoryview(build_batch([(b"k", b"v")])), -1)
    # acks=1 still appends.
    p.append_records_to_leader(memoryview(build_batch([(b"k", b"v")])), 1)
    assert p.check_enough_replicas_reached(leo) == (
        True,
        ErrorCode.not_enough_replicas_after_append,
    )


def test_a_leader_and_isr_older_than_a_confirmed_isr_change_is_ignored(
    tmp_path: Path, clock: FakeClock, controller: Controller
) -> None:
    """After a controller failover its snapshot (same leader epoch, older partition
    epoch) may arrive after an ISR change the new controller confirmed: applying it
    would bring back the old ISR and let the HW move without a member."""
    p = leader(tmp_path, clock, controller, isr=(1, 2))
    leo = append(p)
    fetch(p, 3, leo, clock)  # 3 catches up and joins
    controller.accept()
    assert p.isr == {1, 2, 3} and p.partition_epoch == 1
    stale = LeaderAndIsrPartitionState("t", 0, 1, LEADER, 1, (1, 2), 0, (1, 2, 3))
    assert p.make_leader(stale, None, None) is False
    assert p.isr == {1, 2, 3} and p.partition_epoch == 1
