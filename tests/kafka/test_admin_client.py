"""Kafka's AdminClient (kafka-clients 4.1.1) against Moldau, one broker and three:
moldau.it.AdminChecks (tests/java) does what an operator's tool does and asserts
Kafka's answers, one check a test (all of them in one JVM per broker set)."""

from __future__ import annotations

import pytest

from moldau.testing import kafka_java
from tests.cluster.conftest import make_cluster  # noqa: F401 (a fixture)
from tests.cluster.test_replication import MakeCluster, stale_replica
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
    "authorizedOperations",
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
def test_admin_client(request: pytest.FixtureRequest, bootstrap: str, check: str) -> None:
    SUITE.check(request, bootstrap, check)


@pytest.mark.usefixtures("kafka_java")  # built
def test_unclean_election(make_cluster: MakeCluster, topic_name: str) -> None:  # noqa: F811
    """Kafka's AdminClient elects a stale replica of a leaderless partition
    (ElectionType.UNCLEAN) on a cluster of its own, where brokers are killed."""
    s = stale_replica(make_cluster, topic_name)
    done = kafka_java.run(
        "moldau.it.AdminChecks", s.survivors, "uncleanElection", env={"MOLDAU_TOPIC": topic_name}
    )
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    s.unclean_leader_came()
