"""The broker's follower of /config/changes outlives a store out of reach: it read the
notifications once, and a read that failed (the store gone past its client's retries)
ended it for good, so the broker applied no config change again until a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moldau.clock import FakeClock
from moldau.config.broker import BrokerConfig
from moldau.metadata.store import StoreError
from moldau.server.dynamic_config_manager import DynamicConfigManager
from moldau.storage.log_manager import LogManager


class Store:
    """The three reads the manager makes, failing while `down`."""

    def __init__(self) -> None:
        self.down = False
        self.changes: dict[str, str] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.watch: Callable[[Any], None] | None = None

    def _check(self) -> None:
        if self.down:
            raise StoreError("ConnectionLoss")

    async def get_config_changes(self, watch: Callable[[Any], None] | None = None) -> list[str]:
        self._check()
        if watch is not None:
            self.watch = watch
        return sorted(self.changes)

    async def get_config_change(self, name: str) -> str | None:
        self._check()
        return self.changes.get(name)

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        self._check()
        return self.topic_configs.get(topic, {})

    def notify(self, seq: int, entity: str) -> None:
        self.changes[f"config_change_{seq:010d}"] = entity
        if self.watch is not None:
            watch, self.watch = self.watch, None
            watch(None)


def test_config_changes_are_applied_again_once_the_store_is_back(tmp_path: Path) -> None:
    async def run() -> None:
        store = Store()
        manager = DynamicConfigManager(
            store,  # type: ignore[arg-type]
            BrokerConfig(),
            LogManager([tmp_path], FakeClock(), 1),
            retry_backoff_s=0.01,
        )
        await manager.start()
        store.topic_configs["t"] = {"retention.ms": "1000"}
        store.down = True
        store.notify(1, "topics/t")  # the watch fires; the read that follows fails
        await asyncio.sleep(0.1)
        assert "t" not in manager.overrides
        store.down = False
        for _ in range(100):
            if manager.overrides.get("t"):
                break
            await asyncio.sleep(0.01)
        assert manager.overrides.get("t") == {"retention.ms": "1000"}
        store.topic_configs["t"] = {"retention.ms": "2000"}
        store.notify(2, "topics/t")  # and it watches again
        for _ in range(100):
            if manager.overrides["t"] == {"retention.ms": "2000"}:
                break
            await asyncio.sleep(0.01)
        assert manager.overrides["t"] == {"retention.ms": "2000"}
        await manager.close()

    asyncio.run(run())
