"""Group coordinator (Kafka's classic GroupCoordinator).

A group belongs to partition abs(hashCode(group id)) % offsets.topic.num.partitions
of __consumer_offsets (Java's String.hashCode); the leader of that partition is the
group's coordinator. Group metadata and committed offsets are records in that
partition, written with acks=all through the ordinary log
(group_metadata_manager.py); the in-memory view is rebuilt from the partition
whenever this broker becomes its leader.

Membership follows the classic protocol: JoinGroup (a new member first gets
MEMBER_ID_REQUIRED and a member id), a rebalance that waits for every member to
rejoin (DelayedJoin, or InitialDelayedJoin for a new group), SyncGroup (the leader
hands out assignments, stored with the group), Heartbeat within the session timeout
(DelayedHeartbeat), LeaveGroup. Every wait is a purgatory operation on the injected
timer (delayed_ops.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from moldau.clock import Clock
from moldau.coordinator.delayed_ops import DelayedHeartbeat, DelayedJoin, InitialDelayedJoin
from moldau.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from moldau.coordinator.group_metadata_manager import (
    CONSUMER_OFFSETS,
    GroupMetadataManager,
    expired_offsets,
    offset_tombstones,
)
from moldau.coordinator.records import (
    GroupMetadataValue,
    OffsetAndMetadata,
    OffsetKey,
    encode_group_key,
    encode_offset_key,
    encode_offset_value,
)
from moldau.protocol.errors import ErrorCode, KafkaError
from moldau.replication.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer
from moldau.replication.replica_manager import ReplicaManager
from moldau.storage.partition_name import TopicPartition
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)

# How long a member that joined but never came back after the join may linger.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    num_partitions: int = 50
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_metadata_size: int = 4096
    commit_timeout_ms: int = 5000


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    offset: int
    leader_epoch: int
    metadata: str | None
    # The commit's time as the client gave it (OffsetCommit v1); -1: the broker's.
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (protocol name, metadata) in the member's order of preference
    protocols: list[tuple[str, bytes]]
    # JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED and its id
    require_known_member_id: bool
    # JoinGroup v9+ (KIP-814): a static leader rejoining a stable group can be told to
    # skip its assignor
    supports_skip_assignment: bool = False


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata): for the leader only
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        clock: Clock,
        timer: Timer,
        config: GroupConfig,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.clock = clock
        self.config = config
        self.num_partitions = config.num_partitions
        self.groups: dict[str, GroupMetadata] = {}
        self.owned: set[int] = set()
        self.loading: set[int] = set()
        # Per offsets partition, how many times its leadership changed here: a load
        # acts only while the leadership it was started for is the current one (leader,
        # follower and leader again overlap two loads; the first must neither install
        # what it read before the second began nor end the second's "loading").
        self._leadership_changes: dict[int, int] = {}
        self.join_purgatory: DelayedOperationPurgatory[str, DelayedJoin] = (
            DelayedOperationPurgatory("Rebalance", timer)
        )
        # Heartbeat expirations, and expirations of member ids handed out but unused.
        self.heartbeat_purgatory: DelayedOperationPurgatory[tuple[str, str], DelayedOperation] = (
            DelayedOperationPurgatory("Heartbeat", timer)
        )
        self.metadata_manager = GroupMetadataManager(
            replica_manager, clock, config.num_partitions, config.commit_timeout_ms
        )
        self._tasks = TaskOwner("group-coordinator")
        replica_manager.on_leadership_change.append(self._on_leadership_change)

    async def close(self) -> None:
        self.join_purgatory.shutdown()
        self.heartbeat_purgatory.shutdown()
        await self._tasks.close()

    def partition_for(self, group_id: str) -> int:
        return self.metadata_manager.partition_for(group_id)

    def _now(self) -> int:
        return self.clock.milliseconds()

    # -- ownership and loading -----------------------------------------------------------

    def _on_leadership_change(self, tp: TopicPartition, is_leader: bool) -> None:
        if tp.topic != CONSUMER_OFFSETS:
            return
        count = self._leadership_changes.get(tp.partition, 0) + 1
        self._leadership_changes[tp.partition] = count
        if is_leader:
            self.owned.add(tp.partition)
            self.loading.add(tp.partition)
            self._tasks.spawn(self._load(tp.partition, count), f"load-{tp.partition}")
        else:
            self.owned.discard(tp.partition)
            self.loading.discard(tp.partition)
            for group in [
                g for g in self.groups.values() if self.partition_for(g.group_id) == tp.partition
            ]:
                self._unload(group)

    def _unload(self, group: GroupMetadata) -> None:
        """This broker no longer coordinates the group: waiting members must find the
        new coordinator."""
        for member in group.members.values():
            _complete(member.awaiting_join, JoinResult(ErrorCode.not_coordinator, member.member_id))
            _complete(member.awaiting_sync, SyncResult(ErrorCode.not_coordinator))
            member.awaiting_join = member.awaiting_sync = None
        # Dead, so that its pending timers (joins, sessions) find nothing to do.
        group.transition_to(GroupState.DEAD, self._now())
        self.groups.pop(group.group_id, None)

    async def _load(self, partition: int, leadership: int) -> None:
        """Rebuild the groups of one offsets partition from its log, for the leadership
        that began with its `leadership`th change here."""
        try:
            await self._load_groups(partition, leadership)
        except Exception as e:
            if self._leadership_changes.get(partition) != leadership:
                return  # superseded: the current leadership's load decides
            # Its log is unreadable (a failed log directory), gone, or holds what this
            # broker cannot read: it must not answer for these groups as if they were
            # empty (their consumers would reset), so it stops owning the partition
            # and clients look for the coordinator again.
            log.error("cannot load the groups of %s-%d: %s", CONSUMER_OFFSETS, partition, e,
                      exc_info=not isinstance(e, KafkaError))  # fmt: skip
            self._on_leadership_change(TopicPartition(CONSUMER_OFFSETS, partition), False)
        finally:
            # Even a load that failed must not leave the partition "loading" for good.
            if self._leadership_changes.get(partition) == leadership:
                self.loading.discard(partition)

    async def _load_groups(self, partition: int, leadership: int) -> None:
        loaded = await self.metadata_manager.read_groups(partition)
        if self._leadership_changes.get(partition) != leadership:
            return  # led elsewhere meanwhile, or again here: that leadership's load counts
        count = 0
        for group_id in loaded.group_ids():
            value = loaded.metadata.get(group_id)
            group_offsets = loaded.offsets.get(group_id, {})
            pending = loaded.pending_txn.get(group_id, {})
            if value is None and not group_offsets and not pending:
                continue
            group = self._restore(group_id, value)
            group.offsets = group_offsets
            group.offset_positions = loaded.positions.get(group_id, {})
            group.pending_txn_offsets = pending
            self.groups[group_id] = group
            count += 1
        if count:
            log.info("loaded %d groups from %s-%d", count, CONSUMER_OFFSETS, partition)

    def _restore(self, group_id: str, value: GroupMetadataValue | None) -> GroupMetadata:
        group = GroupMetadata(group_id)
        if value is None:
            return group
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.current_state_timestamp_ms = value.current_state_timestamp_ms
        for m in value.members:
            member = MemberMetadata(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout_ms, m.session_timeout_ms, value.protocol_type,
                [(value.protocol or "", m.subscription)], m.assignment,
            )  # fmt: skip
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            # Members get one session timeout to come back to the new coordinator.
            group.state = GroupState.STABLE
            for member in group.members.values():
                self._schedule_heartbeat(group, member)
        return group

    def _check_coordinator(self, group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        partition = self.partition_for(group_id)
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self.owned:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    # -- JoinGroup -----------------------------------------------------------------------

    async def join_group(self, req: JoinRequest) -> JoinResult:
        error = self._check_coordinator(req.group_id)
        if error != ErrorCode.none:
            return JoinResult(error, req.member_id)
        config = self.config
        if (
            not config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, req.member_id)
        is_unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                return JoinResult(ErrorCode.unknown_member_id, req.member_id)
            group = GroupMetadata(req.group_id, current_state_timestamp_ms=self._now())
            self.groups[req.group_id] = group
        if group.state == GroupState.DEAD:
            # The group was just removed (e.g. deleted); the client retries.
            return JoinResult(ErrorCode.coordinator_not_available, req.member_id)
        supported = group.supports(req.protocol_type, [name for name, _ in req.protocols])
        if is_unknown:
            if not supported:
                return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
            # Kafka's generateMemberId: a static member's id starts with its instance id.
            new_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
            if req.group_instance_id is not None:
                return await self._static_member_join(group, new_id, req)
            if req.require_known_member_id:
                group.pending_members.add(new_id)
                self._schedule_pending_member_expiry(group, new_id, req.session_timeout_ms)
                return JoinResult(ErrorCode.member_id_required, new_id)
            return await self._add_member_and_rebalance(group, new_id, req)
        if req.member_id in group.pending_members:
            if not supported:
                return JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id)
            return await self._add_member_and_rebalance(group, req.member_id, req)
        error = self._check_member(group, req.member_id, req.group_instance_id)
        if error == ErrorCode.none and not supported:
            error = ErrorCode.inconsistent_group_protocol
        if error != ErrorCode.none:
            return JoinResult(error, req.member_id)
        member = group.members[req.member_id]
        if group.state == GroupState.PREPARING_REBALANCE:
            return await self._update_member_and_rebalance(group, member, req)
        if group.state == GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # It joined already but did not see the response: send it again.
                return self._join_result(group, member)
            return await self._update_member_and_rebalance(group, member, req)
        if group.state == GroupState.STABLE:
            if req.member_id == group.leader_id or not member.matches(req.protocols):
                return await self._update_member_and_rebalance(group, member, req)
            return self._join_result(group, member)
        return JoinResult(ErrorCode.unknown_member_id, req.member_id)

    async def _static_member_join(
        self, group: GroupMetadata, new_id: str, req: JoinRequest
    ) -> JoinResult:
        assert req.group_instance_id is not None
        old_id = group.static_member_id(req.group_instance_id)
        if old_id is None:
            return await self._add_member_and_rebalance(group, new_id, req)
        # A known static member restarted: it takes over its old identity (the old
        # member id is fenced) without a rebalance, unless the group's protocol would
        # change. Its subscription bytes differ (a restarted consumer owns no partitions
        # and names no generation in them); as Kafka, only the protocol chosen counts.
        old = group.members[old_id]
        _complete(old.awaiting_join, JoinResult(ErrorCode.fenced_instance_id, old_id))
        _complete(old.awaiting_sync, SyncResult(ErrorCode.fenced_instance_id))
        old.awaiting_join = old.awaiting_sync = None
        current_leader = group.leader_id
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        before = (
            member.client_id, member.client_host, member.session_timeout_ms,
            member.rebalance_timeout_ms, member.protocols,
        )  # fmt: skip
        member.client_id, member.client_host = req.client_id, req.client_host
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.protocols = req.protocols
        # The old id's session timer goes (its member id is no longer in the group).
        self.heartbeat_purgatory.check_and_complete((group.group_id, old_id))
        if group.state == GroupState.STABLE and group.select_protocol() == group.protocol_name:
            self._complete_and_schedule_next_heartbeat(group, member)
            instance_id = req.group_instance_id

            def written(error: ErrorCode) -> None:
                # Not stored: the old id stays the member's, as Kafka reverts it, so
                # that the log and the group in memory name the same member. The
                # member is told the error and rejoins.
                if error == ErrorCode.none or group.static_member_id(instance_id) != new_id:
                    return
                restored = group.replace_static_member(instance_id, new_id, old_id)
                (
                    restored.client_id, restored.client_host, restored.session_timeout_ms,
                    restored.rebalance_timeout_ms, restored.protocols,
                ) = before  # fmt: skip
                if current_leader == old_id:
                    group.leader_id = old_id
                self._complete_and_schedule_next_heartbeat(group, restored)

            # The new id is stored before the member is answered, so that a
            # coordinator that loads the group after a move or restart does not
            # fence it (Kafka answers in the store's callback too).
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            stored = await self.metadata_manager.store_group(group, assignments, written)
            if stored != ErrorCode.none:
                return JoinResult(stored, "")
            result = self._join_result(group, member)
            if member.member_id == group.leader_id:
                # The leader must not run its assignor: a stable group would not pass
                # the new assignment on. From v9 it is told so; before, it is not told
                # that it leads (Kafka's answers both).
                if req.supports_skip_assignment:
                    result.skip_assignment = True
                else:
                    result.members = []
                    result.leader_id = current_leader or ""
            return result
        return await self._update_member_and_rebalance(group, member, req)

    async def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, req: JoinRequest
    ) -> JoinResult:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member = MemberMetadata(
            member_id, req.group_instance_id, req.client_id, req.client_host,
            req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
            req.protocols, awaiting_join=future,
        )  # fmt: skip
        group.add(member)
        # Only a new group's first rebalance is stretched for members still arriving
        # (Kafka sets this flag under the same condition).
        if group.state == GroupState.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group)
        if group.state == GroupState.PREPARING_REBALANCE:
            # A member that was pending may be the last one the rebalance waits for
            # (Kafka checks the join purgatory after every JoinGroup); else it would end
            # only at the rebalance timeout.
            self.join_purgatory.check_and_complete(group.group_id)
        return await future

    async def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinRequest
    ) -> JoinResult:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        _complete(
            member.awaiting_join, JoinResult(ErrorCode.rebalance_in_progress, member.member_id)
        )
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = future
        self._maybe_prepare_rebalance(group)
        if group.state == GroupState.PREPARING_REBALANCE:
            self.join_purgatory.check_and_complete(group.group_id)
        return await future

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinResult:
        result = JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
        )
        if member.member_id == group.leader_id and group.protocol_name is not None:
            result.members = [
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            ]
        return result

    def _maybe_prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: GroupMetadata) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        if group.state == GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            op: DelayedJoin = InitialDelayedJoin(self, group, delay, delay, remaining)
        else:
            op = DelayedJoin(self, group, group.max_rebalance_timeout_ms())
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now())
        log.info(
            "group %s: preparing rebalance (generation %d)", group.group_id, group.generation_id
        )
        self.join_purgatory.try_complete_else_watch(op, [group.group_id])

    def on_complete_join(self, group: GroupMetadata) -> None:
        if self.groups.get(group.group_id) is not group:
            return  # unloaded or deleted meanwhile
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            if member.group_instance_id is None:
                log.info("group %s: member %s did not rejoin", group.group_id, member.member_id)
                self._remove_member(group, member)
        group.pending_members.clear()
        if group.state == GroupState.DEAD:
            return
        group.init_next_generation(self._now())
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id, group.generation_id, len(group.members), group.protocol_name,
        )  # fmt: skip
        if group.state == GroupState.EMPTY:
            self._tasks.spawn(
                self.metadata_manager.store_group(group, {}), f"store-{group.group_id}"
            )
            return
        for member in group.members.values():
            result = self._join_result(group, member)
            _complete(member.awaiting_join, result)
            member.awaiting_join = None
            self._complete_and_schedule_next_heartbeat(group, member)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        _complete(member.awaiting_join, JoinResult(ErrorCode.unknown_member_id, member.member_id))
        _complete(member.awaiting_sync, SyncResult(ErrorCode.unknown_member_id))
        member.awaiting_join = member.awaiting_sync = None
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self.join_purgatory.check_and_complete(group.group_id)

    def _schedule_pending_member_expiry(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        coordinator = self

        class PendingExpiry(DelayedOperation):
            def try_complete(self) -> bool:
                return False

            def on_complete(self) -> None:
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                    if group.state == GroupState.PREPARING_REBALANCE:
                        coordinator.join_purgatory.check_and_complete(group.group_id)

        self.heartbeat_purgatory.try_complete_else_watch(
            PendingExpiry(timeout_ms), [(group.group_id, member_id)]
        )

    # -- heartbeats ----------------------------------------------------------------------

    def _schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None
    ) -> None:
        member.heartbeat_satisfied = False
        delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
        op = DelayedHeartbeat(self, group, member.member_id, delay)
        self.heartbeat_purgatory.try_complete_else_watch(op, [(group.group_id, member.member_id)])

    def _complete_and_schedule_next_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata
    ) -> None:
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))
        self._schedule_heartbeat(group, member)

    def on_heartbeat_expired(self, group: GroupMetadata, member_id: str) -> None:
        member = group.members.get(member_id)
        if (
            member is None
            or member.heartbeat_satisfied
            or self.groups.get(group.group_id) is not group
        ):
            return
        if member.awaiting_join is not None and group.state == GroupState.PREPARING_REBALANCE:
            return  # it has rejoined; the rebalance timeout governs it now
        log.info("group %s: member %s session timed out", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            # A loading coordinator accepts heartbeats (Kafka): the member keeps its place.
            return ErrorCode.none if error == ErrorCode.coordinator_load_in_progress else error
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return (
                ErrorCode.unknown_member_id
                if group is None
                else ErrorCode.coordinator_not_available
            )
        error = self._check_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return error
        if group.state == GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._complete_and_schedule_next_heartbeat(group, group.members[member_id])
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def _check_member(
        self, group: GroupMetadata, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if instance_id is not None:
            known = group.static_member_id(instance_id)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # -- SyncGroup -----------------------------------------------------------------------

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.state == GroupState.DEAD:
            return SyncResult(ErrorCode.coordinator_not_available)
        error = self._check_member(group, member_id, group_instance_id)
        if error != ErrorCode.none:
            return SyncResult(error)
        if generation_id != group.generation_id:
            return SyncResult(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.state == GroupState.EMPTY:
            return SyncResult(ErrorCode.unknown_member_id)
        if group.state == GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.state == GroupState.STABLE:
            self._complete_and_schedule_next_heartbeat(group, member)
            return SyncResult(
                ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
            )
        # CompletingRebalance: wait for the leader's assignment.
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.awaiting_sync = future
        self._complete_and_schedule_next_heartbeat(group, member)
        if member_id == group.leader_id:
            full = {m: assignments.get(m, b"") for m in group.members}
            generation = group.generation_id

            def stored(error: ErrorCode) -> None:
                if (
                    group.state != GroupState.COMPLETING_REBALANCE
                    or group.generation_id != generation
                ):
                    return
                if error != ErrorCode.none:
                    self._reset_and_propagate_assignment_error(group, error)
                    self._maybe_prepare_rebalance(group)
                    return
                for mid, assignment in full.items():
                    group.members[mid].assignment = assignment
                self._propagate_assignment(group)
                group.transition_to(GroupState.STABLE, self._now())
                log.info("group %s: stable in generation %d", group_id, generation)

            await self.metadata_manager.store_group(group, full, stored)
        return await future

    def _propagate_assignment(self, group: GroupMetadata) -> None:
        for member in group.members.values():
            _complete(
                member.awaiting_sync,
                SyncResult(
                    ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name
                ),
            )
            member.awaiting_sync = None
            self._complete_and_schedule_next_heartbeat(group, member)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            _complete(member.awaiting_sync, SyncResult(error))
            member.awaiting_sync = None

    # -- LeaveGroup ----------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        results = []
        for given_id, instance_id in members:
            member_id = given_id
            if instance_id is not None and not member_id:
                member_id = group.static_member_id(instance_id) or ""
            error = self._check_member(group, member_id, instance_id)
            if error == ErrorCode.none:
                if member_id in group.pending_members:
                    group.pending_members.discard(member_id)
                else:
                    log.info("group %s: member %s left", group_id, member_id)
                    self._remove_member_and_update_group(group, group.members[member_id])
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                error = ErrorCode.none
            results.append(error)
        return ErrorCode.none, results

    # -- describe, list, delete ----------------------------------------------------------

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupMetadata | None]:
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return error, None
        return ErrorCode.none, self.groups.get(group_id)

    def list_groups(self) -> tuple[ErrorCode, list[GroupMetadata]]:
        error = ErrorCode.coordinator_load_in_progress if self.loading else ErrorCode.none
        return error, [g for g in self.groups.values() if g.state != GroupState.DEAD]

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            error = self._check_coordinator(group_id)
            group = self.groups.get(group_id)
            if error != ErrorCode.none:
                results[group_id] = error
            elif group is None or group.state == GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state != GroupState.EMPTY:
                results[group_id] = ErrorCode.non_empty_group
            else:
                group.transition_to(GroupState.DEAD, self._now())
                tombstones = [
                    (encode_group_key(group_id), None),
                    *offset_tombstones(group_id, group.offsets),
                ]
                results[group_id] = await self.metadata_manager.append(
                    group_id, tombstones, functools.partial(self._forget, group_id)
                )
        return results

    def _forget(self, group_id: str, _: ErrorCode) -> None:
        """Drop a deleted group, once its tombstones are written (or failed: it is Dead
        either way, as in Kafka)."""
        group = self.groups.get(group_id)
        if group is not None and group.state == GroupState.DEAD:
            del self.groups[group_id]

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        subscribed = set() if group.state == GroupState.EMPTY else group.subscribed_topics()
        if subscribed is None:
            return ErrorCode.non_empty_group, {}
        results: dict[TopicPartition, ErrorCode] = {}
        doomed = []
        for tp in partitions:
            if tp.topic in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if tp in group.offsets:
                    doomed.append(tp)
        if doomed:

            def deleted(code: ErrorCode) -> None:
                if code == ErrorCode.none:
                    for tp in doomed:
                        group.offsets.pop(tp, None)

            code = await self.metadata_manager.append(
                group_id, offset_tombstones(group_id, doomed), deleted
            )
            if code != ErrorCode.none:
                return code, {}
        return ErrorCode.none, results

    # -- offsets -------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        error = self._check_coordinator(group_id)
        group = self.groups.get(group_id)
        if error == ErrorCode.none:
            if group is None:
                if generation_id < 0:
                    # Not using group management: the group exists only for its offsets.
                    group = GroupMetadata(group_id, current_state_timestamp_ms=self._now())
                    self.groups[group_id] = group
                else:
                    error = ErrorCode.illegal_generation
            elif group.state == GroupState.DEAD:
                error = ErrorCode.coordinator_not_available
            elif generation_id < 0 and group.state == GroupState.EMPTY:
                pass
            elif group.state == GroupState.COMPLETING_REBALANCE:
                error = ErrorCode.rebalance_in_progress
            else:
                error = self._check_member(group, member_id, group_instance_id)
                if error == ErrorCode.none and generation_id != group.generation_id:
                    error = ErrorCode.illegal_generation
                if error == ErrorCode.none:
                    self._complete_and_schedule_next_heartbeat(group, group.members[member_id])
        if error != ErrorCode.none or group is None:
            return dict.fromkeys(offsets, error)
        results, records, accepted = self._offset_records(group_id, offsets)
        if records:
            # Until acknowledged, the commit is pending: expiry must not write a
            # tombstone that would follow it in the log and win after a failover.
            group.prepare_offset_commit(accepted)

            def committed(code: ErrorCode, position: int) -> None:
                group.complete_offset_commit(accepted, code == ErrorCode.none, position)

            code, _ = await self.metadata_manager.append_at(group_id, records, committed)
            for tp in accepted:
                results[tp] = code
        return results

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): the offsets are written as
        records of the producer's transaction and stay pending until its marker. The
        group's generation and member are checked when the client names them
        (KIP-447), so a zombie of an older generation cannot commit."""
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            group = GroupMetadata(group_id, current_state_timestamp_ms=self._now())
            self.groups[group_id] = group
        if group.state == GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        elif member_id and not group.has(member_id):
            error = ErrorCode.unknown_member_id
        elif group_instance_id is not None and (
            group.static_members.get(group_instance_id, member_id) != member_id
        ):
            error = ErrorCode.fenced_instance_id
        elif generation_id >= 0 and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error != ErrorCode.none:
            return dict.fromkeys(offsets, error)
        results, records, accepted = self._offset_records(group_id, offsets)
        if records:
            entries = group.prepare_txn_offset_commit(producer_id, accepted)

            def appended(code: ErrorCode, position: int) -> None:
                group.on_txn_offset_commit_append(
                    producer_id, entries, position if code == ErrorCode.none else -1
                )

            code, _ = await self.metadata_manager.append_at(
                group_id, records, appended, producer_id, producer_epoch
            )
            for tp in accepted:
                results[tp] = code
        return results

    def _offset_records(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetCommitEntry]
    ) -> tuple[
        dict[TopicPartition, ErrorCode],
        list[tuple[bytes, bytes | None]],
        dict[TopicPartition, OffsetAndMetadata],
    ]:
        """The records of a commit: (partitions refused with their error, records,
        the offsets they carry). Metadata too large refuses its partition."""
        refused: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        now = self._now()
        for tp, entry in offsets.items():
            metadata = entry.metadata or ""
            if len(metadata.encode()) > self.config.max_metadata_size:
                refused[tp] = ErrorCode.offset_metadata_too_large
                continue
            at = now if entry.commit_timestamp_ms < 0 else entry.commit_timestamp_ms
            value = OffsetAndMetadata(entry.offset, entry.leader_epoch, metadata, at)
            accepted[tp] = value
            key = encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition))
            records.append((key, encode_offset_value(value)))
        return refused, records, accepted

    def on_transaction_completed(
        self, producer_id: int, offsets_partitions: Iterable[int], committed: bool
    ) -> None:
        """A transaction's marker is in these offsets partitions: its offsets become
        their groups' on commit, and are dropped on abort (Kafka's
        scheduleHandleTxnCompletion)."""
        partitions = set(offsets_partitions)
        for group in list(self.groups.values()):
            if self.partition_for(group.group_id) in partitions:
                group.complete_txn_offset_commit(producer_id, committed)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of `partitions` (every partition of the group if None)."""
        error = self._check_coordinator(group_id)
        if error != ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        committed = {} if group is None else group.offsets
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}

    def unstable_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """Those of `partitions` with a commit on its way or in an open transaction:
        OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for tp in partitions if group.has_pending_offset_commit(tp)}

    def cleanup_expired_offsets(self) -> list[tuple[str, list[tuple[bytes, bytes | None]]]]:
        """Expire offsets as Kafka does (offsets.retention.minutes): all of an empty
        group's once it has been empty that long, a standalone consumer's by commit
        time, and a stable consumer group's for topics it no longer subscribes to;
        never a partition with a commit still waiting for its acks. An empty group
        left with no offsets, committed or pending, dies. Returns the tombstones to
        write."""
        now = self._now()
        retention = self.config.offsets_retention_ms
        out = []
        for group in list(self.groups.values()):
            if self._check_coordinator(group.group_id) != ErrorCode.none:
                continue
            expired = expired_offsets(group, now, retention)
            tombstones = offset_tombstones(group.group_id, expired)
            for tp in expired:
                del group.offsets[tp]
            if group.state == GroupState.EMPTY and not group.has_offsets() and not group.members:
                group.transition_to(GroupState.DEAD, now)
                self.groups.pop(group.group_id, None)
                tombstones.append((encode_group_key(group.group_id), None))
            if tombstones:
                out.append((group.group_id, tombstones))
        return out

    async def expire_offsets(self) -> int:
        """Run the expiry and write its tombstones; returns how many were written."""
        written = 0
        for group_id, tombstones in self.cleanup_expired_offsets():
            if await self.metadata_manager.append(group_id, tombstones) == ErrorCode.none:
                written += len(tombstones)
        if written:
            log.info("expired %d offsets and groups", written)
        return written


def _complete(future: asyncio.Future[object] | None, value: object) -> None:
    if future is not None and not future.done():
        future.set_result(value)
