"""Thousands of partitions on one broker: creating them costs work in proportion
to their number (the metadata store appends to its journal), not to its square,
a restart brings them all back, and a broker takes clients while it loads them.
Work is counted in the bytes the broker process writes (/proc/<pid>/io), not in
seconds (speed is bench/'s business)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.storage.log_manager import LogManager
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_consume, confluent_produce, create_topic
from tests.integration.in_process import running_broker, single_broker

pytestmark = pytest.mark.integration


def written(pid: int) -> int:
    """Bytes the process has written through write calls so far."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/<pid>/io")


def online(admin: AdminClient, topic: str, partitions: int) -> bool:
    md = admin.list_topics(topic, timeout=20).topics.get(topic)
    return (
        md is not None
        and len(md.partitions) == partitions
        and all(p.leader >= 0 for p in md.partitions.values())
    )


def test_creating_partitions_costs_the_store_linear_work(fresh_broker: BrokerProcess) -> None:
    broker = fresh_broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    sizes = []
    for topic, n in (("small", 200), ("large", 2000)):
        before = written(broker.pid)
        admin.create_topics([NewTopic(topic, n, 1)])[topic].result(60)
        assert wait_for(lambda: online(admin, topic, n), 60)  # noqa: B023
        sizes.append(written(broker.pid) - before)
    # Ten times the partitions: about ten times the bytes (the store rewriting its
    # whole tree on each write, as it once did, made it about a hundred).
    assert sizes[1] < 20 * sizes[0], sizes

    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert wait_for(lambda: online(admin, "large", 2000) and online(admin, "small", 200), 60)


def test_a_starting_broker_accepts_clients_and_holds_them_until_its_logs_are_loaded(
    tmp_path: Path, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Log loading is held back (a slow disk, as 10,000 logs or a recovery after a
    crash make it) by an event: meanwhile the broker takes connections, Metadata
    says there is no leader yet (LEADER_NOT_AVAILABLE, retriable), a producer's
    record and an admin client's CreateTopics wait; once the logs are loaded, the
    record is written after the one from before the restart, and the topic created."""

    async def first_run() -> None:
        async with running_broker(tmp_path) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            await asyncio.to_thread(create_topic, bootstrap, topic_name)
            await asyncio.to_thread(confluent_produce, bootstrap, topic_name, [(None, b"a", [])])

    asyncio.run(first_run())

    release = threading.Event()
    load = LogManager.startup

    def slow_startup(self: LogManager, *args: Any, **kwargs: Any) -> None:
        release.wait(60)
        load(self, *args, **kwargs)

    monkeypatch.setattr(LogManager, "startup", slow_startup)

    def while_loading(bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(topic_name, timeout=20)
        assert [b.id for b in md.brokers.values()] == [1]
        assert md.topics[topic_name].error.code() == KafkaError.LEADER_NOT_AVAILABLE
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        delivered: list[tuple[object, int]] = []
        producer.produce(
            topic_name, b"b", partition=0,
            on_delivery=lambda err, msg: delivered.append((err, msg.offset())),
        )  # fmt: skip
        assert producer.flush(1.5) == 1, "the record went through while logs were loading"
        # A new admin client: its first Metadata is answered while the broker starts.
        fresh = AdminClient({"bootstrap.servers": bootstrap})
        created = fresh.create_topics([NewTopic(f"{topic_name}-new", 1, 1)])
        time.sleep(1.5)  # past the Metadata hold
        release.set()
        assert producer.flush(30) == 0
        assert delivered == [(None, 1)]
        created[f"{topic_name}-new"].result(30)

    async def second_run() -> None:
        cluster = single_broker(tmp_path)
        starting = asyncio.create_task(cluster.start())
        broker = cluster.brokers[0]
        try:
            while not broker.servers:
                await asyncio.sleep(0.01)
            bootstrap = f"127.0.0.1:{broker.servers[0].port}"
            await asyncio.to_thread(while_loading, bootstrap)
            await starting
            got = await asyncio.to_thread(confluent_consume, bootstrap, topic_name, 2)
            assert [g[3] for g in got] == [b"a", b"b"]
        finally:
            release.set()
            await starting
            await cluster.shutdown()

    asyncio.run(second_run())
