"""Replica fetchers (Kafka's ReplicaFetcherManager and ReplicaFetcherThread): a
follower copies its partitions' records from their leaders by fetching, as a
consumer does, with its broker id as `replica_id`.

One fetcher task per leader broker fetches all the partitions this broker follows
there, in one Fetch request a round. Each partition fetches from its log end with
the epoch of its last batch (`last_fetched_epoch`): a leader whose log diverged from
that point answers with the diverging epoch instead of records, and the follower
cuts its log to where the two agree (KIP-320/KIP-595 truncation through Fetch),
never to its own high watermark. The follower appends batches as they come, offsets
and epochs as the leader wrote them, without decoding records.

Two states come before that, as in Kafka's AbstractFetcherThread: a partition whose
log knows no epoch (its epoch checkpoint was unreadable, say) cuts its log to its
high watermark before its first fetch, since the leader cannot check it; and one
whose fetch is OFFSET_OUT_OF_RANGE asks the leader for its log end and start
(ListOffsets) and cuts its log to fit (fetchOffsetAndTruncate). After a round in
which any log was cut, the recovery points are checkpointed (on a worker thread)
before the next fetch, so a checkpoint never names a recovery point above records
appended after the cut (Kafka's LogManager.truncateTo).

The network half is a FetchClient (server/), so this module stays free of sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from moldau.clock import Clock
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.replication.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from moldau.replication.quota import ReplicationQuota
from moldau.replication.topic_stats import BrokerTopicStats, TopicMeter
from moldau.tasks import TaskOwner

if TYPE_CHECKING:
    from moldau.replication.partition import Partition
    from moldau.storage.log_manager import LogManager
    from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FollowerFetchPartition:
    tp: TopicPartition
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FollowerFetchResult:
    tp: TopicPartition
    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    # (epoch, end offset) where the leader's log and ours part, if they do
    diverging_epoch: tuple[int, int] | None = None
    records: bytes | memoryview | None = None


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's replica.fetch.* settings."""

    max_wait_ms: int = 500
    min_bytes: int = 1
    response_max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    num_fetchers: int = 1  # per leader (num.replica.fetchers)


class FetchClient(Protocol):
    async def fetch(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        config: FetcherConfig,
        partitions: Sequence[FollowerFetchPartition],
    ) -> list[FollowerFetchResult]: ...

    async def list_offset(
        self,
        leader_id: int,
        fetcher_id: int,
        replica_id: int,
        tp: TopicPartition,
        current_leader_epoch: int,
        timestamp: int,
    ) -> int:
        """The leader's offset for `timestamp` as ListOffsets answers a replica: its
        log end for LATEST_TIMESTAMP, its log start for EARLIEST_TIMESTAMP (Kafka's
        LeaderEndPoint.fetchLatestOffset / fetchEarliestOffset). An error code is
        raised as its KafkaError."""
        ...


@dataclass(frozen=True, slots=True)
class FollowerSetup:
    """What every fetcher of a broker shares."""

    replica_id: int  # this broker
    client: FetchClient
    lookup: Callable[[TopicPartition], Partition | None]  # this broker's partitions
    config: FetcherConfig
    clock: Clock
    log_manager: LogManager  # checkpoints the recovery points after a truncation
    topic_stats: BrokerTopicStats | None = None
    quota: ReplicationQuota | None = None  # follower.replication.throttled.*


