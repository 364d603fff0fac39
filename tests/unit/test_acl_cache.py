"""ACLs stored as Kafka stores them (/kafka-acl, /kafka-acl-extended), and each
broker's cache following the change notifications of the others' writes."""

from __future__ import annotations

import asyncio
import json

from moldau.metadata.client import MetadataClient
from moldau.metadata.embedded import EmbeddedTree
from moldau.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from moldau.server.acl_cache import AclCache

ALICE_READ = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
BOB_DENY = AccessControlEntry("User:bob", "1.2.3.4", AclOperation.ALL, AclPermissionType.DENY)
LITERAL = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
PREFIXED = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)


async def until(condition: object, seconds: float = 1.0) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def test_writes_are_kafkas_znodes_and_reach_the_other_brokers_cache() -> None:
    async def run() -> None:
        tree = EmbeddedTree(None)
        one, two = tree.session(), tree.session()
        for s in (one, two):
            await s.start()
        await MetadataClient(one).create_top_level_paths()
        a = AclCache(MetadataClient(one), (), allow_if_no_acl=False)
        b = AclCache(MetadataClient(two), (), allow_if_no_acl=False)
        await a.start()
        await b.start()
        try:
            await a.update(LITERAL, lambda es: [*es, ALICE_READ])
            await a.update(PREFIXED, lambda es: [*es, BOB_DENY])
            data, _ = await one.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {
                "version": 1,
                "acls": [{"principal": "User:alice", "permissionType": "Allow",
                          "operation": "Read", "host": "*"}],
            }  # fmt: skip
            assert await one.exists("/kafka-acl-extended/prefixed/Group/app-") is not None
            assert await one.get_children("/kafka-acl-changes")
            assert await one.get_children("/kafka-acl-extended-changes")

            assert await until(lambda: len(b.authorizer.acls) == 2)
            assert b.authorizer.authorize(
                "User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "orders"
            )
            # The last entry of a pattern removed: its znode goes, every cache forgets it.
            await b.update(LITERAL, lambda es: [e for e in es if e != ALICE_READ])
            assert await one.exists("/kafka-acl/Topic/orders") is None
            assert await until(lambda: len(a.authorizer.acls) == 1)
        finally:
            await a.close()
            await b.close()

    asyncio.run(run())


def test_a_restarted_cache_loads_what_is_stored() -> None:
    async def run() -> None:
        tree = EmbeddedTree(None)
        s = tree.session()
        await s.start()
        client = MetadataClient(s)
        await client.create_top_level_paths()
        first = AclCache(client, (), allow_if_no_acl=False)
        await first.start()
        await first.update(PREFIXED, lambda es: [*es, BOB_DENY])
        await first.close()
        again = AclCache(client, ("User:root",), allow_if_no_acl=True)
        await again.start()
        try:
            [binding] = again.authorizer.acls
            assert binding.pattern == PREFIXED and binding.entry == BOB_DENY
            assert not again.authorizer.authorize(
                "User:bob", "1.2.3.4", AclOperation.READ, ResourceType.GROUP, "app-1"
            )
        finally:
            await again.close()

    asyncio.run(run())


def test_old_change_notifications_are_purged_and_caches_stay_right() -> None:
    async def run() -> None:
        tree = EmbeddedTree(None)
        one, two = tree.session(), tree.session()
        for s in (one, two):
            await s.start()
        await MetadataClient(one).create_top_level_paths()
        writer = AclCache(MetadataClient(one), (), allow_if_no_acl=False)
        follower = AclCache(MetadataClient(two), (), allow_if_no_acl=False)
        await writer.start()
        await follower.start()
        try:
            for i in range(200):
                entry = AccessControlEntry(
                    f"User:u{i}", "*", AclOperation.READ, AclPermissionType.ALLOW
                )
                await writer.update(LITERAL, lambda es, e=entry: [*es, e])
            assert len(await one.get_children("/kafka-acl-changes")) == 100
            assert await until(lambda: len(follower.authorizer.acls) == 200)
        finally:
            await writer.close()
            await follower.close()

    asyncio.run(run())
