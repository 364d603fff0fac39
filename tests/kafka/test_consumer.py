"""Kafka's consumer (kafka-clients 4.1.1, group.protocol=classic) against Moldau, one
broker and three: moldau.it.ConsumerChecks (tests/java) runs assignors and
rebalances with members in threads, static membership, commits, seeks, pause/resume,
offsets by time, auto.offset.reset, and the KIP-848 protocol Moldau lacks; one check a
test (all of them in one JVM per broker set)."""

from __future__ import annotations

import pytest

from tests.kafka.checks import CheckSuite

pytestmark = pytest.mark.java

CHECKS = [
    "rangeAssignor",
    "roundRobinAssignor",
    "cooperativeSticky",
    "staticMembership",
    "staticMemberFenced",
    "commitSyncAndAsync",
    "positionAfterRestart",
    "seek",
    "pauseResume",
    "offsetsForTimes",
    "autoOffsetReset",
    "maxPollRecords",
    "consumerGroupProtocolRefused",
]

SUITE = CheckSuite("moldau.it.ConsumerChecks", CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_consumer(request: pytest.FixtureRequest, bootstrap: str, check: str) -> None:
    SUITE.check(request, bootstrap, check)
