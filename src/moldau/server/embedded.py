"""Embedded mode: brokers in this process sharing an in-process metadata store,
persisted under the data dir. No JVM, no ZooKeeper."""

from __future__ import annotations

from pathlib import Path

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.config.broker import BrokerConfig
from moldau.controller.channel import InProcessTransport
from moldau.metadata.embedded import EmbeddedTree
from moldau.server.broker import Broker

METADATA_DIR = "@metadata"  # '@' cannot start a topic name, so no log is ever named so


class EmbeddedCluster:
    def __init__(
        self, configs: list[BrokerConfig], metadata_dir: Path, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.tree = EmbeddedTree(metadata_dir)
        self.transport = InProcessTransport()
        self.brokers = [Broker(c, self.tree.session(), self.transport, clock) for c in configs]

    async def start(self) -> None:
        for b in self.brokers:
            await b.start()

    async def shutdown(self) -> None:
        for b in reversed(self.brokers):
            if b.started:
                await b.shutdown()
