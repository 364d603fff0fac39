"""Segments roll and old ones are deleted by retention, on a live broker; a
LogAppendTime topic stamps records with the broker's time."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP

from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_consume, confluent_produce, create_topic

pytestmark = pytest.mark.integration


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        lo, hi = c.get_watermark_offsets(CTP(topic, 0), timeout=10)
        return int(lo), int(hi)
    finally:
        c.close()


def test_retention_by_size_deletes_old_segments(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker
    b.overrides = {"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"}
    b.start()
    create_topic(b.bootstrap, topic_name, **{"segment.bytes": "20000", "retention.bytes": "60000"})
    records = [(None, b"%05d" % i + b"x" * 995, []) for i in range(300)]
    confluent_produce(b.bootstrap, topic_name, records, **{"batch.num.messages": 5})
    directory = b.data_dir / f"{topic_name}-0"
    assert wait_for(lambda: watermarks(b.bootstrap, topic_name)[0] > 0, timeout=15)
    lo, hi = watermarks(b.bootstrap, topic_name)
    assert hi == 300 and 100 < lo < 300
    assert wait_for(lambda: not list(directory.glob("*.deleted")), timeout=10)
    logs = sorted(directory.glob("*.log"))
    assert int(logs[0].stem) == lo  # the first segment starts at the log start offset
    # A consumer from the beginning starts at the new log start offset.
    c = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "r", "auto.offset.reset": "earliest"}
    )
    c.assign([CTP(topic_name, 0, 0)])  # offset 0 is gone: reset to earliest
    first = None
    deadline = time.monotonic() + 20
    while first is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            first = m
    c.close()
    assert first is not None and first.offset() == lo
    assert first.value()[:5] == b"%05d" % lo


def test_retention_by_time_leaves_the_offsets_going_on(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker
    b.overrides = {"log.retention.check.interval.ms": "200"}
    b.start()
    create_topic(b.bootstrap, topic_name, **{"retention.ms": "1000", "segment.ms": "100"})
    confluent_produce(b.bootstrap, topic_name, [(None, b"old", [])] * 5)
    assert wait_for(lambda: watermarks(b.bootstrap, topic_name) == (5, 5), timeout=20)
    assert confluent_produce(b.bootstrap, topic_name, [(None, b"new", [])]) == [5]


def test_log_append_time_topics_carry_the_brokers_time(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name, **{"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    confluent_produce(bootstrap, topic_name, [(None, b"x", [])] * 3, "zstd")
    after = int(time.time() * 1000)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat"})
    c.assign([CTP(topic_name, 0, 0)])
    stamps = []
    deadline = time.monotonic() + 20
    while len(stamps) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            stamps.append(m.timestamp())
    c.close()
    assert len(stamps) == 3
    for kind, ts in stamps:
        assert kind == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000
    assert [v for *_, v, _ in confluent_consume(bootstrap, topic_name, 3)] == [b"x"] * 3


def test_a_compacted_topic_keeps_the_latest_value_per_key(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker
    b.overrides = {"log.cleaner.backoff.ms": "200", "log.segment.delete.delay.ms": "0"}
    b.start()
    create_topic(
        b.bootstrap,
        topic_name,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "4000",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    records = [(b"key-%d" % (i % 10), b"value-%d-" % i + b"x" * 100, []) for i in range(400)]
    confluent_produce(b.bootstrap, topic_name, records, **{"batch.num.messages": 7})
    directory = b.data_dir / f"{topic_name}-0"

    def size() -> int:
        return sum(p.stat().st_size for p in directory.glob("*.log"))

    full = 400 * 100
    assert wait_for(lambda: size() < full // 2, timeout=30)
    latest = {k: v for k, v, _ in records}
    # Read from the start: the last value seen per key is its latest value.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compacted"})
    c.assign([CTP(topic_name, 0, 0)])
    final: dict[bytes, bytes] = {}
    count = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            if count:
                break
            continue
        assert m.error() is None
        final[m.key()] = m.value()
        count += 1
    c.close()
    assert final == latest
    assert count < 200  # most of the 400 updates are gone
