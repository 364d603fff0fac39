"""Incremental fetch sessions (KIP-227) over real sockets: kafka-python's consumer
opens one by itself; once it has read its 100 partitions, its idle Fetches and the
broker's answers are a few dozen bytes, and a record in one partition still comes
through. The session errors are Kafka's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from tests.integration import requests as rq
from tests.integration.clients import create_topic
from tests.integration.kafka_wire import WireClient
from tests.integration.proxy import proxied_broker

pytestmark = pytest.mark.integration

PARTITIONS = 100
FETCH = 1


def test_an_idle_kafka_python_consumer_sends_and_gets_only_a_few_bytes(
    tmp_path: Path, topic_name: str
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    with proxied_broker(tmp_path / "data") as (bootstrap, proxy):
        create_topic(bootstrap, topic_name, PARTITIONS)
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(PARTITIONS):
            p.produce(topic_name, value=b"v%d" % i, partition=i)
        assert p.flush(30) == 0

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100)
        try:
            consumer.assign([TopicPartition(topic_name, i) for i in range(PARTITIONS)])
            consumer.seek_to_beginning()
            got = poll(consumer, PARTITIONS)
            assert sorted((r.partition, r.value) for r in got) == [
                (i, b"v%d" % i) for i in range(PARTITIONS)
            ]

            mark = len(proxy.exchanges)
            poll(consumer, 1, seconds=1.5)
            # The first Fetch after the records names the 100 new fetch offsets (some
            # 3 KB, as a full Fetch); the ones after that name nothing.
            idle = [(req, resp) for api, req, resp in proxy.exchanges[mark:] if api == FETCH][1:]
            assert len(idle) >= 3, idle
            assert all(req < 100 and resp < 40 for req, resp in idle), idle

            p.produce(topic_name, value=b"late", partition=37)
            assert p.flush(30) == 0
            (late,) = poll(consumer, 1)
            assert (late.partition, late.offset, late.value) == (37, 1, b"late")
        finally:
            consumer.close()


def poll(consumer: Any, n: int, seconds: float = 30) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while len(got) < n and time.monotonic() < deadline:
        for records in consumer.poll(100).values():
            got += records
    return got


def session_fetch(
    topic: str, offsets: dict[int, int], session_id: int, epoch: int, forget: tuple[int, ...] = ()
) -> Any:
    return rq.request(
        FETCH,
        12,
        replica_id=-1,
        max_wait=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
                    for p, o in offsets.items()
                ],
            }
        ] if offsets else [],
        forgotten_topics_data=[{"topic": topic, "partitions": list(forget)}] if forget else [],
    )  # fmt: skip


def answered(response: Any) -> dict[int, int]:
    """partition -> records size, of what a Fetch answer names."""
    return {
        p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions
    }


def test_session_errors_and_closing_a_session_are_kafkas(bootstrap: str, topic_name: str) -> None:
    with WireClient(bootstrap) as c:
        c.request(rq.create_topics(topic_name, partitions=2))
        c.request(rq.produce(topic_name, 1, build_batch([(None, b"x")])))

        r = c.request(session_fetch(topic_name, {0: 0}, 424242, 1))
        assert (r.error_code, r.session_id) == (ErrorCode.fetch_session_id_not_found, 0)

        r = c.request(session_fetch(topic_name, {0: 0, 1: 0}, 0, 0))
        assert r.error_code == ErrorCode.none and r.session_id != 0
        assert list(answered(r)) == [0, 1] and answered(r)[0] == 0 and answered(r)[1] > 0
        sid = r.session_id
        # Partition 1 has its record: nothing new anywhere, so nothing is named.
        r = c.request(session_fetch(topic_name, {1: 1}, sid, 1))
        assert (r.error_code, r.session_id, answered(r)) == (ErrorCode.none, sid, {})
        r = c.request(session_fetch(topic_name, {}, sid, 1))
        assert r.error_code == ErrorCode.invalid_fetch_session_epoch

        c.request(rq.produce(topic_name, 0, build_batch([(None, b"y")])))
        r = c.request(session_fetch(topic_name, {}, sid, 2, forget=(1,)))
        assert r.session_id == sid and list(answered(r)) == [0] and answered(r)[0] > 0

        r = c.request(session_fetch(topic_name, {0: 0}, sid, -1))  # close, open none
        assert (r.error_code, r.session_id) == (ErrorCode.none, 0) and answered(r)[0] > 0
        r = c.request(session_fetch(topic_name, {}, sid, 3))
        assert r.error_code == ErrorCode.fetch_session_id_not_found