class ReplicaFetcher:
    """Fetches the partitions this broker follows on one leader (those of its
    fetcher id, with several fetchers per leader)."""

    def __init__(self, leader_id: int, fetcher_id: int, setup: FollowerSetup) -> None:
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.replica_id = setup.replica_id
        self.client = setup.client
        self.lookup = setup.lookup
        self.config = setup.config
        self.clock = setup.clock
        self.topic_stats = setup.topic_stats
        self.quota = setup.quota
        self.log_manager = setup.log_manager
        # partition -> the leader epoch it follows in (from LeaderAndIsr)
        self.partitions: dict[TopicPartition, int] = {}
        # partition -> monotonic ms before which it is not fetched (after an error)
        self._delayed_until: dict[TopicPartition, int] = {}
        # Partitions not fetched yet in their leader epoch: if their log knows no
        # epoch, it is cut to the HW first (Kafka's Truncating state).
        self._truncating: set[TopicPartition] = set()
        # A log was cut: the recovery points go to disk before the next fetch.
        self._checkpoint_due = False
        self._changed = asyncio.Event()

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        if self.partitions.get(tp) != leader_epoch:  # same epoch: Kafka keeps its state
            self._truncating.add(tp)
        self.partitions[tp] = leader_epoch
        self._delayed_until.pop(tp, None)
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._delayed_until.pop(tp, None)
        self._truncating.discard(tp)

    async def run(self) -> None:
        while True:
            self._truncate_to_high_watermark()
            if self._checkpoint_due:
                await self._checkpoint_recovery_points()
            wanted, held_back = self._fetchable()
            if not wanted:
                self._changed.clear()
                delays = [d for tp, d in self._delayed_until.items() if tp in self.partitions]
                if held_back:  # by the throttle: look again after the backoff
                    delays.append(self.clock.monotonic_ms() + self.config.backoff_ms)
                timeout = max(0, min(delays) - self.clock.monotonic_ms()) / 1000 if delays else None
                with contextlib.suppress(TimeoutError):  # a delayed partition is due
                    async with asyncio.timeout(timeout):
                        await self._changed.wait()
                continue
            try:
                results = await self.client.fetch(
                    self.leader_id, self.fetcher_id, self.replica_id, self.config, wanted
                )
                asked = {p.tp: p for p in wanted}
                out_of_range = []
                for result in results:
                    if self._process(result, asked.get(result.tp)):
                        out_of_range.append(asked[result.tp])
                # After the round: these wait for the leader's answers.
                for fetched in out_of_range:
                    await self._handle_out_of_range(fetched)
            except (ConnectionError, OSError, TimeoutError, KafkaError) as e:
                log.warning(
                    "broker %d: fetch from leader %d failed: %s; retrying in %d ms",
                    self.replica_id, self.leader_id, e, self.config.backoff_ms,
                )  # fmt: skip
                await asyncio.sleep(self.config.backoff_ms / 1000)
                continue
            except Exception:
                # Not expected (a malformed answer, say): the partitions must go on
                # replicating, so log it and try again after the backoff.
                log.exception("broker %d: fetch from leader %d", self.replica_id, self.leader_id)
                await asyncio.sleep(self.config.backoff_ms / 1000)
                continue
            # Partitions that got data go last next time, so a partition behind
            # large batches is not always the one cut short (Kafka rotates too).
            for tp in [r.tp for r in results if r.records and r.tp in self.partitions]:
                self.partitions[tp] = self.partitions.pop(tp)
            # Let the event loop serve other work between rounds.
            await asyncio.sleep(0)

    def _fetchable(self) -> tuple[list[FollowerFetchPartition], bool]:
        """What to fetch now, and whether the throttle held some partition back."""
        now = self.clock.monotonic_ms()
        out = []
        quota = self.quota
        exceeded = quota is not None and quota.throttled and quota.is_quota_exceeded()
        held_back = False
        for tp, epoch in self.partitions.items():
            if self._delayed_until.get(tp, 0) > now:
                continue
            p = self.lookup(tp)
            if p is None or p.log is None or p.is_leader:
                continue
            # Kafka's shouldFollowerThrottle: not in sync, throttled, over the quota.
            if (
                exceeded
                and quota is not None
                and quota.is_throttled(tp.topic, tp.partition)
                and self.replica_id not in p.isr
            ):
                held_back = True
                continue
            lg = p.log
            out.append(
                FollowerFetchPartition(
                    tp,
                    epoch,
                    lg.log_end_offset,
                    lg.leader_epoch_cache.latest_epoch,
                    lg.log_start_offset,
                    self.config.partition_max_bytes,
                )
            )
        return out, held_back

    def _truncate_to_high_watermark(self) -> None:
        """Before its first fetch in a leader epoch, a partition whose log knows no
        epoch (an unreadable epoch checkpoint after a clean start) cuts its log to
        its HW, as Kafka's truncateToHighWatermark: it would fetch with
        last_fetched_epoch -1, and the leader could not tell it where its log left
        the leader's. Records below the HW are on every ISR member."""
        for tp in list(self._truncating):
            p = self.lookup(tp)
            if p is None or p.log is None or p.is_leader:
                continue  # not followed from here (yet): looked at again next round
            try:
                if p.log.leader_epoch_cache.latest_epoch < 0:
                    end = p.log.log_end_offset
                    if p.truncate_to(p.high_watermark):
                        self._checkpoint_due = True
                        log.info(
                            "broker %d: %s: no leader epochs: truncated from %d to the"
                            " high watermark %d", self.replica_id, tp, end, p.high_watermark,
                        )  # fmt: skip
            except KafkaError as e:
                log.warning("broker %d: %s: %s", self.replica_id, tp, e)
                self._delay(tp)
                continue
            self._truncating.discard(tp)

    async def _checkpoint_recovery_points(self) -> None:
        """A cut log's recovery point went down with its log end: on disk it must too
        before records are appended past the cut again, or a crash would trust the
        unflushed ones below the old recovery point unchecked (Kafka's
        LogManager.truncateTo checkpoints for the same reason). So must the cut
        log's leader-epoch checkpoint, written first, or a crash would find it
        naming an epoch at offsets another leader's records have taken. One
        checkpoint for every log cut in a round, written on a worker thread."""
        snapshot = self.log_manager.checkpoint_snapshot()
        await asyncio.to_thread(self.log_manager.write_checkpoints, snapshot)
        self._checkpoint_due = False

    def _followed(
        self, tp: TopicPartition, asked: FollowerFetchPartition | None
    ) -> Partition | None:
        """The partition `asked` was fetched for, if its state is still what the
        request was built from (else an answer about it is stale)."""
        p = self.lookup(tp)
        if (
            asked is None
            or self.partitions.get(tp) != asked.current_leader_epoch
            or p is None
            or p.is_leader
            or p.log is None
            or p.log.log_end_offset != asked.fetch_offset
        ):
            return None
        return p

    def _delay(self, tp: TopicPartition) -> None:
        self._delayed_until[tp] = self.clock.monotonic_ms() + self.config.backoff_ms

    def _process(self, result: FollowerFetchResult, asked: FollowerFetchPartition | None) -> bool:
        """Apply one partition's answer. True if it is OFFSET_OUT_OF_RANGE: that needs
        the leader's offsets (`_handle_out_of_range`)."""
        tp = result.tp
        p = self._followed(tp, asked)
        if p is None:
            return False  # its state changed while the fetch was out: the answer is stale
        error = result.error_code
        try:
            if error == ErrorCode.none:
                if result.diverging_epoch is not None:
                    if p.truncate_to_diverging_epoch(*result.diverging_epoch):
                        self._checkpoint_due = True
                else:
                    p.append_records_to_follower(
                        result.records, result.high_watermark, result.log_start_offset
                    )
                    if self.topic_stats is not None and result.records:
                        self.topic_stats.mark(
                            tp.topic, TopicMeter.REPLICATION_BYTES_IN, len(result.records)
                        )
                    if (
                        self.quota is not None
                        and result.records
                        and self.quota.is_throttled(tp.topic, tp.partition)
                    ):
                        self.quota.record(len(result.records))
                return False
            if error == ErrorCode.offset_out_of_range:
                return True
        except KafkaError as e:
            log.warning("broker %d: %s: %s", self.replica_id, tp, e)
        else:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, storage errors...:
            # wait for the controller's next LeaderAndIsr, or try again later.
            log.info(
                "broker %d: fetching %s from %d: %s", self.replica_id, tp, self.leader_id,
                ErrorCode(error).name,
            )  # fmt: skip
        self._delay(tp)
        return False

    async def _handle_out_of_range(self, fetched: FollowerFetchPartition) -> None:
        """Our log end is outside the leader's log (Kafka's fetchOffsetAndTruncate):
        past its end (after an unclean election, say), cut ours to it; before its
        start (retention removed what we lack), start again, empty, at it. The
        partition's state is checked again after each answer: it may have changed
        while the leader was asked."""
        tp, epoch = fetched.tp, fetched.current_leader_epoch
        try:
            leader_end = await self.client.list_offset(
                self.leader_id, self.fetcher_id, self.replica_id, tp, epoch, LATEST_TIMESTAMP
            )
            p = self._followed(tp, fetched)
            if p is None:
                return
            if leader_end < fetched.fetch_offset:
                log.warning(
                    "broker %d: %s: log end %d is past the leader's %d: truncating to it",
                    self.replica_id, tp, fetched.fetch_offset, leader_end,
                )  # fmt: skip
                if p.truncate_to(leader_end):
                    self._checkpoint_due = True
                return
            leader_start = await self.client.list_offset(
                self.leader_id, self.fetcher_id, self.replica_id, tp, epoch, EARLIEST_TIMESTAMP
            )
            p = self._followed(tp, fetched)
            if p is None:
                return
            if leader_start > fetched.fetch_offset:
                log.warning(
                    "broker %d: %s: log end %d is before the leader's log start %d:"
                    " starting again at it", self.replica_id, tp, fetched.fetch_offset,
                    leader_start,
                )  # fmt: skip
                p.truncate_fully_and_start_at(leader_start)
                self._checkpoint_due = True
                return
        except (ConnectionError, OSError, TimeoutError, KafkaError) as e:
            log.warning(
                "broker %d: %s: cannot list the offsets of leader %d: %s",
                self.replica_id, tp, self.leader_id, e,
            )  # fmt: skip
            self._delay(tp)
            return
        # Within the leader's log after all (it grew meanwhile): fetch again, as
        # Kafka does, but after the backoff rather than at once, so that a leader
        # that keeps answering OFFSET_OUT_OF_RANGE for it is not asked in a hot loop.
        self._delay(tp)


