"""Partition: one topic-partition's replication state on this broker (Kafka's
Partition): its log, whether this broker leads it, the leader epoch, the assigned
replicas and the ISR, what each follower has fetched, and the high watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from uuid import UUID

from moldau.clock import Clock
from moldau.protocol.control import LeaderAndIsrPartitionState
from moldau.protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from moldau.storage.log import FetchDataInfo, Log, LogAppendInfo
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

log = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4


class FetchIsolation(Enum):
    LOG_END = "log_end"  # followers read up to the log end
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows of a follower."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class LogReadInfo:
    data: FetchDataInfo
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        local_broker_id: int,
        log_manager: LogManager,
        log_config: Callable[[str], LogConfig],
        clock: Clock,
    ) -> None:
        self.tp = tp
        self.local_broker_id = local_broker_id
        self.log_manager = log_manager
        self.log_config = log_config
        self.clock = clock
        self.topic_id: UUID | None = None
        self.log: Log | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.assigned_replicas: list[int] = []
        self.isr: frozenset[int] = frozenset()
        self.high_watermark = 0
        self.remote_replicas: dict[int, RemoteReplica] = {}

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def _local_log(self) -> Log:
        if self.log is None:
            raise NotLeaderOrFollowerError(f"no local log of {self.tp}")
        return self.log

    def create_log_if_not_exists(self, hw_checkpoint: int | None, is_new: bool = True) -> Log:
        if self.log is None:
            self.log = self.log_manager.get_or_create_log(
                self.tp, self.log_config(self.tp.topic), is_new
            )
            hw = hw_checkpoint if hw_checkpoint is not None else 0
            self.high_watermark = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)
        return self.log

    # -- becoming leader -----------------------------------------------------------------

    def make_leader(
        self, state: LeaderAndIsrPartitionState, topic_id: UUID | None, hw_checkpoint: int | None
    ) -> bool:
        """Apply a LeaderAndIsr naming this broker leader. True if the leader epoch is
        new (this broker just became leader, or leads again in a new epoch)."""
        lg = self.create_log_if_not_exists(hw_checkpoint, state.is_new)
        is_new_epoch = state.leader_epoch > self.leader_epoch
        self.topic_id = topic_id or self.topic_id
        self.controller_epoch = state.controller_epoch
        self.assigned_replicas = list(state.replicas)
        self.isr = frozenset(state.isr)
        self.partition_epoch = state.partition_epoch
        if is_new_epoch:
            now = self.clock.monotonic_ms()
            self.remote_replicas = {
                r: RemoteReplica(r, last_caught_up_time_ms=now)
                for r in state.replicas
                if r != self.local_broker_id
            }
            lg.assign_leader_epoch(state.leader_epoch, lg.log_end_offset)
            log.debug(
                "%s: leader in epoch %d at offset %d, ISR %s",
                self.tp, state.leader_epoch, lg.log_end_offset, sorted(state.isr),
            )  # fmt: skip
        self.leader_id = self.local_broker_id
        self.leader_epoch = state.leader_epoch
        self.maybe_increment_leader_hw()
        return is_new_epoch

    def make_follower(
        self, state: LeaderAndIsrPartitionState, topic_id: UUID | None, hw_checkpoint: int | None
    ) -> bool:
        """Apply a LeaderAndIsr naming another broker leader. True if the leader or
        epoch changed (the follower must then fetch from the new leader)."""
        self.create_log_if_not_exists(hw_checkpoint, state.is_new)
        changed = state.leader_epoch > self.leader_epoch or state.leader != self.leader_id
        self.topic_id = topic_id or self.topic_id
        self.controller_epoch = state.controller_epoch
        self.assigned_replicas = list(state.replicas)
        self.isr = frozenset(state.isr)
        self.partition_epoch = state.partition_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.remote_replicas = {}
        return changed

    # -- high watermark ------------------------------------------------------------------

    def maybe_increment_leader_hw(self) -> bool:
        """HW = min LEO over the ISR. It only moves forward; returns whether it moved."""
        if self.log is None or not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            remote = self.remote_replicas.get(r)
            if remote is None or remote.log_end_offset < 0:
                return False
            new_hw = min(new_hw, remote.log_end_offset)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # -- produce -------------------------------------------------------------------------

    def append_records_to_leader(self, batch: memoryview, required_acks: int) -> LogAppendInfo:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        lg = self._local_log()
        min_isr = lg.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"ISR of {self.tp} has {len(self.isr)} members, min.insync.replicas is {min_isr}"
            )
        info = lg.append_as_leader(batch, self.leader_epoch)
        self.maybe_increment_leader_hw()
        return info

    def check_enough_replicas_reached(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """For acks=all: has every ISR member got everything below `required_offset`?"""
        if not self.is_leader or self.log is None:
            return False, ErrorCode.not_leader_or_follower
        if self.high_watermark >= required_offset:
            if len(self.isr) < self.log.config.min_insync_replicas:
                return True, ErrorCode.not_enough_replicas_after_append
            return True, ErrorCode.none
        return False, ErrorCode.none

    # -- fetch ---------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool) -> None:
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"epoch {current_leader_epoch} is older than {self.leader_epoch} of {self.tp}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"epoch {current_leader_epoch} is newer than {self.leader_epoch} of {self.tp}"
            )

    def read_records(
        self,
        fetch_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        isolation: FetchIsolation,
        fetch_only_from_leader: bool,
        min_one_message: bool,
    ) -> LogReadInfo:
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self._local_log()
        # Read the offsets before reading data: an append between the two must not
        # make a consumer see data above the HW it was told.
        hw = self.high_watermark
        leo = lg.log_end_offset
        max_offset = leo if isolation == FetchIsolation.LOG_END else hw
        data = lg.read(fetch_offset, max_bytes, max_offset, min_one_message)
        return LogReadInfo(data, hw, lg.log_start_offset, leo, hw)

    def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        isolation: FetchIsolation,
        current_leader_epoch: int,
        fetch_only_from_leader: bool,
    ) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) for ListOffsets; None if none qualifies."""
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self._local_log()
        last_fetchable = (
            lg.log_end_offset if isolation == FetchIsolation.LOG_END else self.high_watermark
        )
        cache = lg.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = lg.log_start_offset
            return -1, start, cache.epoch_for_offset(start)
        if timestamp == LATEST_TIMESTAMP:
            return -1, last_fetchable, cache.epoch_for_offset(max(last_fetchable - 1, 0))
        if timestamp == MAX_TIMESTAMP:
            found = lg.max_timestamp_and_offset()
        else:
            found = lg.offset_for_timestamp(timestamp)
        if found is None or found[1] >= last_fetchable:
            return None
        return found[0], found[1], cache.epoch_for_offset(found[1])

    def mark_offline(self) -> None:
        """Its log directory failed: no log, no leader, nothing known of followers."""
        self.log = None
        self.leader_id = -1
        self.remote_replicas = {}

    def delete(self) -> None:
        self.log_manager.delete_log(self.tp)
        self.log = None
