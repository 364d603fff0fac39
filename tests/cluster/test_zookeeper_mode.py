"""`moldau serve` with zookeeper.connect: a real broker process keeps its metadata
in a real ZooKeeper server, in Kafka's znode layout, and finds it again after
kill -9; mistakes get one clear line and a non-zero exit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.testing.process import BrokerProcess
from moldau.testing.zookeeper import ZooKeeperServer
from tests.integration.clients import confluent_consume, confluent_produce, create_topic

SESSION_MS = "2000"


def read_znodes(connect: str, paths: list[str]) -> dict[str, bytes | None]:
    async def body() -> dict[str, bytes | None]:
        s = ZooKeeperStore(connect)
        await s.start()
        try:
            out: dict[str, bytes | None] = {}
            for p in paths:
                found = await s.get_or_none(p)
                out[p] = None if found is None else found[0]
            return out
        finally:
            await s.close()

    return asyncio.run(body())


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moldau", "serve", "--host", "127.0.0.1", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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

            async def registered_again() -> bool:
                stat = await server.store.exists("/brokers/ids/1")
                return stat is not None and stat.ephemeral_owner not in (0, before)

            for _ in range(300):
                if await registered_again():
                    break
                await asyncio.sleep(0.05)
            assert await registered_again()
            controller = await server.store.get_or_none("/controller")
            assert controller is not None and json.loads(controller[0])["brokerid"] == 1
            records = [(b"k", f"v{i}".encode(), []) for i in range(10)]
            offsets = await asyncio.to_thread(confluent_produce, bootstrap, topic_name, records)
            assert offsets == list(range(10))
            got = await asyncio.to_thread(confluent_consume, bootstrap, topic_name, 10)
            assert [g[3] for g in got] == [r[1] for r in records]
        finally:
            await server.shutdown()

    asyncio.run(asyncio.wait_for(body(), 90))


def test_three_broker_processes_form_one_cluster(
    tmp_path: Path, zk_connect: str, topic_name: str
) -> None:
    """Three `moldau serve` processes on one ZooKeeper: one controller, partitions
    spread over the brokers, every broker's metadata names the others, clients
    produce to and consume from each partition's leader, and a consumer group's
    coordinator may live on any broker."""
    from confluent_kafka.admin import AdminClient

    overrides = {
        "zookeeper.connect": zk_connect,
        "zookeeper.session.timeout.ms": SESSION_MS,
        "offsets.topic.num.partitions": "6",
        "group.initial.rebalance.delay.ms": "0",
    }
    brokers = [
        BrokerProcess(tmp_path / f"b{i}", {**overrides, "broker.id": str(i)}) for i in (1, 2, 3)
    ]
    try:
        for b in brokers:
            b.start()
        create_topic(brokers[0].bootstrap, topic_name, 6)
        nodes = read_znodes(zk_connect, [f"/brokers/topics/{topic_name}", "/controller"])
        assignment = json.loads(nodes[f"/brokers/topics/{topic_name}"] or b"{}")["partitions"]
        assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3]
        controller = json.loads(nodes["/controller"] or b"{}")["brokerid"]
        assert controller in (1, 2, 3)

        # Every broker learned of every other broker and of the topic's leaders.
        for b in brokers:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            md = admin.list_topics(topic_name, timeout=20)
            assert sorted(md.brokers) == [1, 2, 3]
            leaders = {p: m.leader for p, m in md.topics[topic_name].partitions.items()}
            assert leaders == {int(p): r[0] for p, r in assignment.items()}

        # Until followers replicate, a topic with more replicas than one is refused
        # rather than created with a high watermark that could never move.
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import NewTopic

        future = admin.create_topics([NewTopic(f"{topic_name}-rf2", 1, 2)])[f"{topic_name}-rf2"]
        with pytest.raises(KafkaException, match="Replication factor 2 is not supported yet"):
            future.result(timeout=30)

        records = [(None, f"v{i}".encode(), []) for i in range(30)]
        for partition in range(6):
            produce_to(brokers[2].bootstrap, topic_name, partition, records)
        for partition in range(6):
            got = confluent_consume(brokers[0].bootstrap, topic_name, 30, partition=partition)
            assert [g[3] for g in got] == [r[1] for r in records]
    finally:
        for b in brokers:
            b.kill()


def produce_to(bootstrap: str, topic: str, partition: int, records: list[tuple]) -> None:  # type: ignore[type-arg]
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    for k, v, _ in records:
        p.produce(topic, key=k, value=v, partition=partition, on_delivery=_collect(errors))
    assert p.flush(30) == 0
    assert not errors, errors


def _collect(errors: list[object]):  # type: ignore[no-untyped-def]
    def done(err, _msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)

    return done


def leaders_seen_by(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def test_controller_failover_and_a_killed_brokers_partitions(
    tmp_path: Path, zk_connect: str, topic_name: str
) -> None:
    """kill -9 of the controller: another broker takes over; the partitions the dead
    broker led have no leader (one replica each) while the others stay served; when
    it restarts, they are led by it again with every record."""
    from moldau.testing.process import wait_for

    overrides = {"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": SESSION_MS}
    brokers = {
        i: BrokerProcess(tmp_path / f"b{i}", {**overrides, "broker.id": str(i)}) for i in (1, 2, 3)
    }
    try:
        for b in brokers.values():
            b.start()
        create_topic(brokers[1].bootstrap, topic_name, 3)
        records = [(None, f"v{i}".encode(), []) for i in range(20)]
        for partition in range(3):
            produce_to(brokers[1].bootstrap, topic_name, partition, records)

        def controller() -> int | None:
            node = read_znodes(zk_connect, ["/controller"])["/controller"]
            return None if node is None else int(json.loads(node)["brokerid"])

        first = controller()
        assert first is not None
        led = {p for p, leader in leaders_seen_by(brokers[1].bootstrap, topic_name).items()
               if leader == first}  # fmt: skip
        assert len(led) == 1
        brokers[first].kill()
        survivor = next(b for i, b in brokers.items() if i != first)

        assert wait_for(lambda: controller() not in (None, first), 30)
        expected = {p: (-1 if p in led else leaders_seen_by(survivor.bootstrap, topic_name)[p])
                    for p in range(3)}  # fmt: skip
        assert wait_for(lambda: leaders_seen_by(survivor.bootstrap, topic_name) == expected, 30)
        for p in set(range(3)) - led:
            got = confluent_consume(survivor.bootstrap, topic_name, 20, partition=p)
            assert [g[3] for g in got] == [r[1] for r in records]

        brokers[first].start(timeout=60)
        assert wait_for(
            lambda: all(leaders_seen_by(survivor.bootstrap, topic_name)[p] == first for p in led),
            30,
        )
        (p,) = led
        got = confluent_consume(survivor.bootstrap, topic_name, 20, partition=p)
        assert [g[3] for g in got] == [r[1] for r in records]
    finally:
        for b in brokers.values():
            b.kill()
