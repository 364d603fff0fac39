"""Produce and consume with each real Kafka client, the same way, for the tests."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic

Header = tuple[str, bytes]
Rec = tuple[bytes | None, bytes | None, list[Header]]
# (partition, offset, key, value, headers) as read back
Got = tuple[int, int, bytes | None, bytes | None, list[Header]]

BIG_LIMIT = 3_000_000
DEADLINE_S = 30.0


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=dict(configs))
    admin.create_topics([new])[topic].result(timeout=30)


# -- confluent-kafka (librdkafka) -------------------------------------------------------


def confluent_produce(
    bootstrap: str, topic: str, records: Sequence[Rec], compression: str = "none", **extra: object
) -> list[int]:
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": compression,
        "message.max.bytes": BIG_LIMIT,
        "linger.ms": 5,
    }
    conf.update(extra)
    p = Producer(conf)
    offsets: list[int] = [-1] * len(records)
    errors: list[object] = []

    def cb(i: int):  # type: ignore[no-untyped-def]
        def done(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()

        return done

    for i, (k, v, h) in enumerate(records):
        p.produce(topic, key=k, value=v, headers=h or None, partition=0, on_delivery=cb(i))
    assert p.flush(DEADLINE_S) == 0, "undelivered records"
    assert not errors, errors
    return offsets


def confluent_consume(bootstrap: str, topic: str, n: int, partition: int = 0) -> list[Got]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": BIG_LIMIT,
        }
    )
    c.assign([CTP(topic, partition, 0)])
    got: list[Got] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
    finally:
        c.close()
    return got


# -- kafka-python -----------------------------------------------------------------------


def kafka_python_produce(
    bootstrap: str, topic: str, records: Sequence[Rec], compression: str | None = None
) -> list[int]:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=compression, max_request_size=BIG_LIMIT
    )
    try:
        futures = [p.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in records]
        p.flush(DEADLINE_S)
        return [f.get(DEADLINE_S).offset for f in futures]
    finally:
        p.close()


def kafka_python_consume(bootstrap: str, topic: str, n: int) -> list[Got]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=BIG_LIMIT,
        fetch_max_bytes=BIG_LIMIT * 2,
    )
    c.assign([TopicPartition(topic, 0)])
    got: list[Got] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            for records in c.poll(500).values():
                got += [(r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records]
    finally:
        c.close()
    return got


# -- aiokafka ---------------------------------------------------------------------------


def aiokafka_produce(
    bootstrap: str, topic: str, records: Sequence[Rec], compression: str | None = None
) -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[int]:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap, compression_type=compression, max_request_size=BIG_LIMIT
        )
        await p.start()
        try:
            futures = [
                await p.send(topic, key=k, value=v, headers=h, partition=0) for k, v, h in records
            ]
            return [(await f).offset for f in futures]
        finally:
            await p.stop()

    return asyncio.run(asyncio.wait_for(run(), DEADLINE_S))


def aiokafka_consume(bootstrap: str, topic: str, n: int) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Got]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_partition_fetch_bytes=BIG_LIMIT,
            fetch_max_bytes=BIG_LIMIT * 2,
        )
        await c.start()
        got: list[Got] = []
        try:
            c.assign([TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < n and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got += [
                        (r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records
                    ]
        finally:
            await c.stop()
        return got

    return asyncio.run(run())


# -- kcat -------------------------------------------------------------------------------


def kcat_produce(bootstrap: str, topic: str, lines: Sequence[str], *args: str) -> None:
    subprocess.run(
        ["kcat", "-b", bootstrap, "-t", topic, "-P", "-p", "0", *args],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=DEADLINE_S,
    )


def kcat_consume(bootstrap: str, topic: str, n: int, fmt: str = "%o\t%k\t%s\n") -> list[str]:
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-t", topic, "-C", "-p", "0", "-o", "beginning",
         "-c", str(n), "-e", "-f", fmt],
        capture_output=True,
        check=True,
        timeout=DEADLINE_S,
    )  # fmt: skip
    return out.stdout.decode().splitlines()
