"""Partition: one topic-partition's replication state on this broker (Kafka's
Partition): its log, whether this broker leads it, the leader epoch, the assigned
replicas and the ISR, what each follower has fetched, and the high watermark.

As leader it owns the ISR rules: a follower's fetch updates what is known of it
(`update_follower_fetch_state`), may add it to the ISR, and may move the high
watermark; `maybe_shrink_isr` drops followers that stopped catching up. ISR changes
are proposed to the controller with AlterPartition (through `alter_partition`) and
take effect when it confirms; the high watermark = min LEO over the maximal ISR,
and only moves forward. Every method returns whether the HW moved, so the caller
can complete delayed requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol
from uuid import UUID

from moldau.clock import Clock
from moldau.protocol.control import (
    AlterPartitionItem,
    AlterPartitionResult,
    LeaderAndIsrPartitionState,
)
from moldau.protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownLeaderEpochError,
)
from moldau.protocol.records import LOG_OVERHEAD, BatchHeader, offset_and_length
from moldau.replication.isr import (
    CommittedIsr,
    IsrChangeMeters,
    IsrState,
    PendingExpandIsr,
    PendingShrinkIsr,
    RemoteReplica,
)
from moldau.storage.log import FetchDataInfo, Log, LogAppendInfo
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition
from moldau.storage.producer_state import AppendOrigin, VerificationGuard
from moldau.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

# DeleteRecords' offset that means "up to the high watermark".
DELETE_TO_HIGH_WATERMARK = -1

# ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class FetchIsolation(Enum):
    LOG_END = "log_end"  # followers read up to the log end
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed


class AlterPartitionSender(Protocol):
    """Sends a proposed ISR to the controller (Kafka's AlterPartitionManager) and
    calls back with its answer. It retries what failed on the way (no controller,
    a lost connection) itself: the callback hears only the controller's answer."""

    def submit(
        self, item: AlterPartitionItem, on_result: Callable[[AlterPartitionResult], None]
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class LogReadInfo:
    data: FetchDataInfo
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    # (epoch, end offset) where a follower's log leaves the leader's (no data then)
    diverging_epoch: tuple[int, int] | None = None
    # read_committed: the aborted transactions overlapping what was read (None for
    # the other isolations).
    aborted_transactions: list[AbortedTxn] | None = None


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        local_broker_id: int,
        log_manager: LogManager,
        log_config: Callable[[str], LogConfig],
        clock: Clock,
        replica_lag_time_max_ms: int = 30_000,
        alter_partition: AlterPartitionSender | None = None,
        isr_meters: IsrChangeMeters | None = None,
        is_broker_alive: Callable[[int], bool] | None = None,
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
        self.isr_state: IsrState = CommittedIsr(frozenset())
        self._high_watermark = 0
        self.remote_replicas: dict[int, RemoteReplica] = {}
        # The log end offset when this broker's leader epoch began: a follower joins
        # the ISR only once it has everything from before it led (Kafka's
        # leaderEpochStartOffsetOpt).
        self.leader_epoch_start_offset = -1
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alter_partition = alter_partition
        self.isr_meters = isr_meters if isr_meters is not None else IsrChangeMeters()
        # Whether a follower may join the ISR (Kafka's isReplicaIsrEligible: in
        # ZooKeeper mode, its broker is alive).
        self.is_broker_alive = is_broker_alive or (lambda _: True)
        # Called when an ISR change the controller confirmed moved the HW.
        self.on_high_watermark_moved: Callable[[Partition], None] | None = None

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        # Transactions whose marker it passes become stable (leader and follower).
        self._high_watermark = value
        if self.log is not None:
            self.log.producer_state.on_high_watermark_updated(value)

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read up to: the first unstable offset,
        if below the high watermark, else the high watermark (Kafka's
        fetchLastStableOffsetMetadata)."""
        hw = self._high_watermark
        if self.log is None:
            return hw
        first = self.log.first_unstable_offset
        return hw if first is None or first >= hw else first

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what the controller confirmed)."""
        return self.isr_state.isr

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def _local_log(self) -> Log:
        if self.log is None:
            raise NotLeaderOrFollowerError(f"no local log of {self.tp}")
        return self.log

    def create_log_if_not_exists(
        self, hw_checkpoint: int | None, is_new: bool = True, topic_id: UUID | None = None
    ) -> Log:
        if self.log is None:
            self.log = self.log_manager.get_or_create_log(
                self.tp, self.log_config(self.tp.topic), is_new, topic_id
            )
            hw = hw_checkpoint if hw_checkpoint is not None else 0
            self.high_watermark = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)
        elif topic_id is not None and self.log.topic_id is None:
            self.log.assign_topic_id(topic_id)
        return self.log

    # -- becoming leader -----------------------------------------------------------------

    def make_leader(
        self, state: LeaderAndIsrPartitionState, topic_id: UUID | None, hw_checkpoint: int | None
    ) -> bool:
        """Apply a LeaderAndIsr naming this broker leader. True if the leader epoch is
        new (this broker just became leader, or leads again in a new epoch)."""
        lg = self.create_log_if_not_exists(hw_checkpoint, state.is_new, topic_id)
        if self._is_stale(state):
            return False
        is_new_epoch = state.leader_epoch > self.leader_epoch
        self.topic_id = topic_id or self.topic_id
        self.controller_epoch = state.controller_epoch
        self.assigned_replicas = list(state.replicas)
        self.isr_state = CommittedIsr(frozenset(state.isr))
        self.partition_epoch = state.partition_epoch
        now = self.clock.monotonic_ms()
        remotes = {
            r: self.remote_replicas.get(r) or RemoteReplica(r)
            for r in state.replicas
            if r != self.local_broker_id
        }
        self.remote_replicas = remotes
        if is_new_epoch:
            for remote in remotes.values():
                remote.reset(now, lg.log_end_offset, remote.broker_id in state.isr)
            self.leader_epoch_start_offset = lg.log_end_offset
            lg.assign_leader_epoch(state.leader_epoch, lg.log_end_offset)
            log.debug(
                "%s: leader in epoch %d at offset %d, ISR %s",
                self.tp, state.leader_epoch, lg.log_end_offset, sorted(state.isr),
            )  # fmt: skip
        self.leader_id = self.local_broker_id
        self.leader_epoch = state.leader_epoch
        self.maybe_increment_leader_hw()
        return is_new_epoch

    def _is_stale(self, state: LeaderAndIsrPartitionState) -> bool:
        """A LeaderAndIsr older than what this broker knows: the same leader epoch
        with an older partition epoch, as a controller's snapshot can be after an
        ISR change it confirmed meanwhile (Kafka skips it too)."""
        if state.leader_epoch == self.leader_epoch and state.partition_epoch < self.partition_epoch:
            log.info(
                "%s: ignoring LeaderAndIsr of partition epoch %d: already at %d",
                self.tp, state.partition_epoch, self.partition_epoch,
            )  # fmt: skip
            return True
        return False

    def make_follower(
        self, state: LeaderAndIsrPartitionState, topic_id: UUID | None, hw_checkpoint: int | None
    ) -> bool:
        """Apply a LeaderAndIsr naming another broker leader. True if the leader or
        epoch changed (the follower must then fetch from the new leader)."""
        self.create_log_if_not_exists(hw_checkpoint, state.is_new, topic_id)
        if self._is_stale(state):
            return False
        changed = state.leader_epoch > self.leader_epoch or state.leader != self.leader_id
        self.topic_id = topic_id or self.topic_id
        self.controller_epoch = state.controller_epoch
        self.assigned_replicas = list(state.replicas)
        self.isr_state = CommittedIsr(frozenset(state.isr))
        self.partition_epoch = state.partition_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.remote_replicas = {}
        return changed

    # -- high watermark ------------------------------------------------------------------

    def maybe_increment_leader_hw(self) -> bool:
        """HW = min LEO over the maximal ISR (a follower being added counts at once)
        and over the followers outside it that are caught up and may join it: the HW
        waits for them, or under a steady load it would always run ahead of them and
        they could never join (Kafka's shouldWaitForReplicaToJoinIsr). It only moves
        forward; returns whether it moved."""
        if self.log is None or not self.is_leader:
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        maximal = self.isr_state.maximal_isr
        for r in maximal:
            if r == self.local_broker_id:
                continue
            remote = self.remote_replicas.get(r)
            if remote is None or remote.log_end_offset < 0:
                return False  # not heard from since this epoch began
            new_hw = min(new_hw, remote.log_end_offset)
        now = self.clock.monotonic_ms()
        for r, remote in self.remote_replicas.items():
            if (
                r not in maximal
                and 0 <= remote.log_end_offset < new_hw
                and remote.is_caught_up(leo, now, self.replica_lag_time_max_ms)
                and self.is_broker_alive(r)
            ):
                new_hw = remote.log_end_offset
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False

    # -- followers and the ISR (leader only) --------------------------------------------

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, start_offset: int, now_ms: int
    ) -> bool:
        """A follower fetched from `fetch_offset`: record it, maybe add it to the ISR,
        maybe move the HW (returned)."""
        remote = self.remote_replicas.get(replica_id)
        if remote is None or self.log is None or not self.is_leader:
            return False
        before = remote.log_end_offset
        remote.update_fetch_state(fetch_offset, start_offset, now_ms, self.log.log_end_offset)
        self._maybe_expand_isr(remote)
        return remote.log_end_offset != before and self.maybe_increment_leader_hw()

    def _maybe_expand_isr(self, remote: RemoteReplica) -> None:
        """A follower not in the ISR that has reached the HW, and everything from
        before this leader's epoch, joins it if its broker is alive (Kafka's
        maybeExpandIsr)."""
        state = self.isr_state
        if (
            state.is_inflight
            or self.alter_partition is None
            or remote.broker_id in state.isr
            or remote.log_end_offset < self.high_watermark
            or remote.log_end_offset < self.leader_epoch_start_offset
            or not self.is_broker_alive(remote.broker_id)
        ):
            return
        proposed = state.isr | {remote.broker_id}
        self._propose(PendingExpandIsr(proposed, CommittedIsr(state.isr), remote.broker_id))

    def maybe_shrink_isr(self) -> None:
        """Followers that have not caught up within replica.lag.time.max.ms leave the
        ISR (Kafka's maybeShrinkIsr; the broker calls this periodically)."""
        state = self.isr_state
        if state.is_inflight or self.alter_partition is None or self.log is None:
            return
        if not self.is_leader:
            return
        now = self.clock.monotonic_ms()
        leo = self.log.log_end_offset
        out = frozenset(
            r
            for r in state.isr
            if r != self.local_broker_id
            and (
                (remote := self.remote_replicas.get(r)) is None
                or not remote.is_caught_up(leo, now, self.replica_lag_time_max_ms)
            )
        )
        if out:
            log.info(
                "%s: shrinking ISR %s: %s not caught up within %d ms",
                self.tp, sorted(state.isr), sorted(out), self.replica_lag_time_max_ms,
            )  # fmt: skip
            self._propose(PendingShrinkIsr(state.isr - out, CommittedIsr(state.isr), out))

    def _propose(self, pending: PendingExpandIsr | PendingShrinkIsr) -> None:
        assert self.alter_partition is not None
        self.isr_state = pending
        item = AlterPartitionItem(
            self.tp.topic,
            self.tp.partition,
            self.leader_epoch,
            tuple(sorted(pending.proposed_isr)),
            self.partition_epoch,
        )
        self.alter_partition.submit(item, lambda result: self._on_alter_partition(pending, result))

    def _on_alter_partition(
        self, pending: PendingExpandIsr | PendingShrinkIsr, result: AlterPartitionResult
    ) -> None:
        moved = self.handle_alter_partition_result(pending, result)
        if moved and self.on_high_watermark_moved is not None:
            self.on_high_watermark_moved(self)

    def _confirms_newer(self, result: AlterPartitionResult) -> bool:
        """Is `result`, the answer to a proposal a LeaderAndIsr replaced meanwhile,
        still the truth? A new controller sends one built from what it read at its
        failover, then writes the proposal it was sent: a confirmed change of the same
        leader epoch and a later partition epoch is newer than that LeaderAndIsr.
        (Kafka drops it, and the leader's ISR and the controller's then differ until
        the next election: the leader, counting the follower in, never asks to add it
        back.)"""
        return (
            result.error_code == ErrorCode.none
            and not self.isr_state.is_inflight
            and result.leader_epoch == self.leader_epoch
            and result.partition_epoch > self.partition_epoch
        )

    def handle_alter_partition_result(
        self, pending: PendingExpandIsr | PendingShrinkIsr, result: AlterPartitionResult
    ) -> bool:
        """Apply the controller's answer to `pending` (Kafka's
        handleAlterPartitionUpdate/Error). Returns whether the HW moved."""
        if self.isr_state is not pending and not self._confirms_newer(result):
            return False  # a LeaderAndIsr replaced the state meanwhile
        if result.error_code != ErrorCode.none:
            self.isr_meters.failed += 1
            if result.error_code in (
                ErrorCode.operation_not_attempted,
                ErrorCode.ineligible_replica,
            ):
                # The controller says it did not apply it: the old ISR stands.
                self.isr_state = pending.last_committed
            else:
                # Stale epochs and the like: a LeaderAndIsr with the newer state is
                # on its way; until then no other change is proposed.
                log.info("%s: AlterPartition refused: %s", self.tp, ErrorCode(result.error_code))
            return False
        if result.leader_epoch != self.leader_epoch:
            return False  # an answer about another epoch
        if result.partition_epoch < self.partition_epoch:
            return False
        self.isr_state = CommittedIsr(frozenset(result.isr))
        self.partition_epoch = result.partition_epoch
        if isinstance(pending, PendingShrinkIsr):
            self.isr_meters.shrinks += 1
        else:
            self.isr_meters.expands += 1
        log.info("%s: ISR is now %s", self.tp, sorted(result.isr))
        return self.maybe_increment_leader_hw()

    # -- produce -------------------------------------------------------------------------

    def append_records_to_leader(
        self,
        batch: memoryview,
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
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
        info = lg.append_as_leader(batch, self.leader_epoch, origin, verification_guard)
        self.maybe_increment_leader_hw()
        return info

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """See Log.maybe_start_transaction_verification (leader only)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        return self._local_log().maybe_start_transaction_verification(producer_id, sequence, epoch)

    def append_end_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> LogAppendInfo:
        """Write a transaction marker as leader. Kafka appends markers with
        requiredAcks=-1: an ISR smaller than min.insync.replicas refuses it
        (NOT_ENOUGH_REPLICAS), and the coordinator retries."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        lg = self._local_log()
        min_isr = lg.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"ISR of {self.tp} has {len(self.isr)} members, min.insync.replicas is {min_isr}"
            )
        info = lg.append_end_txn_marker(
            producer_id, producer_epoch, coordinator_epoch, commit, self.leader_epoch
        )
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

    # -- delete records ------------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> tuple[int, int]:
        """DeleteRecords: move the log start offset up to `offset` (-1: the HW), as
        Kafka's deleteRecordsOnLeader. Returns (the offset asked, now resolved, and
        the low watermark). Segments wholly below the new start go at the next
        retention check."""
        if not self.is_leader or self.log is None:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        lg = self.log
        if not lg.config.delete:
            raise PolicyViolationError(
                f"records of {self.tp} cannot be deleted: its cleanup.policy has no delete"
            )
        target = self.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"offset {target} of {self.tp} is not valid")
        if target > self.high_watermark:
            # Only what every replica has may go (Kafka's maybeIncrementLogStartOffset).
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.tp} to {target}: "
                f"above the high watermark {self.high_watermark}"
            )
        if target > lg.log_start_offset:
            log.info("%s: log start offset moved to %d by DeleteRecords", self.tp, target)
        lg.maybe_increment_log_start_offset(target)
        return target, self.low_watermark_if_leader()

    def low_watermark_if_leader(self) -> int:
        """The lowest log start offset over this leader and the followers whose
        brokers are alive, in or out of the ISR (Kafka's lowWatermarkIfLeader): what
        a DeleteRecords waits for. A follower not heard from in this epoch counts
        as -1."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.tp}"
            )
        low = self._local_log().log_start_offset
        for r, remote in self.remote_replicas.items():
            if remote.log_start_offset < low and self.is_broker_alive(r):
                low = remote.log_start_offset
        return low

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
        last_fetched_epoch: int = -1,
    ) -> LogReadInfo:
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self._local_log()
        # Read the offsets before reading data: an append between the two must not
        # make a consumer see data above the HW it was told.
        hw = self.high_watermark
        lso = self.last_stable_offset
        leo = lg.log_end_offset
        if last_fetched_epoch >= 0:
            # Does the fetcher's log, which ends at `fetch_offset` in that epoch,
            # agree with ours? If not, tell it where they part (Kafka's
            # validateFetchOffsetAndEpoch), and send no data.
            epoch, end = lg.leader_epoch_cache.end_offset_for(last_fetched_epoch, leo)
            if epoch < 0 or end < 0:
                raise OffsetOutOfRangeError(
                    f"the end of epoch {last_fetched_epoch} of {self.tp} is not known here"
                )
            if epoch < last_fetched_epoch or end < fetch_offset:
                empty = FetchDataInfo(fetch_offset, b"")
                return LogReadInfo(empty, hw, lg.log_start_offset, leo, lso, (epoch, end))
        if isolation == FetchIsolation.LOG_END:
            max_offset = leo
        elif isolation == FetchIsolation.TXN_COMMITTED:
            max_offset = lso
        else:
            max_offset = hw
        data = lg.read(fetch_offset, max_bytes, max_offset, min_one_message)
        aborted = None
        if isolation == FetchIsolation.TXN_COMMITTED:
            # Those overlapping [fetch_offset, LSO): a superset of what the records
            # read need, which the consumer only applies to the batches it gets.
            aborted = lg.collect_aborted_transactions(fetch_offset, max_offset) if data.size else []
        return LogReadInfo(data, hw, lg.log_start_offset, leo, lso, aborted_transactions=aborted)

    # -- follower -----------------------------------------------------------------------

    def append_records_to_follower(
        self, records: bytes | memoryview | None, leader_hw: int, leader_log_start: int
    ) -> None:
        """Append what a fetch from the leader brought, batch by batch as the leader
        wrote them (a cut-off last batch waits for the next fetch); the follower's HW
        is the leader's, bounded by its own log end."""
        lg = self._local_log()
        if records:
            view = memoryview(records)
            pos = 0
            while pos + LOG_OVERHEAD <= len(view):
                _, length = offset_and_length(view, pos)
                end = pos + LOG_OVERHEAD + length
                if length <= 0 or end > len(view):
                    break
                batch = view[pos:end]
                if BatchHeader.parse(batch).last_offset >= lg.log_end_offset:
                    lg.append_as_follower(batch)
                pos = end
        if leader_log_start > lg.log_start_offset:
            lg.maybe_increment_log_start_offset(leader_log_start)
        self.high_watermark = max(0, min(leader_hw, lg.log_end_offset))

    def truncate_to_diverging_epoch(self, epoch: int, end_offset: int) -> bool:
        """The leader says our log leaves its own after `end_offset` in `epoch`: cut
        ours to where both agree (Kafka's truncateOnFetchResponse). True if anything
        was cut."""
        lg = self._local_log()
        if end_offset < 0:
            target = self.high_watermark  # the leader knows no epochs: all it can say
        else:
            own_epoch, own_end = lg.leader_epoch_cache.end_offset_for(epoch, lg.log_end_offset)
            if own_epoch < 0:
                target = min(end_offset, lg.log_end_offset)
            elif own_epoch == epoch:
                target = min(end_offset, own_end)
            else:
                # Our last epoch at or below theirs is older: cut to its end, and the
                # next fetch compares that one.
                target = min(own_end, lg.log_end_offset)
        if target < lg.log_end_offset:
            log.info(
                "%s: truncating from %d to %d (leader's epoch %d ends at %d)",
                self.tp, lg.log_end_offset, target, epoch, end_offset,
            )  # fmt: skip
        # Even with nothing to cut: epochs this log names past `target` must go.
        return self.truncate_to(target)

    def truncate_to(self, offset: int) -> bool:
        """A follower cuts its log at `offset` (Kafka's Partition.truncateTo); the HW
        follows the log end down. True if anything was cut."""
        lg = self._local_log()
        cut = lg.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, lg.log_end_offset)
        return cut

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """A follower whose log ends before the leader's starts: its records are all
        stale, and it starts again, empty, at `offset` (the HW with it)."""
        self._local_log().truncate_fully_and_start_at(offset)
        self.high_watermark = offset

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, leader_epoch: int, fetch_only_from_leader: bool
    ) -> tuple[int, int]:
        """(epoch, end offset) of `leader_epoch` in this log, for OffsetForLeaderEpoch."""
        self.check_leader_epoch(current_leader_epoch, fetch_only_from_leader)
        lg = self._local_log()
        return lg.leader_epoch_cache.end_offset_for(leader_epoch, lg.log_end_offset)

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
        if isolation == FetchIsolation.LOG_END:
            last_fetchable = lg.log_end_offset
        elif isolation == FetchIsolation.TXN_COMMITTED:
            last_fetchable = self.last_stable_offset
        else:
            last_fetchable = self.high_watermark
        cache = lg.leader_epoch_cache
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = lg.log_start_offset
            return -1, start, cache.epoch_for_offset(start)
        if timestamp == LATEST_TIMESTAMP:
            return -1, last_fetchable, cache.epoch_for_offset(max(last_fetchable - 1, 0))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            # Nothing is tiered: offset -1, as Kafka answers without remote storage.
            return None
        if timestamp == MAX_TIMESTAMP:
            found = lg.max_timestamp_and_offset()
        else:
            found = lg.offset_for_timestamp(timestamp)
        if found is None or found[1] >= last_fetchable:
            return None
        return found[0], found[1], cache.epoch_for_offset(found[1])

    def legacy_fetch_offsets_for_timestamp(
        self,
        timestamp: int,
        max_num_offsets: int,
        from_consumer: bool,
        fetch_only_from_leader: bool,
    ) -> list[int]:
        """ListOffsets v0's list of offsets (Log.legacy_offsets_before); a consumer is
        shown none past the high watermark, and the high watermark first if any was."""
        self.check_leader_epoch(-1, fetch_only_from_leader)
        offsets = self._local_log().legacy_offsets_before(timestamp, max_num_offsets)
        hw = self.high_watermark
        if from_consumer and any(o > hw for o in offsets):
            return [hw, *(o for o in offsets if o <= hw)]
        return offsets

    def stop(self) -> None:
        """StopReplica: this broker neither leads nor follows it any more."""
        self.leader_id = -1
        self.remote_replicas = {}

    def mark_offline(self) -> None:
        """Its log directory failed: no log, no leader, nothing known of followers."""
        self.log = None
        self.leader_id = -1
        self.remote_replicas = {}

    def delete(self) -> None:
        self.log_manager.delete_log(self.tp)
        self.log = None
