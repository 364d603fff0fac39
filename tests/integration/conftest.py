"""Fixtures that start real brokers (`python -m moldau serve` processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from moldau.testing.process import BrokerProcess

# As Kafka's own integration tests: a new group forms at once instead of waiting 3 s
# for more members, which every test with a consumer group would pay; and members may
# ask for sessions shorter than 6 s, so that a test's killed member is noticed sooner.
SHARED_BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by the tests that only need a broker; each test uses its
    own topics."""
    data = tmp_path_factory.mktemp("shared") / "data"
    with BrokerProcess(data, SHARED_BROKER_SETTINGS) as b:
        yield b


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, for tests that stop, kill or reconfigure it."""
    b = BrokerProcess(tmp_path / "data")
    try:
        yield b
    finally:
        b.kill()
