"""The group coordinator's waits, as purgatory operations on its timer (Kafka's
DelayedJoin, InitialDelayedJoin and DelayedHeartbeat)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from moldau.coordinator.group import GroupMetadata
from moldau.replication.purgatory import DelayedOperation

if TYPE_CHECKING:
    from moldau.coordinator.group_coordinator import GroupCoordinator


class DelayedJoin(DelayedOperation):
    """Completes when every member has rejoined, or at the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, delay_ms: int) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.group.all_members_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits group.initial.rebalance.delay.ms,
    and again while new members keep arriving, up to the rebalance timeout, so that
    a group starting together forms in one rebalance."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        group: GroupMetadata,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
    ) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - delay, 0)
            self.coordinator.join_purgatory.try_complete_else_watch(
                InitialDelayedJoin(
                    self.coordinator, group, self.configured_delay_ms, delay, remaining
                ),
                [group.group_id],
            )
        else:
            super().on_complete()


class DelayedHeartbeat(DelayedOperation):
    """Expires a member that has not been heard from within its session timeout.
    Keyed, as in Kafka, by member id: a static member that rejoins under a new id is
    the same object, and its old id's timer must not expire it."""

    def __init__(
        self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str, delay_ms: int
    ) -> None:
        super().__init__(delay_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id

    def try_complete(self) -> bool:
        member = self.group.members.get(self.member_id)
        if member is None or member.heartbeat_satisfied:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_heartbeat_expired(self.group, self.member_id)
