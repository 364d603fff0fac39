"""A consumer group as the classic group coordinator keeps it (Kafka's GroupMetadata
and MemberMetadata): its state, generation, chosen protocol, leader and members.

Group states are data: each declares the states it may be entered from. Only the
coordinator's task touches a group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from moldau.storage.partition_name import TopicPartition


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
}


class InvalidGroupTransition(Exception):
    pass


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (protocol name, metadata) in the member's order of preference
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # The pending JoinGroup / SyncGroup response, while the member waits for one.
    awaiting_join: asyncio.Future[Any] | None = None
    awaiting_sync: asyncio.Future[Any] | None = None
    heartbeat_satisfied: bool = False

    def metadata_for(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among the candidates."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass(slots=True)
class TxnOffset:
    """An offset committed in a transaction, and where its record lies in the log."""

    value: Any  # OffsetAndMetadata
    position: int = -1


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, not yet joined with them.
    pending_members: set[str] = field(default_factory=set)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    new_member_added: bool = False
    current_state_timestamp_ms: int = -1
    # committed offsets: partition -> OffsetAndMetadata
    offsets: dict[TopicPartition, Any] = field(default_factory=dict)
    # Commits appended but not yet acknowledged (acks=all): partition -> the offset
    # of its latest one (Kafka's pendingOffsetCommits). Expiry leaves them alone.
    pending_offset_commits: dict[TopicPartition, Any] = field(default_factory=dict)
    # The log offset of each committed offset's record (-1: not known): a transaction's
    # commit replaces only offsets written before its own (Kafka's olderThan).
    offset_positions: dict[TopicPartition, int] = field(default_factory=dict)
    # Offsets committed in transactions not yet ended: producer id -> partition ->
    # the offset and the log offset of its record (-1 until appended). They become
    # the group's on the transaction's commit marker and vanish on its abort.
    pending_txn_offsets: dict[int, dict[TopicPartition, TxnOffset]] = field(default_factory=dict)

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise InvalidGroupTransition(
                f"group {self.group_id} cannot go from {self.state.value} to {target.value}"
            )
        self.state = target
        self.current_state_timestamp_ms = now_ms

    # -- offsets -------------------------------------------------------------------------

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, Any]) -> None:
        self.pending_offset_commits.update(offsets)

    def complete_offset_commit(
        self, offsets: Mapping[TopicPartition, Any], written: bool, position: int = -1
    ) -> None:
        """The commit of `offsets` is acknowledged (`written`, its record at log offset
        `position`) or failed. A partition stays pending while a later commit of it
        is still in flight (compared by identity: an equal offset committed twice is
        still two commits)."""
        if written:
            self.offsets.update(offsets)
            for tp in offsets:
                self.offset_positions[tp] = position
        for tp, offset in offsets.items():
            if self.pending_offset_commits.get(tp) is offset:
                del self.pending_offset_commits[tp]

    def has_offsets(self) -> bool:
        """Committed offsets, or commits on their way (Kafka's hasOffsets)."""
        return (
            bool(self.offsets)
            or bool(self.pending_offset_commits)
            or bool(self.pending_txn_offsets)
        )

    def has_pending_offset_commit(self, tp: TopicPartition) -> bool:
        """A commit of `tp` is on its way, or waits for its transaction's end: an
        OffsetFetch that requires stable offsets is told UNSTABLE_OFFSET_COMMIT."""
        return tp in self.pending_offset_commits or any(
            tp in pending for pending in self.pending_txn_offsets.values()
        )

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: Mapping[TopicPartition, Any]
    ) -> dict[TopicPartition, TxnOffset]:
        """Offsets of a TxnOffsetCommit about to be appended: pending, not yet
        appended. Returns the entries, for `on_txn_offset_commit_append`."""
        entries = {tp: TxnOffset(value) for tp, value in offsets.items()}
        self.pending_txn_offsets.setdefault(producer_id, {}).update(entries)
        return entries

    def on_txn_offset_commit_append(
        self, producer_id: int, entries: Mapping[TopicPartition, TxnOffset], position: int
    ) -> None:
        """The append of `entries` ended: at `position` in the log, or failed (-1),
        in which case they are no longer pending (unless a later commit of the
        same partition replaced them meanwhile)."""
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is None:
            return  # the transaction ended meanwhile
        for tp, entry in entries.items():
            if pending.get(tp) is not entry:
                continue
            if position >= 0:
                entry.position = position
            else:
                del pending[tp]
        if not pending:
            del self.pending_txn_offsets[producer_id]

    def complete_txn_offset_commit(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended (its marker is in the log): on commit its
        offsets become the group's, except where a later commit is already there."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending or not committed:
            return
        for tp, entry in pending.items():
            if entry.position < 0:
                continue  # never appended: nothing of it is in the log
            if self.offset_positions.get(tp, -1) < entry.position:
                self.offsets[tp] = entry.value
                self.offset_positions[tp] = entry.position

    # -- members -------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """A static member rejoined with a new member id: the old id is fenced."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    # -- protocols -----------------------------------------------------------------------

    def supports(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        """Can a member with these protocols join? (Kafka's supportsProtocols)"""
        names = set(protocols)
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its favourite candidate; the most votes win (ties go
        to the first protocol voted for, as members list them)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def all_members_joined(self) -> bool:
        return all(m.awaiting_join is not None for m in self.members.values()) and not (
            self.pending_members
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.new_member_added = False

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics |= set(parse_subscription_topics(m.metadata_for(self.protocol_name)))
            except (KeyError, ValueError):
                return None
        return topics


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (version int16, topics: string[])."""
    from moldau.protocol.wire import DecodeError, Reader

    try:
        r = Reader(metadata)
        r.int16()
        return [r.string(False) for _ in range(r.array_length(False, 2))]
    except DecodeError as e:
        raise ValueError(str(e)) from e
