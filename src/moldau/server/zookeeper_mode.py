"""Cluster mode: one broker per process, its metadata in ZooKeeper
(`zookeeper.connect`). The broker is the same Broker as in embedded mode; only the
metadata store differs.

Control requests still travel in-process, so a ZooKeeper cluster has one broker for
now: a second broker process needs the inter-broker channel (LeaderAndIsr,
UpdateMetadata and StopReplica on the wire), and start-up refuses to join a
cluster that has another live broker rather than run half-connected."""

from __future__ import annotations

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.config.broker import BrokerConfig
from moldau.controller.channel import InProcessTransport
from moldau.metadata import znodes as z
from moldau.metadata.store import StoreError
from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.server.broker import Broker


class OtherBrokerRegistered(StoreError):
    pass


def _store(config: BrokerConfig) -> ZooKeeperStore:
    return ZooKeeperStore(
        config["zookeeper.connect"],
        config["zookeeper.session.timeout.ms"],
        config["zookeeper.connection.timeout.ms"],
    )


class ZooKeeperModeServer:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.store = _store(config)
        self.transport = InProcessTransport()
        self.brokers = [Broker(config, self.store, self.transport, clock)]

    async def start(self) -> None:
        await self._refuse_other_live_brokers()
        await self.brokers[0].start()

    async def _refuse_other_live_brokers(self) -> None:
        probe = _store(self.config)
        await probe.start()
        try:
            ids = await probe.get_children(z.BROKER_IDS) if await probe.exists(z.BROKER_IDS) else []
        finally:
            await probe.close()
        others = sorted(int(i) for i in ids if int(i) != self.brokers[0].broker_id)
        if others:
            raise OtherBrokerRegistered(
                f"ZooKeeper at {self.config['zookeeper.connect']} already has live broker(s) "
                f"{', '.join(map(str, others))}; this version runs one broker per ZooKeeper "
                "cluster (brokers in several processes need the inter-broker channel, not "
                "built yet)"
            )

    async def shutdown(self) -> None:
        for b in self.brokers:
            if b.started:
                await b.shutdown()
