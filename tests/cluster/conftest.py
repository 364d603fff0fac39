"""Fixtures for tests on a real ZooKeeper server (a java process the tests start)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

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
