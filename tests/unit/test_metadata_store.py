"""The embedded MetadataStore keeps ZooKeeper's semantics: versions, ephemeral
nodes, one-shot watches, atomic multi-ops, and persistence of persistent nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    EventType,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SetDataOp,
    WatchedEvent,
)


async def settle() -> None:
    """Let watch callbacks (delivered with call_soon) run."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_versions_and_conditional_writes(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/a", b"1")
        data, stat = await s.get("/a")
        assert (data, stat.version) == (b"1", 0)
        assert (await s.set("/a", b"2", version=0)).version == 1
        with pytest.raises(BadVersionError):
            await s.set("/a", b"3", version=0)
        with pytest.raises(NodeExistsError):
            await s.create("/a")
        with pytest.raises(NoNodeError):
            await s.create("/missing/child")
        await s.create("/x/y/z", make_parents=True)
        with pytest.raises(NotEmptyError):
            await s.delete("/x")
        await s.delete("/x", recursive=True)
        assert await s.exists("/x") is None

    asyncio.run(run())


def test_multi_is_all_or_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/epoch", b"1")
        with pytest.raises(BadVersionError):
            await s.multi([CreateOp("/new"), CheckOp("/epoch", 7)])
        assert await s.exists("/new") is None
        await s.multi([CreateOp("/new"), CheckOp("/epoch", 0), SetDataOp("/epoch", b"2", 0)])
        assert (await s.get("/epoch"))[0] == b"2"

    asyncio.run(run())


def test_ephemeral_nodes_go_with_their_session_and_fire_watches(tmp_path: Path) -> None:
    async def run() -> None:
        tree = EmbeddedTree(tmp_path)
        a, b = tree.session(), tree.session()
        await a.start()
        await b.start()
        await a.create("/brokers", b"")
        await a.create("/brokers/1", b"reg", ephemeral=True)
        events: list[WatchedEvent] = []
        assert await b.get_children("/brokers", events.append) == ["1"]
        await b.exists("/brokers/1", events.append)
        await a.close()
        await settle()
        assert {(e.type, e.path) for e in events} == {
            (EventType.CHILD, "/brokers"),
            (EventType.DELETED, "/brokers/1"),
        }
        assert await b.get_children("/brokers") == []
        with pytest.raises(SessionExpiredError):
            await a.get("/brokers")

    asyncio.run(run())


def test_watches_fire_once(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/n", b"")
        events: list[WatchedEvent] = []
        await s.get("/n", events.append)
        await s.set("/n", b"1")
        await s.set("/n", b"2")
        await settle()
        assert [e.type for e in events] == [EventType.CHANGED]

    asyncio.run(run())


def test_persistent_nodes_survive_reopen_and_ephemeral_ones_do_not(tmp_path: Path) -> None:
    async def run() -> None:
        s = EmbeddedTree(tmp_path).session()
        await s.start()
        await s.create("/keep", b"data")
        await s.set("/keep", b"data2")
        await s.create("/gone", b"", ephemeral=True)
        first = await s.create("/seq-", b"", sequential=True)
        s2 = EmbeddedTree(tmp_path).session()
        await s2.start()
        data, stat = await s2.get("/keep")
        assert (data, stat.version) == (b"data2", 1)
        assert await s2.exists("/gone") is None
        second = await s2.create("/seq-", b"", sequential=True)
        assert (first, second) == ("/seq-0000000000", "/seq-0000000001")

    asyncio.run(run())
