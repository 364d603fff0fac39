"""Cluster mode: one broker per process, its metadata in ZooKeeper
(`zookeeper.connect`). The broker is the same Broker as in embedded mode; only the
metadata store and the controller's transport differ: control requests go over
the wire to the endpoint each broker registered for the inter-broker listener."""

from __future__ import annotations

from moldau.clock import SYSTEM_CLOCK, Clock
from moldau.config.broker import BrokerConfig
from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.security.listeners import broker_listeners, inter_broker_listener
from moldau.server.broker import Broker, inter_broker_authenticator, inter_broker_tls
from moldau.server.control_client import NetworkTransport


class ZooKeeperModeServer:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.store = ZooKeeperStore(
            config["zookeeper.connect"],
            config["zookeeper.session.timeout.ms"],
            config["zookeeper.connection.timeout.ms"],
        )
        # The controller reaches brokers on the inter-broker listener, over TLS if
        # that listener is SSL/SASL_SSL.
        listener = inter_broker_listener(config, broker_listeners(config))
        self._listener = listener.name
        self.transport = NetworkTransport(
            config.broker_id,
            self._endpoint_of,
            config["controller.socket.timeout.ms"],
            ssl_context=inter_broker_tls(config, listener),
            authenticate=inter_broker_authenticator(config, listener),
            clock=clock,
        )
        self.brokers = [Broker(config, self.store, self.transport, clock)]

    def _endpoint_of(self, broker_id: int) -> tuple[str, int] | None:
        """Where `broker_id` listens for the inter-broker listener, as registered."""
        registration = self.brokers[0].controller.ctx.live_brokers.get(broker_id)
        if registration is None:
            return None
        try:
            ep = registration.endpoint(self._listener)
        except KeyError:
            return None
        return ep.host, ep.port

    async def start(self) -> None:
        await self.brokers[0].start()

    async def shutdown(self) -> None:
        for b in self.brokers:
            if b.started:
                await b.shutdown()
        await self.transport.close()
        # Also when the broker did not start: a request still waiting for ZooKeeper
        # (they wait however long) ends only when the store closes.
        await self.store.close()
