"""Kafka transactions (KIP-98, KIP-447) as each client library uses them: aiokafka's,
kafka-python's and KafkaJS's transactional producers commit and abort, and commit a
consumer group's offsets inside a transaction (consume-transform-produce). What they
wrote is read back by other clients: confluent-kafka (librdkafka) with
isolation.level=read_committed sees only what was committed, in order; with
read_uncommitted it sees the aborted records too (they are in the log, as in Kafka);
each library's own consumer with read_committed agrees.

A transaction's records are spread over two partitions and an aborted transaction sits
between two committed ones, so an aborted record a reader let through shows up in the
middle of what it read, and a reader that stopped at an abort misses what came after.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from moldau.testing import nodejs
from tests.integration.clients import DEADLINE_S, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

# The topic each producer writes its transactions to has this many partitions.
PARTITIONS = 2


def values(prefix: str, start: int) -> list[tuple[int, bytes]]:
    """(partition, value) of one transaction: 10 records alternating over the partitions."""
    return [(i % PARTITIONS, f"{prefix}{i}".encode()) for i in range(start, start + 10)]


def transaction_plan() -> list[tuple[list[tuple[int, bytes]], bool]]:
    """Each transaction's records and whether it is aborted: c0..c9, a0..a9 (aborted), c10..c19."""
    return [(values("c", 0), False), (values("a", 0), True), (values("c", 10), False)]


