"""SCRAM credentials in /config/users on both metadata backends (ZooKeeper: a real
server): written through one session, learned by another broker's cache from the
config change notifications, in Kafka's znode format."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.config.broker import BrokerConfig
from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import MetadataStore
from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.security.credentials import CredentialCache, ScramMechanism, new_credential
from moldau.server.dynamic_config_manager import DynamicConfigManager
from moldau.storage.log_manager import LogManager


@pytest.mark.parametrize("backend", ["embedded", "zookeeper"])
def test_a_credential_reaches_another_brokers_cache(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if backend == "embedded":
        tree = EmbeddedTree(tmp_path / "meta")
        sessions: list[MetadataStore] = [tree.session(), tree.session()]
    else:
        connect: str = request.getfixturevalue("zk_connect")
        sessions = [ZooKeeperStore(connect, session_timeout_ms=4000) for _ in range(2)]
    cred = new_credential(ScramMechanism.SCRAM_SHA_512, "pw", 4096)

    async def run() -> None:
        for s in sessions:
            await s.start()
        writer, reader = MetadataClient(sessions[0]), MetadataClient(sessions[1])
        await writer.create_top_level_paths()
        cache = CredentialCache()
        manager = DynamicConfigManager(
            reader, BrokerConfig(), LogManager([tmp_path / "logs"], FakeClock(), 1)
        )
        learned = asyncio.Event()

        async def on_user(user: str) -> None:
            cache.update_user(user, await reader.get_user_config(user))
            learned.set()

        manager.user_listeners.append(on_user)
        await manager.start()
        try:
            await writer.set_user_config("CN=bob,O=x", {"SCRAM-SHA-512": cred.to_string()})
            await asyncio.wait_for(learned.wait(), 10)
            assert cache.get("CN=bob,O=x", "SCRAM-SHA-512") == cred
            data, _ = await sessions[1].get("/config/users/CN%3Dbob%2CO%3Dx")
            assert json.loads(data)["config"] == {"SCRAM-SHA-512": cred.to_string()}
            assert await reader.get_config_users() == ["CN=bob,O=x"]
        finally:
            await manager.close()
            for s in sessions:
                await s.close()

    asyncio.run(asyncio.wait_for(run(), 60))
