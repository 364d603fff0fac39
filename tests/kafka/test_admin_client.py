"""Kafka's AdminClient (kafka-clients 4.1.1) against Moldau, one broker and three:
moldau.it.AdminChecks (tests/java) does what an operator's tool does and asserts
Kafka's answers, one check a test (all of them in one JVM per broker set)."""

from __future__ import annotations

import pytest

from tests.kafka.checks import CheckSuite

pytestmark = pytest.mark.java

CHECKS = [
    "createDescribeDeleteTopics",
    "deleteTopicByName",
    "createTopicValidateOnly",
    "createTopicErrors",
    "createPartitions",
    "describeCluster",
    "describeFeatures",
    "topicConfigs",
    "brokerConfigs",
    "consumerGroups",
    "consumerGroupOffsets",
    "consumerGroupOffsetsOfActiveGroup",
    "listOffsets",
    "reassignPartitions",
    "reassignmentInProgress",
    "electLeaders",
]


SUITE = CheckSuite("moldau.it.AdminChecks", CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_admin_client(bootstrap: str, check: str) -> None:
    SUITE.check(bootstrap, check)
