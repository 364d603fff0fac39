"""SCRAM credentials in /config/users: Kafka's znode format, and every broker's
cache learning a change from the config change notifications."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from moldau.clock import FakeClock
from moldau.config.broker import BrokerConfig
from moldau.metadata import znodes as z
from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.security.credentials import CredentialCache, ScramMechanism, new_credential
from moldau.server.dynamic_config_manager import DynamicConfigManager
from moldau.storage.log_manager import LogManager


def test_user_names_are_sanitized_as_kafka_does() -> None:
    assert z.user_config_path("alice") == "/config/users/alice"
    assert z.user_config_path("CN=a b,O=c*~") == "/config/users/CN%3Da%20b%2CO%3Dc%2A%7E"
    assert z.desanitize("CN%3Da%20b%2CO%3Dc%2A%7E") == "CN=a b,O=c*~"


def test_a_credential_written_by_one_broker_reaches_anothers_cache(tmp_path: Path) -> None:
    cred = new_credential(ScramMechanism.SCRAM_SHA_256, "pw", 4096)

    async def run() -> None:
        tree = EmbeddedTree(None)
        writer, reader = tree.session(), tree.session()
        for s in (writer, reader):
            await s.start()
        await MetadataClient(writer).create_top_level_paths()
        cache = CredentialCache()
        client = MetadataClient(reader)
        manager = DynamicConfigManager(
            client, BrokerConfig(), LogManager([tmp_path], FakeClock(), 1)
        )
        learned = asyncio.Event()

        async def on_user(user: str) -> None:
            cache.update_user(user, await client.get_user_config(user))
            learned.set()

        manager.user_listeners.append(on_user)
        await manager.start()
        try:
            await MetadataClient(writer).set_user_config("a b", {"SCRAM-SHA-256": cred.to_string()})
            await asyncio.wait_for(learned.wait(), 5)
            assert cache.get("a b", "SCRAM-SHA-256") == cred
            data, _ = await reader.get("/config/users/a%20b")
            assert json.loads(data) == {
                "version": 1,
                "config": {"SCRAM-SHA-256": cred.to_string()},
            }
            assert await client.get_config_users() == ["a b"]
            learned.clear()
            await MetadataClient(writer).set_user_config("a b", {})
            await asyncio.wait_for(learned.wait(), 5)
            assert cache.get("a b", "SCRAM-SHA-256") is None
        finally:
            await manager.close()

    asyncio.run(run())
