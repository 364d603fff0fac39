"""Embedded mode: brokers in this process sharing an in-process metadata store,
persisted under the data dir. No JVM, no ZooKeeper. With several brokers they
replicate over real sockets as on a cluster; only the metadata store and the
controller's requests stay in the process."""

from __future__ import annotations

import copy
from pathlib import Path

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.config.broker import BrokerConfig
from moldau.controller.channel import InProcessTransport
from moldau.metadata.embedded import EmbeddedTree
from moldau.server.broker import Broker, parse_listeners

METADATA_DIR = "@metadata"  # '@' cannot start a topic name, so no log is ever named so


class EmbeddedCluster:
    def __init__(
        self, configs: list[BrokerConfig], metadata_dir: Path, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.tree = EmbeddedTree(metadata_dir)
        self.transport = InProcessTransport()
        self.clock = clock
        self.configs = {c.broker_id: c for c in configs}
        self._brokers = {i: self._new_broker(i) for i in self.configs}

    @property
    def brokers(self) -> list[Broker]:
        """The current Broker of each id (a restart makes a new one)."""
        return list(self._brokers.values())

    def broker(self, broker_id: int) -> Broker:
        return self._brokers[broker_id]

    def _new_broker(self, broker_id: int) -> Broker:
        return Broker(self.configs[broker_id], self.tree.session(), self.transport, self.clock)

    async def start(self) -> None:
        for broker_id in self._brokers:
            await self.start_broker(broker_id)

    async def start_broker(self, broker_id: int) -> Broker:
        """Start a broker, again if it was stopped or killed: same id, same ports
        (those it bound the first time), same data."""
        b = self._brokers[broker_id]
        if b.started:
            return b
        if b.servers:  # it ran before: a Broker does not start twice
            b = self._brokers[broker_id] = self._new_broker(broker_id)
        await b.start()
        self.configs[broker_id] = _with_bound_ports(self.configs[broker_id], b)
        return b

    async def stop_broker(self, broker_id: int) -> None:
        """A clean stop, after a controlled shutdown when other brokers run on."""
        b = self._brokers[broker_id]
        if b.started:
            others = any(o.started for o in self.brokers if o is not b)
            await b.shutdown(controlled=others)

    async def kill_broker(self, broker_id: int) -> None:
        """Stop as kill -9 stops a broker process: nothing flushed, no clean marker,
        its registration gone at once."""
        b = self._brokers[broker_id]
        if b.started:
            await b.halt()

    async def shutdown(self) -> None:
        # The whole process stops: no leadership to move to a broker that stays, and
        # no controller or follower to react to the others going (and log it).
        running = [b for b in reversed(self.brokers) if b.started]
        for b in running:
            await b.replica_manager.close_fetchers()
            await b.controller.close()
        for b in running:
            await b.shutdown(controlled=False)


def _with_bound_ports(config: BrokerConfig, broker: Broker) -> BrokerConfig:
    """`config` with each listener's port 0 replaced by the port it bound."""
    bound = {s.listener_name: s.port for s in broker.servers}
    listeners = [
        f"{lis.name}://{lis.host}:{lis.port or bound.get(lis.name, 0)}"
        for lis in parse_listeners(config["listeners"])
    ]
    fixed = copy.copy(config)
    fixed.values = {**config.values, "listeners": listeners}
    return fixed
