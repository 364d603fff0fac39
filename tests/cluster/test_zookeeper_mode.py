"""`moldau serve` with zookeeper.connect: a real broker process keeps its metadata
in a real ZooKeeper server, in Kafka's znode layout, and finds it again after
kill -9; mistakes get one clear line and a non-zero exit."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

from moldau.testing.process import BrokerProcess
from moldau.testing.zookeeper import ZooKeeperServer, read_znodes
from tests.integration.clients import confluent_consume, confluent_produce, create_topic
from tests.integration.test_serve import serve as serve_cli

SESSION_MS = "2000"


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return serve_cli("--host", "127.0.0.1", "--port", "0", *args, timeout=60)


def test_metadata_lives_in_zookeeper_and_survives_kill_9(
    tmp_path: Path, zk_connect: str, topic_name: str
) -> None:
    overrides = {"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": SESSION_MS}
    b = BrokerProcess(tmp_path / "data", overrides)
    try:
        b.start()
        create_topic(b.bootstrap, topic_name, 3)
        records = [(f"k{i}".encode(), f"v{i}".encode(), []) for i in range(100)]
        assert confluent_produce(b.bootstrap, topic_name, records) == list(range(100))  # type: ignore[arg-type]

        nodes = read_znodes(
            zk_connect,
            ["/brokers/ids/1", f"/brokers/topics/{topic_name}", "/controller", "/cluster/id"],
        )
        assert json.loads(nodes["/brokers/ids/1"] or b"{}")["port"] == b.port
        assert json.loads(nodes[f"/brokers/topics/{topic_name}"] or b"{}")["partitions"] == {
            "0": [1],
            "1": [1],
            "2": [1],
        }
        assert json.loads(nodes["/controller"] or b"{}")["brokerid"] == 1
        assert nodes["/cluster/id"] is not None
        # Nothing of the embedded store is written in this mode.
        assert not (tmp_path / "data" / "@metadata").exists()

        b.kill()
        # Within the old session's timeout its registration is still there; the new
        # process waits it out and comes back with the topic and every record.
        b.start(timeout=60)
        got = confluent_consume(b.bootstrap, topic_name, 100, partition=0)
        assert [(g[1], g[2], g[3]) for g in got] == [
            (i, k, v) for i, (k, v, _) in enumerate(records)
        ]
    finally:
        b.kill()


def test_an_unreachable_zookeeper_is_one_line_and_a_non_zero_exit(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    result = serve(
        "--data-dir", str(tmp_path / "data"),
        "--override", "zookeeper.connect=127.0.0.1:1",
        "--override", "zookeeper.connection.timeout.ms=1000",
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("moldau serve:")]
    assert len(lines) == 1 and "cannot reach ZooKeeper at 127.0.0.1:1" in lines[0]


def test_a_broker_whose_session_expires_registers_again_and_keeps_serving(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_connect: str, topic_name: str
) -> None:
    from moldau.config.broker import BrokerConfig
    from moldau.server.zookeeper_mode import ZooKeeperModeServer
    from moldau.testing.zookeeper import expire_session

    config = BrokerConfig(
        {
            "broker.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / "data"),
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": SESSION_MS,
        }
    )

    async def body() -> None:
        server = ZooKeeperModeServer(config)
        await server.start()
        try:
            broker = server.brokers[0]
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name, 1)
            before = server.store.session_id
            credentials = server.store.credentials
            assert credentials is not None
            await asyncio.to_thread(expire_session, zookeeper.connect, credentials)

            async def registered_again_and_controller() -> bool:
                stat = await server.store.exists("/brokers/ids/1")
                controller = await server.store.get_or_none("/controller")
                return (
                    stat is not None
                    and stat.ephemeral_owner not in (0, before)
                    and controller is not None
                    and json.loads(controller[0])["brokerid"] == 1
                )

            for _ in range(300):
                if await registered_again_and_controller():
                    break
                await asyncio.sleep(0.05)
            assert await registered_again_and_controller()
            records = [(b"k", f"v{i}".encode(), []) for i in range(10)]
            offsets = await asyncio.to_thread(confluent_produce, bootstrap, topic_name, records)
            assert offsets == list(range(10))
            got = await asyncio.to_thread(confluent_consume, bootstrap, topic_name, 10)
            assert [g[3] for g in got] == [r[1] for r in records]
        finally:
            await server.shutdown()

    asyncio.run(asyncio.wait_for(body(), 90))


def test_a_zookeeper_pause_within_the_session_changes_nothing_and_an_expiry_renews(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_connect: str
) -> None:
    """ZooKeeper paused until the broker's client has dropped the connection, then
    resumed within the session timeout: the session resumes and, as with Kafka's
    ZooKeeperClient (Disconnected, then SyncConnected), nothing is redone: no
    session event, the same registration (broker epoch) and controller epoch, and a
    watch set before the pause is not fired by it but by the next change. Then the
    session is expired: EXPIRED and RENEWED, the watch hears SESSION_EXPIRED, and
    the broker registers again (a new broker epoch) and is elected again."""
    from moldau.config.broker import BrokerConfig
    from moldau.metadata.store import EventType, SessionState, WatchedEvent
    from moldau.server.zookeeper_mode import ZooKeeperModeServer
    from moldau.testing.zookeeper import expire_session

    config = BrokerConfig(
        {
            "broker.id": "1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / "data"),
            "zookeeper.connect": zk_connect,
            # kazoo drops a connection whose ping is unanswered for 2/3 of it: the
            # pause ends with a third of the session to spare.
            "zookeeper.session.timeout.ms": "3000",
        }
    )

    async def until(condition: Callable[[], Awaitable[bool] | bool], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while True:
                met = condition()
                if met if isinstance(met, bool) else await met:
                    return
                await asyncio.sleep(0.02)

    async def body() -> None:
        server = ZooKeeperModeServer(config)
        await server.start()
        store = server.store
        heard: list[SessionState] = []
        store.add_session_listener(heard.append)
        fired: list[WatchedEvent] = []
        try:
            broker = server.brokers[0]
            await until(lambda: broker.controller.is_active, 30)
            epoch, session = broker.epoch, store.session_id
            controller_epoch, _ = await store.get("/controller_epoch")
            # A node of the test's own, so that only its watch hears of the changes.
            await store.create("/watched")
            await store.get_children("/watched", fired.append)

            zookeeper.pause()
            try:
                await until(lambda: not store.connected, 10)
            finally:
                zookeeper.resume()
            await until(lambda: store.connected, 10)
            # The watch is set again on the resumed session: a change fires it once.
            await store.create("/watched/after-the-pause")
            await until(lambda: bool(fired), 10)
            assert fired == [WatchedEvent(EventType.CHILD, "/watched")]
            assert store.session_id == session
            assert heard == []
            assert broker.epoch == epoch
            assert (await store.get("/controller_epoch"))[0] == controller_epoch

            fired.clear()
            await store.get_children("/watched", fired.append)
            credentials = store.credentials
            assert credentials is not None
            await asyncio.to_thread(expire_session, zookeeper.connect, credentials)
            await until(lambda: heard == [SessionState.EXPIRED, SessionState.RENEWED], 30)
            assert fired == [WatchedEvent(EventType.SESSION_EXPIRED, "/watched")]

            async def registered_again_and_elected() -> bool:
                stat = await store.exists("/brokers/ids/1")
                epoch_now, _ = await store.get("/controller_epoch")
                return (
                    stat is not None
                    and stat.ephemeral_owner not in (0, session)
                    and broker.epoch == stat.czxid != epoch
                    and int(epoch_now) > int(controller_epoch)
                    and broker.controller.is_active
                )

            await until(registered_again_and_elected, 30)
        finally:
            await server.shutdown()

    asyncio.run(asyncio.wait_for(body(), 90))
