"""Stop the broker (SIGTERM) or kill it (kill -9), start it again: every
acknowledged record is there, in order, at the same offset; a torn tail is cut,
never served; a topic deleted and created again under its name inherits nothing of
the old one."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from moldau.protocol.records import build_batch
from moldau.storage.checkpoint import OffsetCheckpointFile
from moldau.storage.partition_name import TopicPartition
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_consume, confluent_produce, create_topic

pytestmark = pytest.mark.integration


def values(
    got: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
) -> list[tuple[int, bytes | None]]:
    return [(o, v) for _, o, _, v, _ in got]


def test_clean_restart_keeps_every_record_and_offset(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker.start()
    create_topic(b.bootstrap, topic_name, 2)
    records = [(b"k%d" % i, b"v%d" % i, []) for i in range(1000)]
    assert confluent_produce(b.bootstrap, topic_name, records, "snappy") == list(range(1000))
    assert b.stop() == 0
    b.start()
    got = confluent_consume(b.bootstrap, topic_name, 1000)
    assert values(got) == [(i, b"v%d" % i) for i in range(1000)]
    assert confluent_produce(b.bootstrap, topic_name, [(None, b"after", [])]) == [1000]


def test_kill_9_loses_no_acknowledged_record(fresh_broker: BrokerProcess, topic_name: str) -> None:
    b = fresh_broker.start()
    create_topic(b.bootstrap, topic_name)
    acked: dict[int, bytes] = {}
    producer = Producer(
        {"bootstrap.servers": b.bootstrap, "linger.ms": 2, "acks": 1, "message.timeout.ms": 3000}
    )

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    stop = threading.Event()

    def produce_until_stopped() -> None:
        i = 0
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                producer.produce(
                    topic_name, value=b"rec-%d" % i, partition=0, on_delivery=on_delivery
                )
                i += 1
            except BufferError:
                pass
            producer.poll(0)

    t = threading.Thread(target=produce_until_stopped)
    t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.kill()  # in the middle of the stream
    stop.set()
    t.join(30)
    producer.flush(5)  # whatever was in flight fails: the broker is gone
    assert len(acked) >= 20_000
    b.start()
    got = dict(values(confluent_consume(b.bootstrap, topic_name, max(acked) + 1)))
    missing = [o for o in acked if got.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. offset {missing[0]}"
    assert sorted(got) == list(range(len(got)))  # contiguous from 0


def test_a_torn_tail_is_cut_not_served(fresh_broker: BrokerProcess, topic_name: str) -> None:
    b = fresh_broker.start()
    create_topic(b.bootstrap, topic_name)
    confluent_produce(b.bootstrap, topic_name, [(None, b"v%d" % i, []) for i in range(10)])
    b.kill()
    segment = b.data_dir / f"{topic_name}-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    torn = build_batch([(None, b"never acknowledged")], base_offset=10)
    with segment.open("ab") as f:
        f.write(torn[: len(torn) - 7])  # a write the crash cut short
    b.start()
    got = values(confluent_consume(b.bootstrap, topic_name, 10))
    assert got == [(i, b"v%d" % i) for i in range(10)]
    # Served only once its logs are loaded (the broker listens before): cut by then.
    assert segment.stat().st_size == size
    assert confluent_produce(b.bootstrap, topic_name, [(None, b"next", [])]) == [10]
    got = values(confluent_consume(b.bootstrap, topic_name, 11))
    assert got[-1] == (10, b"next")


def test_committed_offsets_survive_kill_9(fresh_broker: BrokerProcess, topic_name: str) -> None:
    b = fresh_broker.start()
    create_topic(b.bootstrap, topic_name, 3)
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": "durable-group",
        "enable.auto.commit": False,
    }
    c = Consumer(conf)
    c.commit(offsets=[CTP(topic_name, p, 10 + p) for p in range(3)], asynchronous=False)
    c.close()
    b.kill()
    b.start()
    c = Consumer(conf)
    committed = c.committed([CTP(topic_name, p) for p in range(3)], timeout=20)
    c.close()
    assert [tp.offset for tp in committed] == [10, 11, 12]


def test_data_dir_layout_is_kafkas(fresh_broker: BrokerProcess, topic_name: str) -> None:
    b = fresh_broker.start()
    create_topic(b.bootstrap, topic_name)
    # Two batches of more than index.interval.bytes (4096): the second is indexed
    # (Moldau creates an index file with its first entry).
    for _ in range(2):
        confluent_produce(b.bootstrap, topic_name, [(None, b"x" * 5000, [])])
    b.stop()
    d: Path = b.data_dir / f"{topic_name}-0"
    names = {p.name for p in d.iterdir()}
    assert {"00000000000000000000.log", "00000000000000000000.index",
            "00000000000000000000.timeindex", "leader-epoch-checkpoint"} <= names  # fmt: skip
    top = {p.name for p in b.data_dir.iterdir()}
    assert {"meta.properties", "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
            "log-start-offset-checkpoint", ".kafka_cleanshutdown"} <= top  # fmt: skip


def test_a_recreated_topic_inherits_nothing_of_the_deleted_one(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    # The first topic's retention moves its log start past 100; a clean stop
    # checkpoints that. The topic is deleted, created again under the same name,
    # written to, and the broker killed before any periodic checkpoint: the new
    # log must not take the old one's log start (its records would all be hidden,
    # then deleted by retention).
    b = fresh_broker
    b.overrides["log.retention.check.interval.ms"] = "200"
    b.start()
    create_topic(b.bootstrap, topic_name, **{"segment.bytes": "1024", "retention.bytes": "1024"})
    old = [(None, b"old-%03d" % i, []) for i in range(400)]
    confluent_produce(b.bootstrap, topic_name, old, **{"batch.num.messages": 10})
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "watch"})
    try:
        low = lambda: c.get_watermark_offsets(CTP(topic_name, 0), timeout=5)[0]  # noqa: E731
        assert wait_for(lambda: low() > 100, 20)
    finally:
        c.close()
    tp = TopicPartition(topic_name, 0)
    starts = OffsetCheckpointFile(b.data_dir / "log-start-offset-checkpoint")
    b.stop()
    assert starts.read().get(tp, 0) > 100
    b.overrides.clear()  # retention and checkpoints at Kafka's (slow) defaults
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(30)

    def created() -> bool:
        try:
            create_topic(b.bootstrap, topic_name)
        except KafkaException as e:  # still being deleted
            assert e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, e
            return False
        return True

    assert wait_for(created, 30, interval=0.2)
    new = [(None, b"new-%03d" % i, []) for i in range(50)]
    assert confluent_produce(b.bootstrap, topic_name, new) == list(range(50))
    b.kill()
    b.start()
    got = values(confluent_consume(b.bootstrap, topic_name, 50))
    assert got == [(i, b"new-%03d" % i) for i in range(50)]
