"""Incremental fetch sessions (KIP-227; Kafka's FetchSession.scala).

A fetcher that reads many partitions opens a session with a full Fetch (epoch 0).
The broker keeps what it asked for each partition, and from then on the fetcher's
requests (epoch 1, 2, ...) name only the partitions whose fetch state changed, plus
the ones to forget; the answers carry only partitions with something new (records,
a moved high watermark or log start offset, an error, a divergence). An idle
follower of 1,000 partitions then sends and receives a few dozen bytes a round.

Everything here is pure bookkeeping, no I/O: FetchManager.new_context turns a
request's session fields into a FetchContext, which says what to read and, once
read, what to answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from moldau.clock import Clock
from moldau.protocol.errors import ErrorCode
from moldau.replication.replica_manager import FetchPartitionRead
from moldau.storage.partition_name import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch that closes any session and opens none
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long
# gives its slot to any new one; younger ones only to more valuable ones.
EVICTION_MS = 120_000

# How a request names a partition: (topic name, partition) up to Fetch v12,
# (topic id, partition) from v13.
SessionKey = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """What a fetcher asked for one partition, and what it was last told."""

    key: SessionKey
    tp: TopicPartition  # topic "" while a topic id is unknown
    topic_id: UUID | None
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int
    log_start_offset: int
    last_fetched_epoch: int
    high_watermark: int = -1  # as last answered; -1 after an error, to answer again
    answered_log_start_offset: int = -1

    def to_read(self) -> FetchPartitionRead:
        return FetchPartitionRead(
            self.tp,
            self.fetch_offset,
            self.current_leader_epoch,
            self.max_bytes,
            self.log_start_offset,
            self.last_fetched_epoch,
        )

    def update_request(self, other: CachedPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.current_leader_epoch = other.current_leader_epoch
        self.max_bytes = other.max_bytes
        self.log_start_offset = other.log_start_offset
        self.last_fetched_epoch = other.last_fetched_epoch

    def must_respond(self, result: FetchPartitionRead) -> bool:
        """Whether an incremental answer includes this partition; notes what it says
        (Kafka's CachedPartition.maybeUpdateResponseData)."""
        must = False
        info = result.info
        if info is not None:
            if info.data.size > 0 or info.diverging_epoch is not None:
                must = True
            if info.high_watermark != self.high_watermark:
                self.high_watermark = info.high_watermark
                must = True
            if info.log_start_offset != self.answered_log_start_offset:
                self.answered_log_start_offset = info.log_start_offset
                must = True
        if result.error != ErrorCode.none:
            self.high_watermark = -1
            must = True
        return must


@dataclass(slots=True, eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    partitions: dict[SessionKey, CachedPartition] = field(default_factory=dict)

    def update(self, wanted: Sequence[CachedPartition], forgotten: Sequence[SessionKey]) -> None:
        for p in wanted:
            cached = self.partitions.get(p.key)
            if cached is None:
                self.partitions[p.key] = p
            else:
                cached.update_request(p)
        for key in forgotten:
            self.partitions.pop(key, None)

    def eviction_rank(self) -> tuple[bool, int, int]:
        """Less valuable sessions rank lower (Kafka's EvictableKey)."""
        return (self.privileged, len(self.partitions), self.id)


class FetchSessionCache:
    """At most `max_entries` sessions (max.incremental.fetch.session.cache.slots)."""

    def __init__(
        self,
        max_entries: int,
        clock: Clock,
        eviction_ms: int = EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock.monotonic_ms()

    def maybe_create(
        self, privileged: bool, uses_topic_ids: bool, partitions: Sequence[CachedPartition]
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        now = self.clock.monotonic_ms()
        if len(self.sessions) >= self.max_entries and not self._try_evict(
            privileged, len(partitions), now
        ):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self.rng.randint(1, 2**31 - 1)
        session = FetchSession(session_id, privileged, uses_topic_ids, now, now)
        session.partitions = {p.key: p for p in partitions}
        self.sessions[session_id] = session
        return session_id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        least_recent = min(self.sessions.values(), key=lambda s: s.last_used_ms)
        if now - least_recent.last_used_ms > self.eviction_ms:
            del self.sessions[least_recent.id]
            return True
        # A young follower session is kept from everyone; other young sessions
        # only from followers. The least valuable candidate goes if the new
        # session is worth at least as much.
        candidates = [
            s
            for s in self.sessions.values()
            if now - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.eviction_rank)
        if (privileged, size, 0) < victim.eviction_rank():
            return False
        del self.sessions[victim.id]
        return True


Answer = list[tuple[CachedPartition, FetchPartitionRead]]


@dataclass(slots=True)
class FetchContext:
    """What one Fetch reads (`partitions`, in order) and how it answers.

    `respond` takes the reads, in the same order, and gives the session id to
    answer with and the partitions to include."""

    partitions: list[CachedPartition]
    respond: Callable[[list[FetchPartitionRead]], tuple[int, Answer]]
    error: ErrorCode = ErrorCode.none
    # The session id of an answer a client quota throttled (Kafka's
    # getThrottledResponse): an incremental session's, else none (no session made).
    throttled_session_id: int = INVALID_SESSION_ID


class FetchManager:
    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        session_id: int,
        epoch: int,
        privileged: bool,
        uses_topic_ids: bool,
        wanted: list[CachedPartition],
        forgotten: list[SessionKey],
    ) -> FetchContext:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)  # a full fetch closes its session
            if epoch == FINAL_EPOCH:
                return self._sessionless(wanted)
            return self._full(privileged, uses_topic_ids, wanted)
        session = self.cache.get(session_id)
        if session is None:
            return self._error(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return self._error(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return self._error(ErrorCode.fetch_session_topic_id_error)
        session.update(wanted, forgotten)
        if not session.partitions:
            self.cache.remove(session.id)
            return self._sessionless(wanted)
        self.cache.touch(session)
        session.epoch = next_epoch(session.epoch)
        return self._incremental(session)

    @staticmethod
    def _error(error: ErrorCode) -> FetchContext:
        return FetchContext([], lambda reads: (INVALID_SESSION_ID, []), error)

    @staticmethod
    def _sessionless(wanted: list[CachedPartition]) -> FetchContext:
        def respond(reads: list[FetchPartitionRead]) -> tuple[int, Answer]:
            return INVALID_SESSION_ID, list(zip(wanted, reads, strict=True))

        return FetchContext(wanted, respond)

    def _full(
        self, privileged: bool, uses_topic_ids: bool, wanted: list[CachedPartition]
    ) -> FetchContext:
        def respond(reads: list[FetchPartitionRead]) -> tuple[int, Answer]:
            for p, read in zip(wanted, reads, strict=True):
                p.must_respond(read)  # note what the fetcher is told
            new_id = self.cache.maybe_create(privileged, uses_topic_ids, wanted)
            return new_id, list(zip(wanted, reads, strict=True))

        return FetchContext(wanted, respond)

    @staticmethod
    def _incremental(session: FetchSession) -> FetchContext:
        partitions = list(session.partitions.values())

        def respond(reads: list[FetchPartitionRead]) -> tuple[int, Answer]:
            answer = []
            for p, read in zip(partitions, reads, strict=True):
                if not p.must_respond(read):
                    continue
                answer.append((p, read))
                # Partitions that got records are read last next time, so a large
                # one cannot always take the whole response (Kafka does the same).
                if read.info is not None and read.info.data.size > 0:
                    moved = session.partitions.pop(p.key, None)
                    if moved is not None:
                        session.partitions[p.key] = moved
            return session.id, answer

        return FetchContext(partitions, respond, throttled_session_id=session.id)
