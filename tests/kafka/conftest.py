"""Apache Kafka's own Java client, tools and Streams against real Moldau brokers.

`moldau` is one broker as `moldau serve` runs it (the embedded store); `moldau_cluster`
three broker processes on a real ZooKeeper. Kafka's jars come from tests/java
(moldau.testing.kafka_java), built by Maven on first use.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from moldau.testing.cluster import Cluster
from moldau.testing.process import BrokerProcess
from moldau.testing.zookeeper import ZooKeeperServer
from tests.cluster.conftest import zookeeper  # noqa: F401 (a fixture)

# As Kafka's own integration tests: a new group forms at once instead of waiting 3 s
# for more members, which every consumer check would pay.
# And a transaction past its transaction.timeout.ms is aborted within half a second
# rather than within Kafka's default 10 s, which the timeout check would wait.
# Sessions as short as 1 s are allowed (Kafka's tests do the same): Streams' restarts
# wait out their dead member's session (tests/java WordCount).
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="session")
def moldau(tmp_path_factory: pytest.TempPathFactory, kafka_java: Path) -> Iterator[BrokerProcess]:
    """One broker, as `moldau serve` runs it, shared by the tests; each uses its own topics."""
    with BrokerProcess(tmp_path_factory.mktemp("moldau") / "data", BROKER_SETTINGS) as b:
        yield b


@pytest.fixture(scope="session")
def moldau_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeperServer,  # noqa: F811
    kafka_java: Path,
) -> Iterator[Cluster]:
    """Three brokers on ZooKeeper shared by the tests that need no faults."""
    cluster = Cluster(
        tmp_path_factory.mktemp("moldau-cluster"),
        3,
        BROKER_SETTINGS,
        zookeeper=zookeeper,
        chroot=f"/moldau-{uuid.uuid4().hex[:10]}",
    )
    with cluster:
        yield cluster


@pytest.fixture(params=["single", "cluster"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs on one broker and on the three-broker cluster."""
    if request.param == "single":
        return str(request.getfixturevalue("moldau").bootstrap)
    return str(request.getfixturevalue("moldau_cluster").bootstrap)
