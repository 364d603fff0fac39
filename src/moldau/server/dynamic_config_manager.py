"""Kafka's DynamicConfigManager: follows the /config/changes notifications. Topic
config overrides are loaded from /config/topics, kept current, and resolved
against the broker's defaults (dynamic ones included) into each log's LogConfig;
notifications about brokers' dynamic configs go to `broker_listeners`
(DynamicBrokerConfig), which calls `reconfigure` after a change; those about users
to `user_listeners` (SCRAM credentials), and those about users and client-ids to
`quota_listeners` (client quotas)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from moldau.config.topic import BrokerDefaults, log_config, resolve
from moldau.metadata.client import MetadataClient
from moldau.metadata.store import StoreError, WatchedEvent
from moldau.metadata.znodes import CONFIG_CHANGE_PREFIX, desanitize
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.tasks import TaskOwner

log = logging.getLogger(__name__)


class DynamicConfigManager:
    def __init__(
        self,
        client: MetadataClient,
        broker: BrokerDefaults,
        log_manager: LogManager,
        retry_backoff_s: float = 1.0,
    ) -> None:
        self.client = client
        self.retry_backoff_s = retry_backoff_s
        self.broker = broker
        self.log_manager = log_manager
        self.overrides: dict[str, dict[str, str]] = {}
        self._resolved: dict[str, LogConfig] = {}
        self._last_change = -1
        self._changes = asyncio.Event()
        self._tasks = TaskOwner("dynamic-config-manager")
        # Called with a topic's name after its overrides changed.
        self.listeners: list[Callable[[str], None]] = []
        # Called with the entity (a broker id or <default>) of a broker config change.
        self.broker_listeners: list[Callable[[str], Awaitable[None]]] = []
        # Called with a user's name after its /config/users entry changed.
        self.user_listeners: list[Callable[[str], Awaitable[None]]] = []
        # Called with the entity path (users/<u>, users/<u>/clients/<c>, clients/<c>)
        # of a change that may be about client quotas.
        self.quota_listeners: list[Callable[[str], Awaitable[None]]] = []

    async def load(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self.overrides[topic] = await self.client.get_topic_config(topic)
            self._resolved.pop(topic, None)

    async def ensure_loaded(self, topics: Iterable[str]) -> None:
        new = [t for t in dict.fromkeys(topics) if t not in self.overrides]
        await self.load(new)
        # Overrides a topic was created with (or that a restarted broker finds) come
        # with no change notification; they take effect here, as a change's would
        # (a throttle on the replicas of a topic created with one, for instance).
        for topic in new:
            if self.overrides.get(topic):
                for listener in self.listeners:
                    listener(topic)

    def forget(self, topic: str) -> None:
        self.overrides.pop(topic, None)
        self._resolved.pop(topic, None)

    def values(self, topic: str) -> dict[str, Any]:
        return resolve(self.overrides.get(topic, {}), self.broker)

    def log_config(self, topic: str) -> LogConfig:
        config = self._resolved.get(topic)
        if config is None:
            config = log_config(self.values(topic))
            self._resolved[topic] = config
        return config

    def reconfigure(self) -> None:
        """The broker's defaults changed: every log takes its topic's config anew."""
        self._resolved.clear()
        for tp, lg in self.log_manager.logs.items():
            lg.update_config(self.log_config(tp.topic))
        for topic in list(self.overrides):
            for listener in self.listeners:
                listener(topic)

    # -- change notifications ------------------------------------------------------------

    async def start(self) -> None:
        # Notifications older than start-up are already reflected in what load() reads.
        names = await self.client.get_config_changes()
        self._last_change = max((_seq(n) for n in names), default=-1)
        self._tasks.spawn(self._watch_changes(), "changes")

    async def close(self) -> None:
        await self._tasks.close()

    def _on_change(self, _: WatchedEvent) -> None:
        self._changes.set()

    async def _watch_changes(self) -> None:
        backoff = self.retry_backoff_s
        while True:
            self._changes.clear()
            try:
                await self._process_changes()
            except StoreError as e:
                # The store is out of reach for longer than its client retries (or the
                # session ended): the watch may not be set, so read again after a
                # pause rather than end, which left the broker deaf to config changes
                # until a restart.
                log.warning("config change notifications unread (%s); retrying in %.1f s",
                            e, backoff)  # fmt: skip
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10 * self.retry_backoff_s)
                continue
            backoff = self.retry_backoff_s
            await self._changes.wait()

    async def _process_changes(self) -> None:
        names = await self.client.get_config_changes(self._on_change)
        for name in sorted(names, key=_seq):
            seq = _seq(name)
            if seq <= self._last_change:
                continue
            entity = await self.client.get_config_change(name)
            if entity is not None and entity.startswith("topics/"):
                await self._apply(entity.split("/", 1)[1])
            elif entity is not None and entity.startswith("brokers/"):
                for listener in self.broker_listeners:
                    await listener(entity.split("/", 1)[1])
            elif entity is not None and entity.startswith(("users/", "clients/")):
                kind, _, rest = entity.partition("/")
                if kind == "users" and "/" not in rest:  # not a user's client-id
                    for listener in self.user_listeners:
                        await listener(desanitize(rest))
                for quota_listener in self.quota_listeners:
                    await quota_listener(entity)
            # Only once applied: a change whose reading failed is read again.
            self._last_change = seq

    async def _apply(self, topic: str) -> None:
        await self.load([topic])
        config = self.log_config(topic)
        for tp, lg in self.log_manager.logs.items():
            if tp.topic == topic:
                lg.update_config(config)
        log.info("topic %s config is now %s", topic, self.overrides.get(topic))
        for listener in self.listeners:
            listener(topic)


def _seq(name: str) -> int:
    return int(name[len(CONFIG_CHANGE_PREFIX) :])
