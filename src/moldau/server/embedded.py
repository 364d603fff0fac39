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
from moldau.metadata.embedded import EmbeddedSession, EmbeddedTree
from moldau.security.listeners import broker_listeners
from moldau.server.broker import Broker

METADATA_DIR = "@metadata"  # '@' cannot start a topic name, so no log is ever named so


class EmbeddedCluster:
    def __init__(
        self, configs: list[BrokerConfig], metadata_dir: Path, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.tree = EmbeddedTree(metadata_dir)
        self.transport = InProcessTransport()
        self.clock = clock
        self.configs = {c.broker_id: c for c in configs}
        # Brokers cut off the network: they reach nobody and nobody reaches them.
        self.isolated: set[int] = set()
        self._sessions: dict[int, EmbeddedSession] = {}
        self._brokers = {i: self._new_broker(i) for i in self.configs}

    @property
    def brokers(self) -> list[Broker]:
        """The current Broker of each id (a restart makes a new one)."""
        return list(self._brokers.values())

    def broker(self, broker_id: int) -> Broker:
        return self._brokers[broker_id]

    def _new_broker(self, broker_id: int) -> Broker:
        def reachable(other: int) -> bool:
            return broker_id not in self.isolated and other not in self.isolated

        session = self._sessions[broker_id] = self.tree.session()
        transport = self.transport.for_broker(reachable)
        return Broker(self.configs[broker_id], session, transport, self.clock, reachable=reachable)

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

    def isolate_broker(self, broker_id: int) -> None:
        """Cut a broker off the network, as a partition would: its connections drop,
        the others' requests to it and its requests to them fail, its metadata
        session is unreachable and expires after zookeeper.session.timeout.ms. It
        runs on, as a partitioned broker process does."""
        self.isolated.add(broker_id)
        self._brokers[broker_id].isolate(True)
        timeout_s = self.configs[broker_id]["zookeeper.session.timeout.ms"] / 1000
        self._sessions[broker_id].isolate(timeout_s)

    def heal_broker(self, broker_id: int) -> None:
        """Put an isolated broker back: it reconnects (registering again if its
        session expired) and catches up."""
        self.isolated.discard(broker_id)
        self._brokers[broker_id].isolate(False)
        self._sessions[broker_id].heal()

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
        for lis in broker_listeners(config)
    ]
    fixed = copy.copy(config)
    fixed.values = {**config.values, "listeners": listeners}
    return fixed