def fetcher_id(tp: TopicPartition, num_fetchers: int) -> int:
    """Which of a leader's fetchers copies `tp` (Kafka's getFetcherId, with Java's
    String.hashCode, so partitions spread over fetchers as on Kafka)."""
    h = 0
    for ch in tp.topic:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = (31 * h + tp.partition) & 0xFFFFFFFF
    if h >= 2**31:
        h -= 2**32
    return 0 if h == -(2**31) else abs(h) % num_fetchers


class ReplicaFetcherManager:
    """The fetchers of one broker: `num.replica.fetchers` per leader, each with its
    own connection and fetch session, a partition always on the same one."""

    def __init__(self, setup: FollowerSetup) -> None:
        self.setup = setup
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}  # (leader, fetcher id)
        self._tasks: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._owner = TaskOwner(f"replica-fetchers-{setup.replica_id}")

    def add_partition(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> None:
        if self.leader_of(tp) != leader_id:
            self.remove_partition(tp)
        key = (leader_id, fetcher_id(tp, self.setup.config.num_fetchers))
        fetcher = self.fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(*key, self.setup)
            self.fetchers[key] = fetcher
            self._tasks[key] = self._owner.spawn(fetcher.run(), f"leader-{key[0]}-{key[1]}")
        fetcher.add(tp, leader_epoch)

    def remove_partition(self, tp: TopicPartition) -> None:
        for key, fetcher in list(self.fetchers.items()):
            fetcher.remove(tp)
            if not fetcher.partitions:
                del self.fetchers[key]
                self._tasks.pop(key).cancel()

    def leader_of(self, tp: TopicPartition) -> int | None:
        for (leader_id, _), fetcher in self.fetchers.items():
            if tp in fetcher.partitions:
                return leader_id
        return None

    async def close(self) -> None:
        self.fetchers.clear()
        self._tasks.clear()
        await self._owner.close()
