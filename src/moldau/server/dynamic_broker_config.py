"""Broker configs changed at run time (Kafka's dynamic broker configs: the replication
quotas, and the broker properties that are topics' defaults, as Kafka's
DynamicLogConfig): stored in /config/brokers/<id> for one broker and
/config/brokers/<default> for all, announced through /config/changes, and resolved
per broker > cluster default > server.properties > Kafka's default."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from moldau.config.broker import BROKER_CONFIG, BrokerConfig, config_synonyms
from moldau.config.configdef import ConfigKey
from moldau.config.topic import BrokerDefaults, ConfigSource
from moldau.metadata.client import MetadataClient
from moldau.metadata.znodes import DEFAULT_BROKER_ENTITY
from moldau.protocol.errors import InvalidConfigError

log = logging.getLogger(__name__)


class DynamicBrokerConfig(BrokerDefaults):
    def __init__(self, client: MetadataClient, static: BrokerConfig) -> None:
        self.client = client
        self.static = static
        self.entity = str(static.broker_id)
        self.per_broker: dict[str, str] = {}
        self.defaults: dict[str, str] = {}
        # Called after a change of this broker's dynamic configs.
        self.listeners: list[Callable[[], None]] = []

    async def load(self) -> None:
        self.per_broker = await self.client.get_broker_config(self.entity)
        self.defaults = await self.client.get_broker_config(DEFAULT_BROKER_ENTITY)

    async def on_change(self, entity: str) -> None:
        """A /config/changes notification for `brokers/<entity>`."""
        if entity not in (self.entity, DEFAULT_BROKER_ENTITY):
            return
        await self.load()
        log.info("broker %s dynamic configs: %s, defaults %s", self.entity, self.per_broker,
                 self.defaults)  # fmt: skip
        for listener in self.listeners:
            listener()

    def __getitem__(self, name: str) -> Any:
        value, _ = self.value_and_source(name)
        return value

    def _dynamic(self, name: str) -> tuple[Any, ConfigSource] | None:
        for layer, source in (
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.defaults, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ):
            if name in layer:
                try:
                    return BROKER_CONFIG.parse_value(name, layer[name]), source
                except InvalidConfigError as e:
                    log.warning("ignoring dynamic %s: %s", name, e)
        return None

    # -- BrokerDefaults: what topics take from the broker --------------------------------

    def is_set(self, name: str) -> bool:
        return self.static.is_set(name)

    def topic_default(self, key: ConfigKey) -> Any:
        if key.server_default is not None:
            dynamic = self._dynamic(key.server_default)
            if dynamic is not None:
                return dynamic[0]
        return self.static.topic_default(key)

    def synonyms(self, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        dynamic = [
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.defaults, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ]
        return config_synonyms(name, dynamic, self.static)

    def value_and_source(self, name: str) -> tuple[Any, ConfigSource]:
        dynamic = self._dynamic(name)
        if dynamic is not None:
            return dynamic
        if name in self.static.explicit:
            return self.static[name], ConfigSource.STATIC_BROKER_CONFIG
        return self.static[name], ConfigSource.DEFAULT_CONFIG
