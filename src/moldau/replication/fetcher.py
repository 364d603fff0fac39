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
from moldau.replication.quota import ReplicationQuota
from moldau.replication.topic_stats import BrokerTopicStats, TopicMeter
from moldau.tasks import TaskOwner

if TYPE_CHECKING:
    from moldau.replication.partition import Partition
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


@dataclass(frozen=True, slots=True)
class FollowerSetup:
    """What every fetcher of a broker shares."""

    replica_id: int  # this broker
    client: FetchClient
    lookup: Callable[[TopicPartition], Partition | None]  # this broker's partitions
    config: FetcherConfig
    clock: Clock
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
        # partition -> the leader epoch it follows in (from LeaderAndIsr)
        self.partitions: dict[TopicPartition, int] = {}
        # partition -> monotonic ms before which it is not fetched (after an error)
        self._delayed_until: dict[TopicPartition, int] = {}
        self._changed = asyncio.Event()

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = leader_epoch
        self._delayed_until.pop(tp, None)
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self._delayed_until.pop(tp, None)

    async def run(self) -> None:
        while True:
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
                for result in results:
                    self._process(result, asked.get(result.tp))
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

    def _process(self, result: FollowerFetchResult, asked: FollowerFetchPartition | None) -> None:
        tp = result.tp
        p = self.lookup(tp)
        if (
            asked is None
            or self.partitions.get(tp) != asked.current_leader_epoch
            or p is None
            or p.is_leader
            or p.log is None
            or p.log.log_end_offset != asked.fetch_offset
        ):
            return  # its state changed while the fetch was out: the answer is stale
        error = result.error_code
        try:
            if error == ErrorCode.none:
                if result.diverging_epoch is not None:
                    p.truncate_to_diverging_epoch(*result.diverging_epoch)
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
                return
            if error == ErrorCode.offset_out_of_range:
                # Our log end is beyond the leader's or below its start: start again
                # where the leader's log starts (Kafka's handleOutOfRangeError).
                p.restart_follower_log_at(result.log_start_offset)
                return
        except KafkaError as e:
            log.warning("broker %d: %s: %s", self.replica_id, tp, e)
        else:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, storage errors...:
            # wait for the controller's next LeaderAndIsr, or try again later.
            log.info(
                "broker %d: fetching %s from %d: %s", self.replica_id, tp, self.leader_id,
                ErrorCode(error).name,
            )  # fmt: skip
        self._delayed_until[tp] = self.clock.monotonic_ms() + self.config.backoff_ms


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
