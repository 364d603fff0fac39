"""Fixtures that start real brokers (`python -m moldau serve` processes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from moldau.testing.process import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by the tests that only need a broker; each test uses its
    own topics."""
    data = tmp_path_factory.mktemp("shared") / "data"
    with BrokerProcess(data) as b:
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
