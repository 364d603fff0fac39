"""What the broker says while __consumer_offsets (or __transaction_state) cannot be
created yet.

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
    """One broker's report that an internal topic (__consumer_offsets,
    __transaction_state) waits for more brokers."""

    def __init__(self) -> None:
        # topic -> (live brokers, RF) last logged
        self._reported: dict[str, tuple[int, int]] = {}

    def report(
        self,
        alive: int,
        replication_factor: int,
        topic: str = CONSUMER_OFFSETS,
        rf_key: str = "offsets.topic.replication.factor",
    ) -> None:
        """Log, once per situation, that the topic's users wait for more brokers."""
        if self._reported.get(topic) == (alive, replication_factor):
            return
        self._reported[topic] = (alive, replication_factor)
        users = "Consumer groups" if topic == CONSUMER_OFFSETS else "Transactional producers"
        log.warning(
            "Cannot create %s: %d live broker%s, fewer than %s=%d. %s get "
            "COORDINATOR_NOT_AVAILABLE until %d brokers are up (expected while a cluster "
            "starts); with fewer brokers, set %s to at most their number on every broker.",
            topic,
            alive,
            "" if alive == 1 else "s",
            rf_key,
            replication_factor,
            users,
            replication_factor,
            rf_key,
        )
