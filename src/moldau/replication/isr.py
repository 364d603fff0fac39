"""The leader's view of its followers and of the ISR (Kafka's Replica and the
PartitionState classes of Partition.scala), as data and pure rules.

A follower is caught up if it fetched up to the leader's log end offset, or fetched
at least to where the log end was at its previous fetch (Kafka's
lastFetchLeaderLogEndOffset), within `replica.lag.time.max.ms`; otherwise a steady
produce load, which moves the log end between two fetches, would make a healthy
follower look behind.

The ISR is committed (the controller wrote it) or has one change in flight
(AlterPartition sent, no answer yet): an expansion counts its new member towards the
high watermark at once (the maximal ISR, KIP-497), a shrink keeps waiting for the
leaving members until the controller confirms.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows of one follower."""

    broker_id: int
    log_start_offset: int = -1
    log_end_offset: int = -1  # -1: unknown until its first fetch in this epoch
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(
        self, fetch_offset: int, start_offset: int, fetch_time_ms: int, leader_end_offset: int
    ) -> None:
        """A fetch from `fetch_offset` at `fetch_time_ms`, when the leader's log ended
        at `leader_end_offset` (Kafka's Replica.updateFetchState)."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            # It reached what the log end was at its previous fetch: caught up as of then.
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, now_ms: int, leader_end_offset: int, in_isr: bool) -> None:
        """A new leader epoch: nothing is known of this follower's log yet; an ISR
        member counts as caught up now, so it has replica.lag.time.max.ms to fetch."""
        self.log_start_offset = -1
        self.log_end_offset = -1
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_isr else 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            self.log_end_offset == leader_end_offset
            or now_ms - self.last_caught_up_time_ms <= max_lag_ms
        )


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    """The ISR the controller last confirmed; no change in flight."""

    isr: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class _PendingIsrChange:
    """An AlterPartition sent, not yet answered: the committed ISR still holds."""

    proposed_isr: frozenset[int]
    last_committed: CommittedIsr

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PendingExpandIsr(_PendingIsrChange):
    """Adding `new_member`: it already counts for the HW."""

    new_member: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr | {self.new_member}


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr(_PendingIsrChange):
    """Dropping `out_of_sync`: they still count for the HW until it is confirmed."""

    out_of_sync: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr


@dataclass
class IsrChangeMeters:
    """Kafka's IsrShrinksPerSec, IsrExpandsPerSec and FailedIsrUpdatesPerSec: ISR
    changes the controller confirmed, and proposals it refused."""

    shrinks: int = 0
    expands: int = 0
    failed: int = 0
