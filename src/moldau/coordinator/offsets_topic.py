"""What the broker says while __consumer_offsets cannot be created yet.

Kafka creates the offsets topic only once `offsets.topic.replication.factor`
brokers are alive, and logs why it does not on every FindCoordinator meanwhile;
clients see only COORDINATOR_NOT_AVAILABLE, and only with debug logging on. Here
the line is logged once for each count of live brokers, so a broker that waits
says so without repeating itself at every client retry.
"""

from __future__ import annotations

import logging

from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS

log = logging.getLogger(__name__)


class TooFewBrokersReport:
    """One broker's report that consumer groups wait for more brokers."""

    def __init__(self) -> None:
        self._reported: tuple[int, int] | None = None  # (live brokers, RF) last logged

    def report(self, alive: int, replication_factor: int) -> None:
        """Log, once per situation, that consumer groups wait for more brokers."""
        if self._reported == (alive, replication_factor):
            return
        self._reported = (alive, replication_factor)
        log.warning(
            "Cannot create %s: %d live broker%s, fewer than offsets.topic.replication.factor"
            "=%d. Consumer groups get COORDINATOR_NOT_AVAILABLE until %d brokers are up "
            "(expected while a cluster starts); with fewer brokers, set "
            "offsets.topic.replication.factor to at most their number on every broker.",
            CONSUMER_OFFSETS,
            alive,
            "" if alive == 1 else "s",
            replication_factor,
            replication_factor,
        )
