"""An embedded broker in the test's own process, for tests that look inside it (its
controller, its request metrics) or hold part of its start-up back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from moldau.config.broker import BrokerConfig
from moldau.server.broker import Broker
from moldau.server.embedded import METADATA_DIR, EmbeddedCluster


def single_broker(data: Path, overrides: Mapping[str, str] | None = None) -> EmbeddedCluster:
    """One embedded broker (id 1) on a free port of 127.0.0.1, its data in `data`."""
    config = BrokerConfig(
        {
            "broker.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data),
            **(overrides or {}),
        }
    )
    return EmbeddedCluster([config], data / METADATA_DIR)


@asynccontextmanager
async def running_broker(
    data: Path, overrides: Mapping[str, str] | None = None
) -> AsyncIterator[Broker]:
    """`single_broker`, started, and shut down cleanly on the way out."""
    cluster = single_broker(data, overrides)
    await cluster.start()
    try:
        yield cluster.brokers[0]
    finally:
        await cluster.shutdown()
