"""Partition reassignment (KIP-455), as Kafka's controller runs it.

A partition being reassigned has a full replica set RS = TRS + ORS (target first,
so the target's first replica is preferred meanwhile), the replicas being added
(AR = TRS - ORS) and those being removed (RR = ORS - TRS), all persisted in the
topic znode so that a new controller carries on. Once every target replica is in
the ISR, leadership moves into the target if it must, RR leave through
OfflineReplica -> ReplicaDeletionStarted -> ReplicaDeletionSuccessful ->
NonExistentReplica, and RS becomes TRS.

This module holds the pure parts: the assignment value and the checks of a request.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from moldau.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """Towards `target` from the origin replicas (a reassignment in flight is
        replaced; reassigning to the origin cancels it)."""
        origin = self.origin_replicas
        full = tuple(dict.fromkeys([*target, *origin]))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )

    def is_complete(self, isr: Collection[int]) -> bool:
        """Every target replica is in the ISR (or nothing moves)."""
        return not self.is_being_reassigned or all(r in isr for r in self.target_replicas)


def invalid_target(
    target: Sequence[int], live_brokers: Iterable[int]
) -> tuple[ErrorCode, str] | None:
    """Why a target replica list cannot be used, as Kafka's controller says it
    (INVALID_REPLICA_ASSIGNMENT), or None."""
    if not target:
        return (
            ErrorCode.invalid_replica_assignment,
            "Empty replica list specified in partition reassignment.",
        )
    if len(set(target)) != len(target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
        )
    if any(r < 0 for r in target):
        return (
            ErrorCode.invalid_replica_assignment,
            f"Invalid broker id in replica list: {list(target)}",
        )
    live = set(live_brokers)
    if not set(target) <= live:
        return (
            ErrorCode.invalid_replica_assignment,
            f"Replica assignment has brokers that are not alive. Replica list: "
            f"{list(target)}, live broker list: {sorted(live)}",
        )
    return None
