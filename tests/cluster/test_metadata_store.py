"""Both MetadataStore backends keep ZooKeeper's semantics: versions and conditional
writes, atomic multi-ops, ephemeral nodes that go with their session, one-shot
watches delivered on the event loop, sequential nodes. The zookeeper backend runs
against a real ZooKeeper server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from moldau.metadata.embedded import EmbeddedTree
from moldau.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EventType,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionState,
    SetDataOp,
    StoreError,
    WatchedEvent,
)
from moldau.metadata.zookeeper import ZooKeeperStore, split_connect
from moldau.testing.zookeeper import ZooKeeperServer, expire_session

Sessions = Callable[[], MetadataStore]


@pytest.fixture(params=["embedded", "zookeeper"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Sessions:
    """Makes new (unstarted) sessions of one store."""
    if request.param == "embedded":
        tree = EmbeddedTree(tmp_path)
        return tree.session
    connect: str = request.getfixturevalue("zk_connect")
    return lambda: ZooKeeperStore(connect, session_timeout_ms=4000)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 60))


async def started(s: MetadataStore) -> MetadataStore:
    await s.start()
    return s


async def until(events: list[WatchedEvent], n: int) -> None:
    """Wait (bounded) until `n` watch events arrived; they come on the event loop."""
    for _ in range(200):
        if len(events) >= n:
            return
        await asyncio.sleep(0.01)


def test_get_many_reads_each_node_or_none(sessions: Sessions) -> None:
    async def body() -> None:
        s = await started(sessions())
        try:
            paths = [f"/many/{i}" for i in range(2500)]  # more than one pipelined chunk
            await s.create("/many")
            await s.multi([CreateOp(p, str(i).encode()) for i, p in enumerate(paths[::2])])
            await s.set(paths[0], b"again")
            got = await s.get_many([*paths, "/nowhere"])
            assert got[0] is not None and (got[0][0], got[0][1].version) == (b"again", 1)
            assert [None if g is None else g[0] for g in got[2:-1:2]] == [
                str(i).encode() for i in range(1, len(paths[::2]))
            ]
            assert got[1::2] == [None] * (len(paths) // 2)
            assert got[-1] is None
        finally:
            await s.close()

    run(body)


def test_versions_and_conditional_writes(sessions: Sessions) -> None:
    async def body() -> None:
        s = await started(sessions())
        try:
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
            with pytest.raises(NoNodeError):
                await s.get("/missing")
            assert await s.exists("/missing") is None
            await s.create("/x/y/z", make_parents=True)
            with pytest.raises(NotEmptyError):
                await s.delete("/x")
            await s.delete("/x", recursive=True)
            assert await s.exists("/x") is None
            assert await s.get_or_none("/x") is None
        finally:
            await s.close()

    run(body)


def test_multi_is_all_or_nothing(sessions: Sessions) -> None:
    async def body() -> None:
        s = await started(sessions())
        try:
            await s.create("/epoch", b"1")
            with pytest.raises(BadVersionError):
                await s.multi([CreateOp("/new"), CheckOp("/epoch", 7)])
            assert await s.exists("/new") is None
            with pytest.raises(NodeExistsError):
                await s.multi([SetDataOp("/epoch", b"9"), CreateOp("/epoch")])
            assert (await s.get("/epoch"))[0] == b"1"
            results = await s.multi(
                [CreateOp("/new", b"n"), CheckOp("/epoch", 0), SetDataOp("/epoch", b"2", 0)]
            )
            assert results[0] == "/new"
            assert results[2] is not None and results[2].version == 1  # type: ignore[union-attr]
            assert (await s.get("/epoch"))[0] == b"2"
            await s.multi([DeleteOp("/new", 0)])
            assert await s.exists("/new") is None
        finally:
            await s.close()

    run(body)


def test_ephemeral_nodes_go_with_their_session_and_fire_watches(sessions: Sessions) -> None:
    async def body() -> None:
        a, b = await started(sessions()), await started(sessions())
        try:
            assert a.session_id != b.session_id
            await a.create("/brokers", b"")
            await a.create("/brokers/1", b"reg", ephemeral=True)
            stat = await b.exists("/brokers/1")
            assert stat is not None and stat.ephemeral_owner == a.session_id
            events: list[WatchedEvent] = []
            assert await b.get_children("/brokers", events.append) == ["1"]
            await b.exists("/brokers/1", events.append)
            await a.close()
            await until(events, 2)
            assert {(e.type, e.path) for e in events} == {
                (EventType.CHILD, "/brokers"),
                (EventType.DELETED, "/brokers/1"),
            }
            assert await b.get_children("/brokers") == []
            with pytest.raises(SessionExpiredError):
                await a.get("/brokers")
        finally:
            await b.close()

    run(body)


def test_watches_fire_once_and_see_creation(sessions: Sessions) -> None:
    async def body() -> None:
        s = await started(sessions())
        try:
            await s.create("/n", b"")
            events: list[WatchedEvent] = []
            await s.get("/n", events.append)
            await s.get("/n", events.append)  # the same watcher twice: one event
            await s.set("/n", b"1")
            await s.set("/n", b"2")
            await until(events, 1)
            await asyncio.sleep(0.1)
            assert [(e.type, e.path) for e in events] == [(EventType.CHANGED, "/n")]
            created: list[WatchedEvent] = []
            assert await s.get_or_none("/later", created.append) is None
            await s.create("/later", b"")
            await until(created, 1)
            assert [(e.type, e.path) for e in created] == [(EventType.CREATED, "/later")]
        finally:
            await s.close()

    run(body)


def test_sequential_nodes_count_up_per_parent(sessions: Sessions) -> None:
    async def body() -> None:
        s = await started(sessions())
        try:
            await s.create("/changes", b"")
            first = await s.create("/changes/c_", b"1", sequential=True)
            second = await s.create("/changes/c_", b"2", sequential=True)
            assert (first, second) == ("/changes/c_0000000000", "/changes/c_0000000001")
            assert await s.get_children("/changes") == ["c_0000000000", "c_0000000001"]
        finally:
            await s.close()

    run(body)


def test_an_expired_zookeeper_session_drops_ephemerals_and_tells_watchers(
    zookeeper: ZooKeeperServer, zk_connect: str
) -> None:
    async def body() -> None:
        s = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        observer = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        await s.start()
        await observer.start()
        try:
            await s.create("/brokers/ids/1", b"reg", ephemeral=True, make_parents=True)
            mine: list[WatchedEvent] = []
            await s.get("/brokers/ids/1", mine.append)
            seen: list[WatchedEvent] = []
            await observer.exists("/brokers/ids/1", seen.append)
            states: list[SessionState] = []
            s.add_session_listener(states.append)
            old = s.session_id
            creds = s.credentials
            assert creds is not None
            await asyncio.to_thread(expire_session, zookeeper.connect, creds)
            await until(seen, 1)
            await until(mine, 1)
            assert [(e.type, e.path) for e in seen] == [(EventType.DELETED, "/brokers/ids/1")]
            assert [e.type for e in mine] == [EventType.SESSION_EXPIRED]
            # As Kafka's ZooKeeperClient does, the store goes on with a new session,
            # its listeners told before any answer on it.
            assert await observer.exists("/brokers/ids/1") is None
            await s.create("/brokers/ids/1", b"reg", ephemeral=True)
            assert states == [SessionState.EXPIRED, SessionState.RENEWED]
            assert s.session_id not in (0, old)
        finally:
            await s.close()
            await observer.close()

    run(body)


def test_an_embedded_session_cut_off_past_its_timeout_is_heard_expired_then_renewed(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        tree = EmbeddedTree(tmp_path)
        s = tree.session()
        await s.start()
        observer = await started(tree.session())
        await s.create("/brokers/ids/1", b"reg", ephemeral=True, make_parents=True)
        states: list[SessionState] = []
        s.add_session_listener(states.append)
        s.isolate(0)
        for _ in range(100):
            if await observer.exists("/brokers/ids/1") is None:
                break
            await asyncio.sleep(0.01)
        assert await observer.exists("/brokers/ids/1") is None
        assert states == []  # it learns of the expiry when it is back
        old = s.session_id
        s.heal()
        assert states == [SessionState.EXPIRED, SessionState.RENEWED]
        await s.create("/brokers/ids/1", b"reg", ephemeral=True)
        assert s.session_id != old

    run(body)


def test_zookeeper_connect_strings() -> None:
    assert split_connect("h1:2181,h2:2181") == ("h1:2181,h2:2181", "")
    assert split_connect("h1:2181/kafka/prod") == ("h1:2181", "/kafka/prod")
    assert split_connect("h1:2181/") == ("h1:2181", "")
    with pytest.raises(ValueError):
        split_connect("/kafka")
    with pytest.raises(ValueError):
        split_connect("h:1/a//b")


def test_an_unreachable_zookeeper_is_one_clear_error() -> None:
    async def body() -> None:
        s = ZooKeeperStore("127.0.0.1:1", session_timeout_ms=2000, connection_timeout_ms=1000)
        with pytest.raises(StoreError, match=r"cannot reach ZooKeeper at 127\.0\.0\.1:1"):
            await s.start()

    run(body)


def test_concurrent_producer_id_requests_share_one_claimed_block(sessions: Sessions) -> None:
    from moldau.coordinator.producer_ids import ProducerIdManager

    async def body() -> None:
        s = await started(sessions())
        try:
            manager = ProducerIdManager(1, s)
            ids = await asyncio.gather(*(manager.generate() for _ in range(20)))
            assert sorted(ids) == list(range(20))
        finally:
            await s.close()

    run(body)