def per_partition(records: Sequence[tuple[int, bytes]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for partition, value in records:
        out[partition].append(value)
    return out


def expected(committed_only: bool) -> dict[int, list[bytes]]:
    return per_partition(
        [r for records, aborted in transaction_plan() if not (aborted and committed_only)
         for r in records]
    )  # fmt: skip


def latest_offsets(bootstrap: str, topic: str, partitions: int, level: IsolationLevel) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    answers = admin.list_offsets(asked, isolation_level=level)
    return [answers[tp].result(10).offset for tp in asked]


def wait_settled(bootstrap: str, topic: str, partitions: int) -> None:
    """Until no transaction is open on topic: each partition's last stable offset is its
    high watermark. A commit or abort is answered once the coordinator has logged it, and
    its markers are written after (in Kafka as here), so a reader started at once could
    find the LSO still before the transaction."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        stable = latest_offsets(bootstrap, topic, partitions, IsolationLevel.READ_COMMITTED)
        high = latest_offsets(bootstrap, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
        if stable == high:
            return
        assert time.monotonic() < deadline, f"{topic}: LSOs {stable}, high watermarks {high}"
        time.sleep(0.1)


def confluent_read(
    bootstrap: str, topic: str, isolation: str, partitions: int = PARTITIONS
) -> dict[int, list[bytes]]:
    """Every partition of topic, once its transactions are settled, read from its start to
    its end with librdkafka: values by partition."""
    wait_settled(bootstrap, topic, partitions)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{isolation}: no end of {topic}, read {got}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add(m.partition())
                continue
            value = m.value()
            assert value is not None
            got[m.partition()].append(value)
    finally:
        c.close()
    return got


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    """The consumer group's committed offset of partition 0 of topic."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


def produce_plain(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(DEADLINE_S) == 0


def new_topics(bootstrap: str, *partitions: int) -> list[str]:
    names = []
    for n in partitions:
        name = f"txn-{uuid.uuid4().hex[:10]}"
        create_topic(bootstrap, name, n)
        names.append(name)
    return names


def check_read_back(bootstrap: str, topic: str) -> None:
    """librdkafka's read_committed sees only the committed transactions, in order; its
    read_uncommitted sees the aborted one too, where it was written."""
    assert confluent_read(bootstrap, topic, "read_committed") == expected(committed_only=True)
    assert confluent_read(bootstrap, topic, "read_uncommitted") == expected(committed_only=False)


# -- aiokafka ---------------------------------------------------------------------------


async def aiokafka_read_committed(bootstrap: str, topic: str, n: int) -> dict[int, list[bytes]]:
    """n records of topic read by aiokafka's consumer with isolation_level=read_committed,
    then half a second more in case anything else comes."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        await c.start()
        c.assign([ATP(topic, p) for p in range(PARTITIONS)])
        await c.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            for tp, records in (await c.getmany(timeout_ms=500)).items():
                got[tp.partition] += [r.value for r in records]
        for tp, records in (await c.getmany(timeout_ms=500)).items():
            got[tp.partition] += [r.value for r in records]
    finally:
        await c.stop()
    return got


def test_aiokafka_commits_and_aborts_and_readers_see_only_what_was_committed(
    bootstrap: str,
) -> None:
    from aiokafka import AIOKafkaProducer

    [topic] = new_topics(bootstrap, PARTITIONS)

    async def write() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{topic}")
        try:
            await p.start()
            for records, aborted in transaction_plan():
                await p.begin_transaction()
                for partition, value in records:
                    await p.send(topic, value=value, partition=partition)
                if aborted:
                    await p.abort_transaction()
                else:
                    await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(write(), DEADLINE_S))
    check_read_back(bootstrap, topic)
    committed = expected(committed_only=True)
    got = asyncio.run(aiokafka_read_committed(bootstrap, topic, sum(map(len, committed.values()))))
    assert got == committed


def test_aiokafka_consume_transform_produce_commits_offsets_with_the_output(
    bootstrap: str,
) -> None:
    """Chunks of 5 input records are upper-cased to the output in a transaction that also
    commits the group's offset (send_offsets_to_transaction). One chunk's transaction is
    aborted: neither its output nor its offset counts, and the chunk is done again from
    the group's committed offset. Each input is in the output once; the group ends at the end."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    source, sink = new_topics(bootstrap, 1, 1)
    group = f"ctp-{source}"
    inputs = [f"w{i}".encode() for i in range(20)]
    produce_plain(bootstrap, source, inputs)

    async def run() -> list[int]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{group}")
        tp = ATP(source, 0)
        committed_after_abort = []
        aborted_once = False
        try:
            await consumer.start()
            await producer.start()
            consumer.assign([tp])
            while (await consumer.position(tp)) < len(inputs):
                batch = (await consumer.getmany(tp, timeout_ms=1000, max_records=5)).get(tp, [])
                if not batch:
                    continue
                await producer.begin_transaction()
                for r in batch:
                    await producer.send(sink, value=r.value.upper(), partition=0)
                await producer.send_offsets_to_transaction({tp: batch[-1].offset + 1}, group)
                if batch[0].offset == 10 and not aborted_once:
                    aborted_once = True
                    await producer.abort_transaction()
                    # The aborted offset is not the group's: it is back at the last commit.
                    committed = await consumer.committed(tp)
                    committed_after_abort.append(committed)
                    consumer.seek(tp, committed)
                else:
                    await producer.commit_transaction()
        finally:
            await producer.stop()
            await consumer.stop()
        return committed_after_abort

    assert asyncio.run(asyncio.wait_for(run(), DEADLINE_S * 2)) == [10]
    outputs = [v.upper() for v in inputs]
    assert confluent_read(bootstrap, sink, "read_committed", 1) == {0: outputs}
    # The aborted chunk's output is in the log, where it was written, for the uncommitted.
    assert confluent_read(bootstrap, sink, "read_uncommitted", 1) == {
        0: outputs[:15] + outputs[10:]
    }
    assert committed_offset(bootstrap, group, source) == len(inputs)


# -- kafka-python -----------------------------------------------------------------------


def test_kafka_python_commits_and_aborts_and_readers_see_only_what_was_committed(
    bootstrap: str,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    [topic] = new_topics(bootstrap, PARTITIONS)
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{topic}")
    try:
        p.init_transactions()
        for records, aborted in transaction_plan():
            p.begin_transaction()
            for partition, value in records:
                p.send(topic, value=value, partition=partition)
            # Else an abort drops the records still in the producer's buffer, as Java's does.
            p.flush()
            if aborted:
                p.abort_transaction()
            else:
                p.commit_transaction()
    finally:
        p.close(timeout=10)
    check_read_back(bootstrap, topic)

    committed = expected(committed_only=True)
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([KTP(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, got.values())) < 20 and time.monotonic() < deadline:
            for tp, records in c.poll(500).items():
                got[tp.partition] += [r.value for r in records]
        for tp, records in c.poll(500).items():
            got[tp.partition] += [r.value for r in records]
    finally:
        c.close()
    assert got == committed


def test_kafka_python_sends_offsets_with_the_group_metadata_of_its_consumer(
    bootstrap: str,
) -> None:
    """KIP-447: the consumer's group metadata (generation, member id) goes with the
    offsets; a committed transaction makes them the group's, an aborted one does not."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    source, sink = new_topics(bootstrap, 1, 1)
    group = f"kp-ctp-{source}"
    inputs = [f"w{i}".encode() for i in range(10)]
    produce_plain(bootstrap, source, inputs)

    consumer = KafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"kp-{group}")
    tp = KTP(source, 0)
    try:
        producer.init_transactions()
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(inputs) and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(500, max_records=5).get(tp, [])]
        assert got == inputs
        metadata = consumer.group_metadata()
        assert metadata.generation_id > 0, metadata  # a member of the group, not just its id

        def transaction(chunk: range, abort: bool) -> None:
            producer.begin_transaction()
            for i in chunk:
                producer.send(sink, value=inputs[i].upper(), partition=0)
            offsets = {tp: OffsetAndMetadata(chunk.stop, "", -1)}
            producer.send_offsets_to_transaction(offsets, metadata)
            if abort:
                producer.abort_transaction()
            else:
                producer.commit_transaction()

        transaction(range(0, 5), abort=False)
        transaction(range(5, 10), abort=True)
        assert consumer.committed(tp) == 5
        transaction(range(5, 10), abort=False)
        assert consumer.committed(tp) == 10
    finally:
        producer.close(timeout=10)
        consumer.close()
    assert confluent_read(bootstrap, sink, "read_committed", 1) == {0: [v.upper() for v in inputs]}


# -- KafkaJS ----------------------------------------------------------------------------


def test_kafkajs_commits_aborts_and_sends_offsets(bootstrap: str) -> None:
    """tests/js/transactions.js: commit, abort, commit on two partitions, then a
    consume-transform-produce whose second transaction (output and offsets) is aborted
    and done again."""
    topic, source, sink = new_topics(bootstrap, PARTITIONS, 1, 1)
    group = f"kjs-ctp-{source}"
    inputs = [f"w{i}".encode() for i in range(10)]
    produce_plain(bootstrap, source, inputs)

    done = nodejs.run("transactions.js", bootstrap, topic, source, sink, group)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-6000:]}"
    assert done.stdout.split() == ["DONE", "10"]

    check_read_back(bootstrap, topic)
    outputs = [v.upper() for v in inputs]
    assert confluent_read(bootstrap, sink, "read_committed", 1) == {0: outputs}
    assert confluent_read(bootstrap, sink, "read_uncommitted", 1) == {0: outputs + outputs[5:]}
    assert committed_offset(bootstrap, group, source) == len(inputs)
