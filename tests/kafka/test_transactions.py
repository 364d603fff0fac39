"""Kafka's transactional producer and read_committed consumer (kafka-clients 4.1.1)
against Moldau, one broker and three: moldau.it.TransactionChecks (tests/java) commits
and aborts, commits a group's offsets inside transactions with the consumer's group
metadata (KIP-447), fences a zombie producer, has the coordinator abort a transaction
past its transaction.timeout.ms, and holds a read_committed consumer at the last stable
offset of an open transaction; one check a test (all of them in one JVM per broker set)."""

from __future__ import annotations

import pytest

from tests.kafka.checks import CheckSuite

pytestmark = pytest.mark.java

CHECKS = [
    "commitAndAbort",
    "abortTransaction",
    "sendOffsetsToTransaction",
    "staleGroupMetadataRefused",
    "fencing",
    "transactionTimeout",
    "readCommittedStopsAtLso",
]

SUITE = CheckSuite("moldau.it.TransactionChecks", CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_transactions(request: pytest.FixtureRequest, bootstrap: str, check: str) -> None:
    SUITE.check(request, bootstrap, check)
