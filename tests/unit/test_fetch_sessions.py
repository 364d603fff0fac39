"""Incremental fetch sessions (KIP-227), both halves without a network: the
follower's FetchSessionHandler builds each Fetch, the leader's FetchManager answers
it, as the wire would carry them. With 1,000 partitions, an idle round names none
and answers none; a partition that gets records is the only one named."""

from __future__ import annotations

import random

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import ErrorCode
from moldau.replication.fetch_session_handler import FetchSessionHandler, SessionFetch
from moldau.replication.fetcher import FollowerFetchPartition
from moldau.replication.partition import LogReadInfo
from moldau.replication.replica_manager import FetchPartitionRead
from moldau.server.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
)
from moldau.storage.log import FetchDataInfo
from moldau.storage.partition_name import TopicPartition


class Leader:
    """Logs of `n` partitions as the leader sees them: end offset and high watermark."""

    def __init__(self, n: int, manager: FetchManager) -> None:
        self.manager = manager
        self.leo = {TopicPartition("t", i): 0 for i in range(n)}
        self.hw = dict(self.leo)

    def write(self, tp: TopicPartition, count: int) -> None:
        self.leo[tp] += count

    def fetch(self, fetch: SessionFetch, privileged: bool = True) -> tuple[int, int, dict]:
        """(error, session id, {tp: (records size, high watermark)}) of one Fetch."""
        wanted = [
            CachedPartition(
                (p.tp.topic, p.tp.partition), p.tp, None, p.fetch_offset, p.current_leader_epoch,
                p.max_bytes, p.log_start_offset, p.last_fetched_epoch,
            )
            for p in fetch.to_send
        ]  # fmt: skip
        forgotten = [(tp.topic, tp.partition) for tp in fetch.to_forget]
        context = self.manager.new_context(
            fetch.session_id, fetch.epoch, privileged, False, wanted, forgotten
        )
        if context.error != ErrorCode.none:
            return context.error, INVALID_SESSION_ID, {}
        reads = []
        for c in context.partitions:
            # The follower's fetch offset is as far as it has: the HW follows it.
            self.hw[c.tp] = max(self.hw[c.tp], min(c.fetch_offset, self.leo[c.tp]))
            size = self.leo[c.tp] - c.fetch_offset
            data = FetchDataInfo(c.fetch_offset, b"x" * size)
            info = LogReadInfo(data, self.hw[c.tp], 0, self.leo[c.tp], self.hw[c.tp])
            reads.append(FetchPartitionRead(c.tp, c.fetch_offset, 0, c.max_bytes, info=info))
        session_id, answer = context.respond(reads)
        return (
            ErrorCode.none,
            session_id,
            {
                c.tp: (r.info.data.size if r.info else 0, r.info.high_watermark if r.info else -1)
                for c, r in answer
            },
        )


class Follower:
    def __init__(self, n: int) -> None:
        self.handler = FetchSessionHandler()
        self.leo = {TopicPartition("t", i): 0 for i in range(n)}
        self.hw = dict(self.leo)

    def wanted(self) -> list[FollowerFetchPartition]:
        return [FollowerFetchPartition(tp, 0, leo, 0, 0, 1 << 20) for tp, leo in self.leo.items()]

    def round(self, leader: Leader) -> tuple[SessionFetch, dict]:
        fetch = self.handler.build(self.wanted())
        error, session_id, answer = leader.fetch(fetch)
        if self.handler.handle_response(fetch, error, session_id):
            for tp, (size, hw) in answer.items():
                self.leo[tp] += size
                self.hw[tp] = hw
        return fetch, answer


def pair(n: int, slots: int = 10) -> tuple[Leader, Follower, FetchSessionCache]:
    cache = FetchSessionCache(slots, FakeClock(), rng=random.Random(1))
    return Leader(n, FetchManager(cache)), Follower(n), cache


def test_an_idle_follower_of_1000_partitions_names_none_and_is_told_of_none() -> None:
    leader, follower, cache = pair(1000)
    fetch, answer = follower.round(leader)
    assert fetch.is_full and len(fetch.to_send) == 1000 and len(answer) == 1000
    assert len(cache.sessions) == 1

    for _ in range(3):
        fetch, answer = follower.round(leader)
        assert not fetch.is_full
        assert fetch.to_send == [] and fetch.to_forget == [] and answer == {}

    tp = TopicPartition("t", 617)
    leader.write(tp, 5)
    fetch, answer = follower.round(leader)
    assert fetch.to_send == [] and list(answer) == [tp] and answer[tp][0] == 5
    # Its fetch offset moved: the next Fetch names it, and the leader's high
    # watermark, moved by that fetch, is sent back.
    fetch, answer = follower.round(leader)
    assert [p.tp for p in fetch.to_send] == [tp]
    assert answer == {tp: (0, 5)}
    assert follower.hw[tp] == 5 and follower.leo[tp] == 5
    fetch, answer = follower.round(leader)
    assert fetch.to_send == [] and answer == {}


