"""Fixtures for tests on a real ZooKeeper server (a java process the tests start)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from moldau.testing.cluster import Cluster
from moldau.testing.zookeeper import ZooKeeperServer, zookeeper_available


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    why = zookeeper_available()
    if why is not None:
        pytest.fail(f"ZooKeeper cannot run here ({why}); scripts/test.sh installs it")
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A zookeeper.connect string with a chroot no other test uses."""
    return f"{zookeeper.connect}/moldau-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Callable[..., Cluster]]:
    """Starts clusters of broker processes on the shared ZooKeeper, each in a chroot
    of its own; kills them all at the end of the test, whatever happened."""
    started: list[Cluster] = []

    def make(brokers: int = 3, **overrides: str) -> Cluster:
        cluster = Cluster(
            tmp_path / f"cluster-{len(started)}",
            brokers,
            overrides,
            zookeeper=zookeeper,
            chroot=f"/moldau-{uuid.uuid4().hex[:10]}",
        )
        started.append(cluster)
        return cluster.start()

    yield make
    for cluster in started:
        cluster.close()