def test_partitions_leave_and_join_a_session() -> None:
    leader, follower, cache = pair(4)
    follower.round(leader)
    gone, new = TopicPartition("t", 2), TopicPartition("t", 9)
    del follower.leo[gone]
    follower.leo[new] = 0
    leader.leo[new] = leader.hw[new] = 0
    fetch, answer = follower.round(leader)
    assert fetch.to_forget == [gone] and [p.tp for p in fetch.to_send] == [new]
    assert list(answer) == [new]  # a partition new to the session is answered once
    (session,) = cache.sessions.values()
    assert gone not in {c.tp for c in session.partitions.values()}
    assert new in {c.tp for c in session.partitions.values()}

    # Forgetting every partition closes the session.
    follower.leo.clear()
    fetch, answer = follower.round(leader)
    assert not cache.sessions and follower.handler.session_id == INVALID_SESSION_ID


def test_a_lost_session_makes_the_next_fetch_full() -> None:
    leader, follower, cache = pair(3)
    follower.round(leader)
    cache.sessions.clear()  # the leader restarted, say
    fetch, answer = follower.round(leader)
    assert not fetch.is_full and answer == {}
    assert follower.handler.session_id == INVALID_SESSION_ID
    fetch, answer = follower.round(leader)
    assert fetch.is_full and len(answer) == 3 and len(cache.sessions) == 1


def test_a_wrong_epoch_is_refused_and_a_lost_answer_starts_afresh() -> None:
    leader, follower, cache = pair(3)
    follower.round(leader)
    fetch = follower.handler.build(follower.wanted())
    stale = SessionFetch(fetch.session_id, fetch.epoch + 5, [], [])
    assert leader.fetch(stale)[0] == ErrorCode.invalid_fetch_session_epoch
    # The follower never heard an answer: its next Fetch is full, under the old id,
    # which closes that session and opens another.
    follower.handler.handle_error()
    old = follower.handler.session_id
    fetch, answer = follower.round(leader)
    assert fetch.is_full and fetch.session_id == old and len(answer) == 3
    assert list(cache.sessions) == [follower.handler.session_id] != [old]


def test_the_final_epoch_closes_a_session_and_opens_none() -> None:
    leader, follower, cache = pair(2)
    follower.round(leader)
    sid = follower.handler.session_id
    error, session_id, _ = leader.fetch(SessionFetch(sid, FINAL_EPOCH, [], []))
    assert error == ErrorCode.none and session_id == INVALID_SESSION_ID and not cache.sessions


def test_an_error_is_answered_every_time_until_it_clears() -> None:
    cache = FetchSessionCache(1, FakeClock())
    manager = FetchManager(cache)
    tp = TopicPartition("t", 0)
    c = CachedPartition(("t", 0), tp, None, 0, 0, 100, 0, 0)
    context = manager.new_context(0, 0, True, False, [c], [])
    info = LogReadInfo(FetchDataInfo(0, b""), 0, 0, 0, 0)
    sid, _ = context.respond([FetchPartitionRead(tp, 0, 0, 100, info=info)])
    err = FetchPartitionRead(tp, 0, 0, 100, error=ErrorCode.not_leader_or_follower)
    for epoch in (1, 2):
        context = manager.new_context(sid, epoch, True, False, [], [])
        assert context.respond([err])[1] == [(c, err)]
    context = manager.new_context(sid, 3, True, False, [], [])
    assert len(context.respond([FetchPartitionRead(tp, 0, 0, 100, info=info)])[1]) == 1
    context = manager.new_context(sid, 4, True, False, [], [])
    assert context.respond([FetchPartitionRead(tp, 0, 0, 100, info=info)])[1] == []


@pytest.mark.parametrize(
    ("old_follower", "old_size", "new_follower", "new_size", "evicted"),
    [
        (False, 10, True, 1, True),  # a follower takes a young consumer's slot
        (False, 10, False, 50, False),  # a young consumer's slot is kept from consumers
        (True, 10, True, 50, False),  # a young follower's slot is kept from everyone
    ],
)
def test_a_full_cache_gives_a_young_session_up_only_to_a_follower(
    old_follower: bool, old_size: int, new_follower: bool, new_size: int, evicted: bool
) -> None:
    clock = FakeClock()
    cache = FetchSessionCache(1, clock, eviction_ms=1000)
    old = cache.maybe_create(old_follower, False, parts(old_size))
    clock.advance(500)
    new = cache.maybe_create(new_follower, False, parts(new_size))
    assert (new != INVALID_SESSION_ID) is evicted
    assert list(cache.sessions) == ([new] if evicted else [old])


def test_a_full_cache_gives_an_old_session_up_to_a_bigger_one_and_a_stale_one_to_any() -> None:
    clock = FakeClock()
    cache = FetchSessionCache(1, clock, eviction_ms=1000)
    old = cache.maybe_create(False, False, parts(10))
    clock.advance(1500)
    cache.touch(cache.sessions[old])  # old but in use
    assert cache.maybe_create(False, False, parts(5)) == INVALID_SESSION_ID
    bigger = cache.maybe_create(False, False, parts(20))
    assert list(cache.sessions) == [bigger]
    clock.advance(1500)  # not used since: stale
    smaller = cache.maybe_create(False, False, parts(1))
    assert list(cache.sessions) == [smaller]


def parts(n: int) -> list[CachedPartition]:
    return [
        CachedPartition(("t", i), TopicPartition("t", i), None, 0, 0, 100, 0, 0) for i in range(n)
    ]
